"""A directory's listing passes over what is not a regular file or folder, and says so."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from s3kv.stores import LocalStore

pytestmark = pytest.mark.unit


def test_links_fifos_and_sockets_are_passed_over_named_and_never_listed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (outside / "d").mkdir(parents=True)
    (outside / "d" / "x.bin").write_bytes(b"secret")
    (root / "a" / "b" / "ok.bin").write_bytes(b"ok")
    (root / "a" / "b" / "link.bin").symlink_to(outside / "d" / "x.bin")
    (root / "a" / "dir").symlink_to(outside / "d", target_is_directory=True)
    (root / "a" / "dangling").symlink_to(outside / "nowhere")
    os.mkfifo(root / "a" / "b" / "fifo.bin")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "a" / "sock"))
        store = LocalStore(root)
        assert [i.key for i in store.list("")] == ["a/b/ok.bin"]
        assert store.passed_over() == {
            "a/b/fifo.bin": "a FIFO",
            "a/b/link.bin": "a symbolic link",
            "a/dangling": "a symbolic link",
            "a/dir": "a symbolic link",
            "a/sock": "a socket",
        }


def test_only_what_a_listing_reaches_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "link").symlink_to(tmp_path / "b", target_is_directory=True)
    (tmp_path / "b" / "link").symlink_to(tmp_path / "a", target_is_directory=True)
    store = LocalStore(tmp_path)
    assert list(store.list("b/")) == []
    assert store.passed_over() == {"b/link": "a symbolic link"}
    assert list(store.list("a")) == []  # a prefix that is a folder's name reaches into it
    assert store.passed_over() == {"b/link": "a symbolic link", "a/link": "a symbolic link"}
