"""The embedded demo: a realistic vLLM cache pushed, listed, verified and pulled back.

With no endpoint configured it starts moto's S3 server (the ``s3kv-vllm[demo]`` extra) on
127.0.0.1 for the duration. The synthetic cache has Llama-3.1-8B's shapes: 32 layers,
8 KV heads of dimension 128, bfloat16, 16 tokens per block, so one block (one CPU-tier
row: K and V of every layer) is 2 x 32 x 8 x 128 x 16 x 2 bytes = 2 MiB. It is written
exactly as vLLM's filesystem tier writes (``config.json`` then temp-file-and-rename
blocks), with block hashes chained as vLLM chains them (each hashes its parent).
"""

from __future__ import annotations

import filecmp
import hashlib
import importlib.util
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from s3kv.errors import InvalidInputError, S3KVError, StoreError
from s3kv.naming.keys import KeyMapper, make_offload_key
from s3kv.naming.namespace import Namespace
from s3kv.ops.inventory import Inventory, inventory
from s3kv.ops.sync import SyncReport, sync
from s3kv.ops.verify import VerifyReport, verify
from s3kv.settings import S3Settings
from s3kv.stores import LocalStore, PutOptions

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LAYERS, KV_HEADS, HEAD_DIM, TOKENS_PER_BLOCK, DTYPE_BYTES = 32, 8, 128, 16, 2
BLOCK_BYTES = 2 * LAYERS * KV_HEADS * HEAD_DIM * TOKENS_PER_BLOCK * DTYPE_BYTES
DEMO_CREDENTIAL = "s3kv-demo"  # the embedded server accepts any key; nothing leaves 127.0.0.1


@dataclass(frozen=True, slots=True)
class DemoReport:
    endpoint: str
    embedded: bool
    location: str
    blocks: int
    block_bytes: int
    push: SyncReport
    inventory: Inventory
    verify: VerifyReport
    pull: SyncReport
    identical: bool
    seconds: float
    kept: Path | None = None
    """Where the written cache (``vllm-cache``) and the pulled copy (``pulled``) were
    kept (``keep``); None when they were deleted at the end."""


def demo_namespace() -> Namespace:
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
    return Namespace(
        model_name=MODEL,
        tokens_per_hash=TOKENS_PER_BLOCK,
        dtype="bfloat16",
        kv_cache_groups=[{"tokens_per_block": TOKENS_PER_BLOCK, "layer_names": layers}],
    )


def write_cache(root: Path, blocks: int, *, seed: int = 0) -> Namespace:
    """A vLLM filesystem-tier tree under ``root``: one namespace, ``blocks`` 2 MiB blocks."""
    namespace = demo_namespace()
    store = LocalStore(root)
    keys = KeyMapper(namespace)
    store.put(keys.config_key(), namespace.manifest_bytes(), PutOptions(create_only=True))
    rng = random.Random(seed)
    parent = b"\x00" * 32
    for _ in range(blocks):
        tokens = rng.randbytes(4 * TOKENS_PER_BLOCK)  # 16 int32 token ids
        parent = hashlib.sha256(parent + tokens).digest()
        row = rng.randbytes(BLOCK_BYTES)
        store.put(keys.key_for(make_offload_key(parent, 0)), row, PutOptions(create_only=True))
    return namespace


def trees_identical(a: Path, b: Path) -> bool:
    """Same files, byte for byte (temp files excluded)."""

    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    names = files(a)
    if names != files(b):
        return False
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


@contextmanager
def embedded_s3() -> Iterator[str]:
    """moto's S3 server on a free loopback port; yields its URL and stops it afterwards."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        raise S3KVError(
            "the embedded S3 endpoint needs moto's server: pip install 's3kv-vllm[demo]' "
            "(or pass --endpoint-url to run the demo against a real store)"
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The server logs every request: to a file, as an undrained pipe would fill and stall it.
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    err = log.read().decode(errors="replace")[-300:]
                    raise StoreError(f"the embedded S3 endpoint did not start: {err}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()  # reap it: an unreaped child is a ResourceWarning at teardown
        log.close()


def ensure_bucket(settings: S3Settings, bucket: str) -> None:
    """Create the demo's bucket if missing (an admin step, not part of s3kv's data path)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    kwargs: dict[str, Any] = {"endpoint_url": settings.endpoint_url, "region_name": settings.region}
    if settings.access_key_id and settings.secret_access_key:
        kwargs["aws_access_key_id"] = settings.access_key_id
        kwargs["aws_secret_access_key"] = settings.secret_access_key.get_secret_value()
    if not settings.verify_tls:
        kwargs["verify"] = False
    elif settings.ca_bundle is not None:
        kwargs["verify"] = str(settings.ca_bundle)
    session = boto3.session.Session(profile_name=settings.profile)
    client = session.client("s3", **kwargs)
    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as exc:
        from s3kv.stores.rules import BUCKET_EXISTS

        code = exc.response.get("Error", {}).get("Code")
        if code not in BUCKET_EXISTS:
            raise StoreError(f"create bucket {bucket!r}: {code}: {exc}") from None
    except BotoCoreError as exc:
        raise StoreError(f"create bucket {bucket!r} at {settings.endpoint_url}: {exc}") from None
    finally:
        client.close()


