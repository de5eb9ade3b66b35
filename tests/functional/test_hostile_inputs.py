"""Issue 12 part A on each data path (`backend`): hostile manifests and a gc whose deletes fail."""

from __future__ import annotations

import os
import tracemalloc
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import s3kv.ops.gc.collect as gc_module
from s3kv import Downloader, KeyMapper, ManifestError, Namespace, Uploader, make_offload_key
from s3kv.naming.location import parse_location
from s3kv.naming.manifest import MAX_MANIFEST_BYTES
from s3kv.ops.gc.collect import gc
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="m/hostile", tokens_per_hash=16, dtype="bfloat16")
NESTED = b"[" * 100_000 + b"]" * 100_000


def prefix_of(backend: Backend) -> str:
    return parse_location(backend.location).prefix


def config_key(backend: Backend, ns: Namespace = NS) -> str:
    return KeyMapper(ns, prefix=prefix_of(backend)).config_key()


@pytest.mark.parametrize(
    "data",
    [NESTED, NS.manifest_bytes()[:-1] + b', "x": ' + b"9" * 5000 + b"}"],
    ids=["nested", "int-5000-digits"],
)
def test_a_hostile_manifest_is_a_manifest_error_for_uploader_and_downloader(
    backend: Backend, data: bytes
) -> None:
    backend.raw_put(config_key(backend), data)
    key = make_offload_key(os.urandom(32), 0)
    with (
        Downloader(backend.location, NS, settings=backend.settings) as down,
        pytest.raises(ManifestError),
    ):
        down.lookup([key])
    with (
        Uploader(backend.location, NS, settings=backend.settings) as up,
        pytest.raises(ManifestError),
    ):
        up.put_blocks({key: b"x" * 64})


def test_an_oversized_manifest_is_refused_reading_at_most_the_cap(backend: Backend) -> None:
    if backend.name == "moto":
        pytest.skip("in-process moto builds every response body in this process")
    padded = NS.manifest_bytes() + b" " * (12 * MAX_MANIFEST_BYTES)
    backend.raw_put(config_key(backend), padded)
    with Downloader(backend.location, NS, settings=backend.settings) as down:
        down.store.head(config_key(backend))  # clients built (botocore loads its models)
        tracemalloc.start()
        try:
            with pytest.raises(ManifestError, match="larger than"):
                down.verify_manifest()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * MAX_MANIFEST_BYTES, f"peak {peak} bytes"


def test_an_empty_manifest_object_is_invalid_not_a_store_error(backend: Backend) -> None:
    backend.raw_put(config_key(backend), b"")
    with (
        Downloader(backend.location, NS, settings=backend.settings) as down,
        pytest.raises(ManifestError, match="not valid JSON"),
    ):
        down.verify_manifest()


class FailingDeletes:
    """A store whose delete of chosen keys fails (as a per-key DeleteObjects error)."""

    def __init__(self, store: Any, doomed: set[str]) -> None:
        self.store, self.doomed = store, doomed

    def delete_many(self, keys: list[str]) -> dict[str, str]:
        failed = {k: "AccessDenied: injected" for k in keys if k in self.doomed}
        failed.update(self.store.delete_many([k for k in keys if k not in self.doomed]))
        return failed

    def delete_if_unchanged(
        self, items: list[tuple[str, str | None]]
    ) -> tuple[dict[str, str], set[str]]:  # what gc deletes blocks with
        failed = {k: "AccessDenied: injected" for k, _ in items if k in self.doomed}
        more, gone = self.store.delete_if_unchanged([i for i in items if i[0] not in self.doomed])
        return {**failed, **more}, gone

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_gc_keeps_a_manifest_until_every_block_delete_is_confirmed(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [make_offload_key(bytes([i]) * 32, 0) for i in range(1, 4)]
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert len(up.put_blocks({k: bytes([i]) * 100 for i, k in enumerate(keys)}).done) == 3
    mapper = KeyMapper(NS, prefix=prefix_of(backend))
    stuck = mapper.key_for(keys[1])
    real_open = gc_module.open_store
    monkeypatch.setattr(
        gc_module,
        "open_store",
        lambda loc, settings: FailingDeletes(real_open(loc, settings), {stuck}),
    )
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    report = gc(
        backend.location,
        older_than=0,
        delete_empty_manifests=True,
        now=later,
        settings=backend.settings,
    )
    assert list(report.failures) == [stuck]
    assert (report.blocks_deleted, report.bytes_freed) == (2, 200)
    assert report.manifests_deleted == 0
    assert not report.ok
    left = backend.raw_keys(prefix_of(backend))
    assert mapper.config_key() in left and stuck in left and len(left) == 2

    # Once the block goes, the manifest goes with it.
    monkeypatch.undo()
    report = gc(
        backend.location,
        older_than=0,
        delete_empty_manifests=True,
        now=later,
        settings=backend.settings,
    )
    assert (report.blocks_deleted, report.manifests_deleted, report.ok) == (1, 1, True)
    assert backend.raw_keys(prefix_of(backend)) == []
