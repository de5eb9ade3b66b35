"""Fuzzing what s3kv takes from outside: manifests, keys, locations and the command line.

Each input may be refused, but only with the documented error (a :class:`s3kv.S3KVError`
subclass) or, for the CLI, a documented exit code with a one-line message: never another
exception type, never a traceback.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from s3kv import Namespace
from s3kv.cli import main
from s3kv.errors import InvalidLocationError, ManifestError, NotAnS3KVKeyError
from s3kv.naming.location import Location, parse_location
from s3kv.naming.manifest import parse_manifest
from s3kv.naming.parse import ParsedKey, parse_key

pytestmark = pytest.mark.unit

FAST = settings(max_examples=300, deadline=None)
EXIT_CODES = {0, 1, 2, 3, 4, 5, 6, 7}

# Text as argv and object keys can carry it: any code point but lone surrogates other
# than the ones Python uses for undecodable bytes in argv (surrogateescape).
TEXT = st.characters(exclude_categories=("Cs",)) | st.sampled_from(["\udc80", "\udcff"])
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**120), max_value=10**120)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=40,
)
SOUND = json.loads(Namespace(model_name="m", tokens_per_hash=16, dtype="bfloat16").manifest_bytes())


def refused_or_parsed(data: Any) -> None:
    try:
        namespace = Namespace.from_manifest(data)
    except ManifestError:
        return
    assert isinstance(namespace, Namespace)


@FAST
@given(st.binary(max_size=2048))
def test_random_bytes_as_manifest(data: bytes) -> None:
    refused_or_parsed(data)


@FAST
@given(JSON)
def test_random_json_as_manifest(value: Any) -> None:
    refused_or_parsed(json.dumps(value).encode())
    refused_or_parsed(json.dumps(value, ensure_ascii=False))


@FAST
@given(st.dictionaries(st.sampled_from([*sorted(SOUND), "x", "extra"]), JSON, max_size=6))
def test_sound_manifests_with_random_fields(changes: dict[str, Any]) -> None:
    refused_or_parsed(json.dumps({**SOUND, **changes}).encode())
    refused_or_parsed({**SOUND, **changes})


@FAST
@given(st.integers(min_value=1, max_value=3000), st.sampled_from(["[", '{"a":']))
def test_deep_json_as_manifest(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    with pytest.raises(ManifestError):
        parse_manifest(opener * depth + closer * depth)


KEY_PARTS = st.sampled_from(
    [
        "",
        ".",
        "..",
        "kv",
        "m_0123456789ab",
        "m_0123456789ab_r0",
        "m_0123456789ab_r01",
        "abc",
        "de_g0",
        "de_g01",
        "abcdef.bin",
        "abcdef0011.bin",
        "config.json",
        "\\",
        "\x00",
        "é",
    ]
)


@FAST
@given(st.text(TEXT, max_size=200) | st.lists(KEY_PARTS, max_size=8).map("/".join))
def test_random_keys(key: str) -> None:
    try:
        parsed = parse_key(key)
    except NotAnS3KVKeyError:
        return
    assert isinstance(parsed, ParsedKey)
    assert ".." not in parsed.relative_path.split("/")


@FAST
@given(
    st.text(TEXT, max_size=80)
    | st.builds(
        lambda scheme, rest: scheme + rest,
        st.sampled_from(["s3://", "S3://", "s3:/", "s3:", "s3:///", "file://", "x:", ""]),
        st.text(TEXT, max_size=60),
    )
)
def test_random_locations(text: str) -> None:
    try:
        location = parse_location(text)
    except InvalidLocationError:
        return
    assert isinstance(location, Location)
    if location.bucket is None:
        assert not text.lower().startswith("s3:")
    else:
        assert text.lower().startswith("s3://") and location.url.startswith("s3://")


# -- the command line, in process -------------------------------------------------------


def _refused_port() -> int:
    """A loopback port nothing listens on: every S3 request fails fast (exit 5)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