def run_demo(
    settings: S3Settings,
    *,
    endpoint_url: str | None = None,
    bucket: str = "s3kv-demo",
    prefix: str = "kv",
    blocks: int = 64,
    say: Callable[[str], None] = lambda _: None,
    keep: Path | None = None,
) -> DemoReport:
    """Push, list, verify and pull a synthetic cache.

    ``keep``: a new or empty directory to write the cache (``vllm-cache``) and the pulled
    copy (``pulled``) into and leave there; by default they go to a temp directory that
    is deleted at the end.

    The demo writes only where it is told: to ``endpoint_url`` when given (the caller
    named it), else to an embedded endpoint it starts on 127.0.0.1 and stops. An endpoint
    in ``settings`` (from ``S3KV_ENDPOINT_URL``/``AWS_ENDPOINT_URL`` or a profile) is
    ignored, and said so: a demo must never create buckets on a store someone merely
    configured.
    """
    if keep is not None:
        keep = _keep_dir(keep)
    if endpoint_url is not None:
        named = settings.model_copy(update={"endpoint_url": endpoint_url})
        return _run(named, False, bucket, prefix, blocks, say, keep)
    if settings.endpoint_url is not None:
        say(
            f"ignoring the configured endpoint {settings.endpoint_url} (environment or "
            "profile): the demo writes only to an endpoint it starts, or one given with "
            "--endpoint-url"
        )
    with embedded_s3() as url:
        say(f"started an embedded S3 endpoint (moto) at {url}")
        local = settings.model_copy(
            update={
                "endpoint_url": url,
                "region": "us-east-1",
                "profile": None,
                "access_key_id": DEMO_CREDENTIAL,
                "secret_access_key": SecretStr(DEMO_CREDENTIAL),
                "session_token": None,
            }
        )
        report = _run(local, True, bucket, prefix, blocks, say, keep)
    say("stopped the embedded S3 endpoint")
    return report


def _keep_dir(path: Path) -> Path:
    """``keep`` made ready: created if missing; refused unless it is an empty directory
    (the demo never writes among someone's files)."""
    path = Path(path).expanduser().absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InvalidInputError(
            f"--keep {path}: not an empty directory; give a new or empty one (the demo "
            "writes vllm-cache/ and pulled/ there)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"--keep {path}: cannot create it: {exc.strerror}") from None
    return path


@contextmanager
def _workdir(keep: Path | None) -> Iterator[str]:
    if keep is not None:
        yield str(keep)
        return
    with tempfile.TemporaryDirectory(prefix="s3kv-demo-") as work:
        yield work


def _run(
    settings: S3Settings,
    embedded: bool,
    bucket: str,
    prefix: str,
    blocks: int,
    say: Callable[[str], None],
    keep: Path | None = None,
) -> DemoReport:
    started = time.perf_counter()
    ensure_bucket(settings, bucket)
    location = f"s3://{bucket}/{prefix}"
    with _workdir(keep) as work:
        source, target = Path(work, "vllm-cache"), Path(work, "pulled")
        t = time.perf_counter()
        namespace = write_cache(source, blocks)
        mib = blocks * BLOCK_BYTES / 2**20
        say(
            f"wrote a vLLM cache: {MODEL}, bfloat16, {TOKENS_PER_BLOCK} tokens/block, "
            f"{blocks} blocks of {BLOCK_BYTES // 2**20} MiB ({mib:.0f} MiB) in "
            f"{time.perf_counter() - t:.2f}s under {source}/{namespace.folder}"
        )
        push = sync(source, location, settings=settings)
        say(
            f"push   {push.copied} blocks + manifest -> {location} in {push.seconds:.2f}s "
            f"({mib / max(push.seconds, 1e-9):.0f} MiB/s)"
        )
        inv = inventory(location, settings=settings)
        for row in inv.namespaces:
            say(
                f"ls     {row.folder}: model {row.model}, {row.dtype}, ranks "
                f"{list(row.ranks)}, {row.blocks} blocks, {row.bytes / 2**20:.0f} MiB"
            )
        checked = verify(location, settings=settings, deep=True)
        say(
            f"verify {checked.blocks} blocks, {checked.blocks_read} read and checksummed, "
            f"{sum(checked.counts.values())} findings in {checked.seconds:.2f}s"
        )
        pull = sync(location, target, settings=settings)
        say(
            f"pull   {pull.copied} blocks -> {target} in {pull.seconds:.2f}s "
            f"({mib / max(pull.seconds, 1e-9):.0f} MiB/s)"
        )
        identical = trees_identical(source, target)
        say(
            "compare: pulled tree is byte-identical to the original (config.json included)"
            if identical
            else "compare: pulled tree DIFFERS from the original"
        )
    return DemoReport(
        endpoint=settings.endpoint_url or "aws",
        embedded=embedded,
        location=location,
        blocks=blocks,
        block_bytes=BLOCK_BYTES,
        push=push,
        inventory=inv,
        verify=checked,
        pull=pull,
        identical=identical,
        seconds=time.perf_counter() - started,
        kept=keep,
    )
