"""Issue 29, point 1: forgetting namespaces (``s3kv rm``, :func:`s3kv.ops.remove.remove`).

Every rank's blocks and the manifest go; other namespaces are never touched, also while a
writer fills one of them (on moto, moto's server and Ceph RGW over HTTP and TLS: the
wire is what would differ); a writer still storing into the namespace being removed
keeps what it stored, with its manifest; a namespace whose folder starts like the one
removed, stray keys and temp files of writes in progress are left alone.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import s3kv.progress
from s3kv import (
    Downloader,
    InvalidInputError,
    KeyMapper,
    LeaseHeldError,
    Namespace,
    NothingMatchedError,
    S3Settings,
    Uploader,
    make_offload_key,
)
from s3kv.naming.location import parse_location
from s3kv.ops.gc.lease import GCLease
from s3kv.ops.remove import remove
from s3kv.progress import Progress
from s3kv.stores import open_store
from tests.conftest import Backend

pytestmark = pytest.mark.functional

OLD = Namespace(model_name="meta-llama/Llama-3.1-8B-Instruct", tokens_per_hash=16,
                dtype="bfloat16", tp_size=2)  # fmt: skip
NEW = Namespace(model_name="meta-llama/Llama-3.1-8B-Instruct", tokens_per_hash=16,
                dtype="float16", tp_size=2)  # fmt: skip
ROW = 1024


def keys(n: int, start: int = 0) -> list[bytes]:
    return [make_offload_key((start + i).to_bytes(4, "big") * 8, 0) for i in range(n)]


def row(key: bytes) -> bytes:
    return (key * (ROW // len(key) + 1))[:ROW]


def store_blocks(backend: Backend, ns: Namespace, ks: list[bytes], *, ranks: int = 1) -> None:
    for rank in range(ranks):
        with Uploader(backend.location, ns.for_rank(rank), settings=backend.settings) as up:
            assert up.put_blocks({k: row(k) for k in ks}).ok


def keys_of(backend: Backend, ns: Namespace) -> list[str]:
    prefix = parse_location(backend.location).prefix
    root = f"{prefix}/" if prefix else ""
    return [k for k in backend.raw_keys(root)
            if k[len(root):].split("/")[0] in (ns.folder, *(f"{ns.folder}_r{r}" for r in range(8)))
            ]  # fmt: skip


def test_rm_leaves_a_namespace_a_writer_fills_meanwhile(every_s3_backend: Backend) -> None:
    backend = every_s3_backend
    store_blocks(backend, OLD, keys(40), ranks=2)
    stored: list[bytes] = []
    batch_done, stop = threading.Event(), threading.Event()
    during = []

    def writer() -> None:  # the new deployment's tier, storing all along
        with Uploader(backend.location, NEW, settings=backend.settings) as up:
            i = 1000
            while not stop.is_set():
                report = up.put_blocks({k: row(k) for k in keys(8, i)})
                assert report.ok, report
                stored.extend(report.stored)
                i += 8
                batch_done.set()

    def on_progress(p: Progress) -> None:
        # rm starts deleting only once a batch of the writer's lands, so the two overlap
        if p.phase == "deleting" and not during:
            batch_done.clear()
            assert batch_done.wait(60)
            during.append(len(stored))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert batch_done.wait(60)
        # the same model, another dtype: a vLLM upgrade that changed a hashed field
        report = remove(backend.location, namespaces=[OLD.digest], settings=backend.settings,
                        on_progress=on_progress)  # fmt: skip
        assert batch_done.wait(60)  # and the writer stored more after rm ended
    finally:
        stop.set()
        thread.join(60)
    assert during and 0 < during[0] < len(stored)
    assert report.ok, report
    assert [n.folder for n in report.namespaces] == [OLD.folder]
    (old,) = report.namespaces
    assert (old.blocks, old.ranks, old.manifest, old.blocks_left) == (80, (0, 1), "present", 0)
    assert (report.blocks_deleted, report.bytes_freed, report.manifests_deleted) == (
        80, 80 * ROW, 1)  # fmt: skip
    assert keys_of(backend, OLD) == []
    # the other namespace: its manifest and every block its writer stored, intact
    new_keys = keys_of(backend, NEW)
    mapper = KeyMapper(NEW, prefix=parse_location(backend.location).prefix)
    assert set(new_keys) == {mapper.config_key(), *(mapper.key_for(k) for k in stored)}
    with Downloader(backend.location, NEW, settings=backend.settings) as down:
        into = [bytearray(ROW) for _ in stored]
        loaded = down.get_blocks(stored, into=into)
    assert loaded.ok and [bytes(b) for b in into] == [row(k) for k in stored]


def test_a_writer_into_the_namespace_being_removed_keeps_its_blocks_and_manifest(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_blocks(backend, OLD, keys(10))
    late = keys(1, 500)

    def store_late(p: Progress) -> None:  # once rm deleted every block it listed
        if p.phase == "deleting" and p.blocks_done == p.blocks_total and not late_stored:
            late_stored.append(True)
            store_blocks(backend, OLD, late)

    late_stored: list[bool] = []
    monkeypatch.setattr(s3kv.progress, "EVENT_SECONDS", 0.0)  # every event reaches us
    report = remove(backend.location, namespaces=[OLD.digest], settings=backend.settings,
                    on_progress=store_late)  # fmt: skip
    (old,) = report.namespaces
    assert not report.ok and old.blocks_left == 1 and old.manifest_left
    assert report.blocks_deleted == 10 and report.manifests_deleted == 0
    mapper = KeyMapper(OLD, prefix=parse_location(backend.location).prefix)
    assert set(keys_of(backend, OLD)) == {mapper.config_key(), mapper.key_for(late[0])}
    again = remove(backend.location, namespaces=[OLD.folder], settings=backend.settings)
    assert again.ok and again.blocks_deleted == 1 and again.manifests_deleted == 1
    assert keys_of(backend, OLD) == []


def test_only_the_namespace_named_goes(backend: Backend) -> None:
    # a model whose folder starts like OLD's rank folders: listed by OLD's prefixes
    alike = Namespace(model_name=f"{OLD.folder}_rx", tokens_per_hash=16, dtype="bfloat16")
    assert f"{alike.folder}_r0".startswith(f"{OLD.folder}_r")
    store_blocks(backend, OLD, keys(3))
    store_blocks(backend, alike, keys(3))
    store_blocks(backend, NEW, keys(3))
    prefix = parse_location(backend.location).prefix
    stray = f"{prefix}/{OLD.folder}_r0/notes.txt".lstrip("/")
    backend.raw_put(stray, b"not a block")
    before = {ns.folder: keys_of(backend, ns) for ns in (alike, NEW)}
    dry = remove(backend.location, namespaces=[OLD.folder], dry_run=True,
                 settings=backend.settings)  # fmt: skip
    assert (dry.blocks_deleted, dry.manifests_deleted, dry.delete_requests) == (3, 1, 0)
    assert len(keys_of(backend, OLD)) == 5  # a dry run deletes nothing
    report = remove(backend.location, namespaces=[OLD.folder], settings=backend.settings)
    assert report.ok and report.blocks_deleted == 3 and report.stray_keys == 1
    assert keys_of(backend, OLD) == [stray]  # the stray key is left alone
    assert {ns.folder: keys_of(backend, ns) for ns in (alike, NEW)} == before


def test_temp_files_of_live_writes_stay_and_stale_ones_go(tmp_path: Path) -> None:
    root = tmp_path / "kv"
    backend = Backend("local", str(root), S3Settings.resolve(), root=root)
    store_blocks(backend, OLD, keys(2))
    block = root / KeyMapper(OLD).key_for(keys(1)[0])
    stale, live = Path(f"{block}_aaaa.tmp"), Path(f"{block}_bbbb.tmp")
    stale.write_bytes(b"half")
    live.write_bytes(b"half")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    report = remove(root, namespaces=[OLD.folder], settings=backend.settings)
    assert report.ok and report.temp_files_deleted == 1 and not stale.exists()
    assert [p for p in root.rglob("*") if p.is_file()] == [live]  # a write in progress
    # folders left empty are removed; the one the live write goes to stays
    assert [p.name for p in root.iterdir()] == [f"{OLD.folder}_r0"]


def test_filters_that_match_nothing_and_a_held_lease(backend: Backend) -> None:
    store_blocks(backend, OLD, keys(2))
    with pytest.raises(InvalidInputError, match="needs --namespace"):
        remove(backend.location, settings=backend.settings)
    with pytest.raises(NothingMatchedError, match="--namespace 330cb matched") as caught:
        remove(backend.location, namespaces=["330cb"], models=["org/none"],
               settings=backend.settings)  # fmt: skip
    assert "--model org/none matched no namespace" in str(caught.value)
    with pytest.raises(NothingMatchedError, match=f"did you mean {OLD.digest}"):
        remove(backend.location, namespaces=[OLD.digest[:-1] + "0"], settings=backend.settings)
    loc = parse_location(backend.location)
    store = open_store(loc, backend.settings)
    lease = GCLease(store, loc, backend.settings)
    lease.acquire()  # a gc running on the location
    try:
        with pytest.raises(LeaseHeldError):
            remove(backend.location, namespaces=[OLD.folder], settings=backend.settings)
    finally:
        lease.release()
        store.close()
    assert len(keys_of(backend, OLD)) == 3  # nothing deleted