COMMANDS = ["push", "pull", "cp", "ls", "verify", "gc", "key"]
FLAGS = [
    "--json",
    "--dry-run",
    "--deep",
    "--older-than",
    "--max-bytes",
    "--abort-uploads-older-than",
    "--delete-empty-manifests",
    "--namespace",
    "--rank",
    "--allow-missing-manifest",
    "--concurrency",
    "--checksum",
    "--region",
    "--profile",
    "--endpoint-url",
    "--ca-bundle",
    "--no-verify-tls",
    "--path-style",
    "--model",
    "--tokens-per-hash",
    "--dtype",
    "--group",
    "--manifest",
    "--block-hash",
    "--group-idx",
    "--style",
    "--tp-size",
    "--canonical-format",
    "--help",
    "--version",
]
VALUES = [
    "s3://bkt/kv",
    "s3:/x",
    "s3://",
    "s3://b//x",
    "s3://bkt/x?y",
    "DIR",
    "DIR/sub",
    "FILE",
    "0",
    "-1",
    "1e400",
    "9" * 30,
    "99999999999999999999w",
    "7d",
    "500GiB",
    "1.5TB",
    "http://[::1",
    "http://127.0.0.1:1",
    "nosuchprofile",
    "crc32c",
    "16:a,b",
    "abcdef",
    "",
    "\x00",
    "\udcff",
]
WORD = st.sampled_from(FLAGS + VALUES) | st.text(TEXT, max_size=12)
LOCATION = st.sampled_from(["DIR", "DIR", "DIR/sub", "FILE", "s3://bkt/kv", "s3:/x", "~nosuchuser"])
NUMBER = st.sampled_from(["16", "0", "-1", "9" * 30]) | st.integers().map(str) | WORD
DURATION = st.sampled_from(["0s", "7d", "1e400", "99999999999999999999w", "-1", "x"]) | WORD
# Command lines that get past argparse (so the commands themselves run), and random ones.
WELL_FORMED = st.one_of(
    st.tuples(st.sampled_from(["ls", "verify"]), st.tuples(LOCATION)),
    st.tuples(st.just("push"), st.tuples(st.just("DIR"), LOCATION)),
    st.tuples(st.sampled_from(["pull", "cp"]), st.tuples(LOCATION, LOCATION)),
    st.tuples(st.just("gc"), st.tuples(LOCATION, st.just("--older-than"), DURATION)),
    st.tuples(
        st.just("key"),
        st.tuples(
            st.just("--model"), WORD, st.just("--tokens-per-hash"), NUMBER, st.just("--dtype"), WORD
        ),
    ),
    st.tuples(st.just("key"), st.tuples(st.just("--manifest"), st.just("FILE"))),
).flatmap(
    lambda cmd: (st.just([]) | st.lists(WORD, max_size=2)).map(
        lambda extra: (cmd[0], [*cmd[1], *extra])
    )
)
ARGV = WELL_FORMED | WELL_FORMED | st.tuples(st.sampled_from(COMMANDS), st.lists(WORD, max_size=8))


@pytest.fixture
def cli_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.chdir(tmp_path)
    port = _refused_port()
    for name, value in {
        "S3KV_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "S3KV_MAX_ATTEMPTS": "1",
        "S3KV_CONNECT_TIMEOUT": "1",
        "S3KV_READ_TIMEOUT": "1",
        "S3KV_DEADLINE_SECONDS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    directory = tmp_path / "dir"
    directory.mkdir()
    manifest = tmp_path / "config.json"
    return directory, manifest


# 150 random command lines through the parser and every command's checks, in-process:
# a few seconds, the cost of covering argv's corners (one of the slowest unit tests).
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ARGV, st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
def test_random_command_lines(
    cli_sandbox: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, list[str]],
    manifest_bytes: bytes,
) -> None:
    directory, manifest = cli_sandbox
    manifest.write_bytes(manifest_bytes)
    command, rest = argv
    args = [command] + [
        str(directory)
        if a == "DIR"
        else str(directory / "sub")
        if a == "DIR/sub"
        else str(manifest)
        if a == "FILE"
        else a
        for a in rest
    ]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        code = 0 if exc.code is None else exc.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    event(f"exit {code}")
    assert code in EXIT_CODES, (args, code, err)
    assert "Traceback" not in out + err, (args, err)
    if code == 2:
        assert err.strip(), (args, "exit 2 without a message")
