"""Issue 12 part A: hostile and unlucky inputs to the manifest parser, locations and flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3kv import Namespace
from s3kv.cli import main
from s3kv.errors import InvalidInputError, InvalidLocationError, ManifestError, SettingsError
from s3kv.naming.location import parse_location
from s3kv.naming.manifest import MAX_MANIFEST_BYTES, MAX_MANIFEST_DEPTH, parse_manifest
from s3kv.ops.gc.collect import gc
from s3kv.settings import S3Settings

pytestmark = pytest.mark.unit


def good_manifest() -> bytes:
    return Namespace(model_name="m/x", tokens_per_hash=16, dtype="bfloat16").manifest_bytes()


def with_field(value: str) -> bytes:
    """A sound manifest plus one extra field whose JSON text is ``value``."""
    return good_manifest()[:-1] + f',\n  "zz_extra": {value}\n}}'.encode()


HOSTILE = {
    "nested-array": b"[" * 100_000 + b"]" * 100_000,
    "nested-in-field": with_field("[" * 50_000 + "]" * 50_000),
    "nested-just-past-the-cap": with_field("[" * MAX_MANIFEST_DEPTH + "]" * MAX_MANIFEST_DEPTH),
    "int-5000-digits": with_field("9" * 5000),
    "float-overflow": with_field("1e999999"),
    "nan": with_field("NaN"),
    "duplicate-name": good_manifest()[:-1] + b',\n  "dtype": "float16"\n}',
    "whitespace-padded-past-the-cap": good_manifest() + b" " * MAX_MANIFEST_BYTES,
    "invalid-past-the-cap": b"{" + b"x" * (MAX_MANIFEST_BYTES + 10),
    "utf-16": good_manifest().decode().encode("utf-16"),
    "not-an-object": b"[1, 2, 3]",
    "empty": b"",
}


@pytest.mark.parametrize("data", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_manifests_raise_manifest_error(data: bytes) -> None:
    with pytest.raises(ManifestError):
        Namespace.from_manifest(data)
    with pytest.raises(ManifestError):
        Namespace.from_manifest(data.decode("utf-8", "replace"))


def test_manifest_limits_leave_room_for_real_ones() -> None:
    ns = Namespace(
        model_name="m/x",
        tokens_per_hash=16,
        dtype="bfloat16",
        kv_cache_groups=[{"tokens_per_block": 16, "layer_names": [f"l.{i}" for i in range(4000)]}],
    )
    assert Namespace.from_manifest(ns.manifest_bytes()) == ns
    nested = with_field("[" * (MAX_MANIFEST_DEPTH - 2) + "]" * (MAX_MANIFEST_DEPTH - 2))
    assert "zz_extra" in parse_manifest(nested)
    padded = good_manifest() + b" " * (MAX_MANIFEST_BYTES - len(good_manifest()))
    assert Namespace.from_manifest(padded).folder.startswith("m_x_")


def test_a_parsed_mapping_is_checked_too() -> None:
    fields = json.loads(good_manifest())
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ManifestError, match="nested deeper"):
        Namespace.from_manifest({**fields, "zz_extra": deep})


# -- locations (point 7) -----------------------------------------------------------------

MALFORMED = [
    "s3:/x",
    "s3:",
    "s3:x",
    "S3:/bucket/x",
    "s3://",
    "s3:///x",
    "s3://bkt//x",
    "s3://bkt/x?versionId=1",
    "s3://bkt/x#frag",
    "s3://b",
    "s3://-bkt/x",
    "s3://bkt-/x",
    "s3://bk..t/x",
    "s3://bkt/a/../b",
    "file:///tmp/x",
    "https://host/bucket",
    "name:x",
    "dir\x00x",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_locations_are_refused(text: str) -> None:
    with pytest.raises(InvalidLocationError):
        parse_location(text)


def test_well_formed_locations() -> None:
    assert parse_location("s3://bkt").url == "s3://bkt"
    assert parse_location("S3://My_Bkt.v2/a/b/").url == "s3://My_Bkt.v2/a/b"
    assert parse_location("./odd:name").path == Path.cwd() / "odd:name"
    assert parse_location("rel/dir").path == Path.cwd() / "rel" / "dir"


def test_uploader_refuses_a_malformed_s3_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3kv import Uploader

    monkeypatch.chdir(tmp_path)
    ns = Namespace(model_name="m", tokens_per_hash=16, dtype="bfloat16")
    for text in ("s3:/", "s3:/bkt/x", "s3:bkt"):
        with pytest.raises(InvalidLocationError, match="s3://"):
            Uploader(text, ns)
    assert list(tmp_path.iterdir()) == []


# -- flags and settings that used to end in a traceback (point 8) ------------------------


def test_endpoint_urls_python_cannot_parse_are_settings_errors() -> None:
    for url in ("http://[::1", "http://", "http://h:99999", "http://h:0", "http://a b"):
        with pytest.raises(SettingsError, match="endpoint_url"):
            S3Settings.resolve(env={}, endpoint_url=url)
    assert S3Settings.resolve(env={}, endpoint_url="http://[::1]:9000").endpoint_url
    with pytest.raises(SettingsError, match="user name or password") as caught:
        S3Settings.resolve(env={}, endpoint_url="http://key:hunter2@minio:99999")
    assert "hunter2" not in str(caught.value)


def test_gc_refuses_ages_no_clock_can_hold(tmp_path: Path) -> None:
    for kwargs in (
        {"older_than": 6e26},
        {"older_than": 1.0, "uploads_older_than": 6e26},
        {"older_than": 1.0, "uploads_older_than": float("nan")},
        {"older_than": float("inf")},
    ):
        with pytest.raises(InvalidInputError, match="out of range"):
            gc(tmp_path, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["ls", "s3://bkt/kv", "--profile", "nosuchprofile"], "nosuchprofile"),
        (["ls", "s3://bkt/kv", "--endpoint-url", "http://[::1"], "endpoint_url"),
        (
            ["gc", "DIR", "--older-than", "1d", "--abort-uploads-older-than", "9" * 20 + "w"],
            "range",
        ),
        (["gc", "DIR", "--older-than", "9" * 400], "too long"),
        (["gc", "DIR", "--max-bytes", "9" * 400 + "GiB"], "too large"),
        (["push", "DIR", "s3:/x"], "s3://"),
    ],
)
def test_cli_refuses_without_a_traceback(
    argv: list[str],
    names: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [str(tmp_path) if a == "DIR" else a for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit for a flag it could not convert
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2, err
    assert names in err and "Traceback" not in err
    assert not (tmp_path / "s3:").exists()
