"""Shared fixtures: S3 endpoints the suite starts itself (127.0.0.1 only), and backends.

Backends, each a place the same test can run on:

* ``moto``        moto in-process (botocore patched; no sockets): boto3's data path
* ``moto-server`` moto's HTTP server in its own process, on a free loopback port:
                  awscrt's data path (the default) over real HTTP
* ``local``       a directory in vLLM's filesystem-tier layout
* ``rgw-http``    Ceph RADOS Gateway over HTTP (tests/servers/rgw.py)
* ``rgw-https``   the same over TLS, trusting its self-signed CA via s3kv's ca_bundle

Which fixture to use (docs/developers.md says the same, with examples):

* ``backend``: a behaviour of the library or the tools (transfers, retries, hostile
  input, reports). Runs once per data path on the cheapest faithful backend:
  ``moto``, ``moto-server`` and ``local`` (``BEHAVIOUR_BACKENDS``).
* ``s3_backend``: the same, S3 only (``moto``, ``moto-server``).
* ``every_backend``: a promise of the ``Store`` interface itself (the contract suite,
  tests/functional/test_store.py): every backend, Ceph RGW over HTTP and TLS included.
* ``every_s3_backend``: a behaviour that rests on what a server does on the wire
  (multipart uploads, awscrt's ranged parts, a checksum header RGW ignores): every S3
  backend.
* ``rgw``: what differs on the wire (TLS, RGW's answers, real lifecycle, users).

``S3KV_TEST_BACKENDS=moto,local`` narrows every list for a quick loop;
``S3KV_TEST_EVERY_BACKEND=1`` runs behaviour tests on all five too (a release check).
Servers start once per session (per xdist worker for moto's server; every test that
needs Ceph runs on one worker, see ``pytest_collection_modifyitems``).

Every S3 request s3kv makes is traced (``S3KV_TRACE_FILE``, one file per process in
``TRACE_DIR``) so the Terraform policy proofs can check the writer/reader policies against
what s3kv really did. Under xdist those proofs run in a second session that reads the
first one's traces: ``S3KV_TEST_TRACE_DIR`` names the directory they share
(scripts/test.sh does this).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.servers import rgw_keep
from tests.servers.rgw_keep import (  # noqa: F401  (hooks: Ceph logs kept only on failure)
    pytest_runtest_makereport,
    pytest_terminal_summary,
)

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / ".s3kv-test-artifacts"
SHARED_TRACE_DIR = os.environ.get("S3KV_TEST_TRACE_DIR")
TRACE_DIR = Path(SHARED_TRACE_DIR) if SHARED_TRACE_DIR else ARTIFACTS / f"trace-{os.getpid()}"
TRACE_FILE = TRACE_DIR / f"s3-operations-{os.getpid()}.jsonl"  # one per pytest process
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")

# Credentials for local endpoints only; nothing here may reach a real AWS account.
TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}
for _name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE"):
    os.environ.pop(_name, None)
for _name in [n for n in os.environ if n.startswith("S3KV_") and not n.startswith("S3KV_TEST_")]:
    os.environ.pop(_name, None)
os.environ.update(TEST_ENV)
TRACE_DIR.mkdir(parents=True, exist_ok=True)
os.environ["S3KV_TRACE_FILE"] = str(TRACE_FILE)

ALL_BACKENDS = ("moto", "moto-server", "local", "rgw-http", "rgw-https")
BACKENDS = tuple(
    b for b in os.environ.get("S3KV_TEST_BACKENDS", ",".join(ALL_BACKENDS)).split(",") if b
)
"""Every backend the run may use (``S3KV_TEST_BACKENDS`` narrows it)."""
# One per data path: boto3's (moto), awscrt's over HTTP (moto's server), a directory.
# Ceph adds nothing to a behaviour above the store: the contract suite proves each store
# keeps the Store promises, so a behaviour proven on one S3 store holds on the others.
BEHAVIOUR_BACKENDS = tuple(
    b for b in BACKENDS
    if os.environ.get("S3KV_TEST_EVERY_BACKEND") or b in ("moto", "moto-server", "local")
)
RGW_BACKENDS = ("rgw-http", "rgw-https")


def pytest_sessionstart(session: pytest.Session) -> None:
    TRACE_DIR.mkdir(parents=True, exist_ok=True)
    TRACE_FILE.write_text("")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Keep the trace of a failed run for its report; a shared one is its owner's to clean.
    if exitstatus == 0 and not SHARED_TRACE_DIR:
        shutil.rmtree(TRACE_DIR, ignore_errors=True)


SERVER_FIXTURES = {"moto_server", "rgw"}
SERVER_BACKENDS = {"moto-server", "rgw-http", "rgw-https"}


def _needs_server(item: pytest.Item) -> bool:
    """An S3 server (moto's or Ceph), started by fixture, by backend or by the test."""
    if item.get_closest_marker("integration") or item.get_closest_marker("rgw"):
        return True
    if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(v in SERVER_BACKENDS for v in params.values() if isinstance(v, str))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Proofs that consume what the functional tests recorded run last.
    items.sort(key=lambda item: item.get_closest_marker("after_functional") is not None)
    for item in items:
        if rgw_keep.uses_session_server(item):  # one Ceph per run: its tests on one worker
            item.add_marker(pytest.mark.xdist_group("rgw"))
        if _needs_server(item):
            item.add_marker(pytest.mark.server)  # `make check` leaves these out
        if XDIST_WORKER and not SHARED_TRACE_DIR and item.get_closest_marker("after_functional"):
            # Another worker may still be recording; scripts/test.sh runs them afterwards.
            item.add_marker(pytest.mark.skip(
                reason="under xdist the proofs need S3KV_TEST_TRACE_DIR and a second "
                "session (make test does this)"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- servers ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3 server in its own process on 127.0.0.1 (the demo's embedded endpoint)."""
    from s3kv.ops.demo import embedded_s3

    with embedded_s3() as url:
        yield url


@pytest.fixture(scope="session")
def rgw(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Ceph RGW (HTTP and HTTPS) for the session. Fails loudly if Ceph is not installed.

    Its directory (logs) is kept only when a test failed; the failure output says where.
    Starting it (a couple of seconds) shows as the set-up time of the first test that
    uses it, often among the slowest: paid once per run, on one xdist worker.
    """
    from tests.servers.rgw import RGWServer

    server = RGWServer()
    server.start()
    rgw_keep.track_session(server)
    try:
        yield server
    finally:
        rgw_keep.finish(server, keep=request.session.testsfailed > 0)


# -- backends ---------------------------------------------------------------------------


@dataclass
class Backend:
    """One place to run the same tests on: an S3 bucket or a directory."""

    name: str
    location: str
    settings: Any
    bucket: str | None = None
    root: Path | None = None
    client: Any = None
    """A plain boto3 client, to act behind s3kv's back (tamper, inspect)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_s3(self) -> bool:
        return self.bucket is not None

    def raw_put(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        if self.client is not None:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, Metadata=metadata or {})
        else:
            assert self.root is not None
            path = self.root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def raw_get(self, key: str) -> bytes:
        if self.client is not None:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        assert self.root is not None
        return (self.root / key).read_bytes()

    def raw_metadata(self, key: str) -> dict[str, str]:
        if self.client is None:
            return {}
        return dict(self.client.head_object(Bucket=self.bucket, Key=key).get("Metadata", {}))

    def raw_put_many(self, keys: Iterable[str], data: bytes) -> None:
        """Plant many objects at once (16 at a time on S3: a server round trip each)."""
        if self.client is None:
            for key in keys:
                self.raw_put(key, data)
            return
        with ThreadPoolExecutor(16) as pool:
            for _ in pool.map(lambda key: self.raw_put(key, data), keys):
                pass

    def raw_delete(self, key: str) -> None:
        if self.client is not None:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        else:
            assert self.root is not None
            (self.root / key).unlink()

    def raw_keys(self, prefix: str = "") -> list[str]:
        if self.client is not None:
            keys: list[str] = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                keys.extend(o["Key"] for o in page.get("Contents", ()))
            return sorted(keys)
        assert self.root is not None
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*")
            if p.is_file() and p.relative_to(self.root).as_posix().startswith(prefix)
        )

    def tamper(self, key: str, data: bytes) -> None:
        """Overwrite an object behind s3kv's back, keeping its metadata (checksum)."""
        self.raw_put(key, data, self.raw_metadata(key))


def _s3_client(
    endpoint: str | None, *, verify: Any = None, credentials: tuple[str, str] | None = None
) -> Any:
    import boto3
    from botocore.config import Config

    access, secret = credentials or (
        TEST_ENV["AWS_ACCESS_KEY_ID"],
        TEST_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    # A fresh session: boto3's default one caches the first credentials it resolved.
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        verify=verify,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def _bytes_body(request: Any, **_: Any) -> None:
    if isinstance(request.body, memoryview):
        request.body = request.body.tobytes()


def _bucket_name() -> str:
    return f"s3kv-test-{uuid.uuid4().hex[:16]}"


@pytest.fixture(params=BEHAVIOUR_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A behaviour, once per data path: moto, moto's server, a directory (see above)."""
    yield from _make_backend(request, request.param, tmp_path)


@pytest.fixture(params=[b for b in BEHAVIOUR_BACKENDS if b != "local"])
def s3_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A behaviour of the S3 path, once per data path: moto, moto's server."""
    yield from _make_backend(request, request.param, tmp_path)


@pytest.fixture(params=[b for b in BACKENDS if b != "local"])
def every_s3_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A behaviour that depends on the server's answers on the wire (multipart, ranged
    parts, checksum headers a server ignores): every S3 backend, Ceph included."""
    yield from _make_backend(request, request.param, tmp_path)


@pytest.fixture(params=BACKENDS)
def every_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A promise of the Store interface: every backend, Ceph over HTTP and TLS included."""
    yield from _make_backend(request, request.param, tmp_path)


def _make_backend(request: pytest.FixtureRequest, name: str, tmp_path: Path) -> Iterator[Backend]:
    from s3kv import S3Settings

    prefix = "team/kv"
    if name == "local":
        root = tmp_path / "cache"
        yield Backend(name, str(root), S3Settings.resolve(), root=root)
        return
    bucket = _bucket_name()
    if name == "moto":
        from moto import mock_aws

        import s3kv.stores.s3 as s3mod

        real_make_client = s3mod.make_client

        def make_client(settings: Any, **kwargs: Any) -> Any:
            # moto's in-process stub cannot read memoryview bodies (real HTTP sends them
            # as they are); hand it bytes. Only this backend needs the copy.
            client = real_make_client(settings, **kwargs)
            client.meta.events.register_first("before-send.s3", _bytes_body)
            return client

        mp = pytest.MonkeyPatch()
        mp.setattr(s3mod, "make_client", make_client)
        request.addfinalizer(mp.undo)
        with mock_aws():
            client = _s3_client(None)
            client.create_bucket(Bucket=bucket)
            # in-process moto patches botocore: awscrt's data path cannot reach it
            settings = S3Settings.resolve(
                max_attempts=3, backoff_base_seconds=0.01, data_path="botocore"
            )
            yield Backend(name, f"s3://{bucket}/{prefix}", settings, bucket=bucket, client=client)
        return
    credentials = (TEST_ENV["AWS_ACCESS_KEY_ID"], TEST_ENV["AWS_SECRET_ACCESS_KEY"])
    if name == "moto-server":
        endpoint = request.getfixturevalue("moto_server")
        verify: Any = None
        ca = None
    elif name in ("rgw-http", "rgw-https"):
        server = request.getfixturevalue("rgw")
        credentials = (server.access_key, server.secret_key)
        tls = name == "rgw-https"
        endpoint = server.https_endpoint if tls else server.http_endpoint
        ca = server.ca_bundle if tls else None
        verify = ca
    else:
        raise ValueError(f"unknown backend {name!r} in S3KV_TEST_BACKENDS")
    client = _s3_client(endpoint, verify=verify, credentials=credentials)
    client.create_bucket(Bucket=bucket)
    settings = S3Settings.resolve(
        endpoint_url=endpoint,
        ca_bundle=ca,
        max_attempts=3,
        backoff_base_seconds=0.01,
        access_key_id=credentials[0],
        secret_access_key=credentials[1],
    )
    yield Backend(
        name,
        f"s3://{bucket}/{prefix}",
        settings,
        bucket=bucket,
        client=client,
        extra={"endpoint": endpoint, "ca_bundle": ca},
    )


# -- what the functional tests recorded (consumed by tests/terraform proofs) -------------


def _trace() -> list[dict[str, Any]]:
    """What every process of this run traced (xdist workers write a file each)."""
    return [
        json.loads(line)
        for path in sorted(TRACE_DIR.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]


# the bucket, peer and prefix tests/terraform renders its policies for
PROOF_BUCKET, PROOF_PEER, PROOF_PREFIX = "s3kv-proof-cache", "s3kv-proof-peer", "teams/kv"


def _canonical(key: str) -> str | None:
    """A recorded key moved under the proof's prefix; None if it is not in the layout."""
    from s3kv import NotAnS3KVKeyError, parse_key

    try:
        parsed = parse_key(key)
    except NotAnS3KVKeyError:
        return None
    return f"{PROOF_PREFIX}/{parsed.relative_path}"


def _nothing_recorded(what: str) -> None:
    message = f"no {what} were recorded: run the functional tests in the same session"
    if os.environ.get("CI"):
        pytest.fail(message)  # CI runs the whole suite: an empty trace is a bug
    pytest.skip(message)


@pytest.fixture(scope="session")
def recorded_s3_operations() -> set[tuple[str, ...]]:
    """Every S3 operation s3kv performed in this session, as policy-proof tuples.

    Tests use many buckets and prefixes; each call is moved onto one bucket and prefix
    (keys re-rooted through parse_key) so the proof checks the policies of one cache.
    Calls on keys outside the layout (the store contract's scratch keys) are left out:
    the same operations are recorded on layout keys too.
    """
    ops: set[tuple[str, ...]] = set()
    for r in _trace():
        op = r["op"]
        if op == "CopyObject":
            src = r.get("copy_source") or {}
            dst, src_key = _canonical(r["key"]), _canonical(src.get("Key", ""))
            if dst and src_key:
                peer = PROOF_BUCKET if src.get("Bucket") == r["bucket"] else PROOF_PEER
                ops.add((op, PROOF_BUCKET, dst, peer, src_key))
        elif op in ("DeleteObjects", "DeleteObjectVersion"):
            for key in r.get("keys", ()):
                if (canonical := _canonical(key)) is not None:
                    ops.add((op, PROOF_BUCKET, canonical))
        elif "key" in r:
            if (canonical := _canonical(r["key"])) is not None:
                ops.add((op, PROOF_BUCKET, canonical))
        elif "prefix" in r:
            ops.add((op, PROOF_BUCKET, f"{PROOF_PREFIX}/"))
        else:
            ops.add((op, PROOF_BUCKET, ""))
    if not ops:
        _nothing_recorded("S3 operations")
    return ops


@pytest.fixture(scope="session")
def written_s3_objects() -> list[tuple[str, dict[str, str], int]]:
    """(key, tags, size) of every layout object s3kv wrote in this session."""
    objects = []
    for r in _trace():
        if r["op"] not in ("PutObject", "CreateMultipartUpload"):
            continue
        canonical = _canonical(r["key"])  # re-rooted under one prefix, as above
        if canonical is not None:
            objects.append((canonical, r.get("tags", {}), int(r.get("size", 0))))
    if not objects:
        _nothing_recorded("objects")
    return objects
