"""gc against writers and against another gc (issue 19, points 8 and 10).

* ``--delete-empty-manifests`` must not orphan a writer that starts during the run: the
  namespace is listed again before the delete, and after it (the manifest is written
  back when a block appeared);
* a long-lived Uploader (the vLLM tier's) notices a vanished manifest and writes it again;
* gc counts only deletes the store confirmed, and two gc runs on one location never both
  claim the same frees (one lease per location).

Writers are injected at exact points of gc's run through a store wrapper.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from botocore.stub import Stubber

import s3kv.ops.gc.collect as gc_module
from s3kv import KeyMapper, LeaseHeldError, Namespace, Uploader, make_offload_key
from s3kv.naming.location import parse_location
from s3kv.ops.gc.collect import gc
from s3kv.ops.gc.lease import GCLease
from s3kv.ops.inventory import inventory
from s3kv.stores import PutOptions, open_store
from s3kv.stores.s3 import S3Store
from s3kv.transfers.listing import GC_LEASE_NAME, walk
from s3kv.transfers.transfer import BLOCK_TAGS
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
LATER = datetime.now(timezone.utc) + timedelta(hours=1)


def _keys(n: int, start: int = 1) -> list[bytes]:
    return [make_offload_key(bytes([start + i]) * 32, 0) for i in range(n)]


def _prefix(backend: Backend) -> str:
    return parse_location(backend.location).prefix


def _write(backend: Backend, keys: list[bytes]) -> KeyMapper:
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({k: b"x" * 100 for k in keys}).ok
    return KeyMapper(NS, prefix=_prefix(backend))


class Hooked:
    """A store that runs ``hook(name, args)`` before (or after) chosen calls."""

    def __init__(self, store: Any, before: dict[str, Any], after: dict[str, Any]) -> None:
        self.store, self.before, self.after = store, before, after

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.store, name)
        if name not in self.before and name not in self.after:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if name in self.before:
                self.before[name](*args)
            result = real(*args, **kwargs)
            if name in self.after:
                self.after[name](*args)
            return result

        return call


def _hook_gc(monkeypatch: pytest.MonkeyPatch, **hooks: Any) -> None:
    before = {k[len("before_"):]: v for k, v in hooks.items() if k.startswith("before_")}
    after = {k[len("after_"):]: v for k, v in hooks.items() if k.startswith("after_")}
    real_open = gc_module.open_store
    monkeypatch.setattr(
        gc_module, "open_store", lambda loc, settings: Hooked(real_open(loc, settings), before,
                                                              after))


def _writer_stores_a_block(backend: Backend, mapper: KeyMapper) -> Any:
    """A writer that checked its manifest long ago stores one block (no manifest write)."""
    store = open_store(backend.location, backend.settings)
    fired: list[str] = []

    def write(*args: Any) -> None:
        if not fired:
            fired.append("yes")
            key = mapper.key_for(_keys(1, start=200)[0])
            assert store.put(key, b"y" * 100, PutOptions(create_only=True, tags=BLOCK_TAGS))

    return write


def test_gc_keeps_a_manifest_when_a_writer_starts_before_its_delete(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapper = _write(backend, _keys(3))
    manifest = mapper.config_key()
    write = _writer_stores_a_block(backend, mapper)
    # The run listed three blocks and deleted them; as it reads the manifest to delete
    # it, a writer stores a block.
    _hook_gc(monkeypatch, before_get_range=lambda key, *a: write() if key == manifest else None)
    report = gc(backend.location, older_than=0, delete_empty_manifests=True, now=LATER,
                settings=backend.settings)
    assert report.blocks_deleted == 3
    assert report.manifests_deleted == 0
    assert manifest in backend.raw_keys(_prefix(backend))


def test_gc_restores_a_manifest_when_a_writer_stores_right_after_its_delete(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapper = _write(backend, _keys(3))
    manifest = mapper.config_key()
    data = backend.raw_get(manifest)
    write = _writer_stores_a_block(backend, mapper)

    def after_delete(items: list[tuple[str, str | None]]) -> None:
        if items and items[0][0] == manifest:
            write()

    _hook_gc(monkeypatch, after_delete_if_unchanged=after_delete)
    report = gc(backend.location, older_than=0, delete_empty_manifests=True, now=LATER,
                settings=backend.settings)
    assert (report.manifests_deleted, report.manifests_restored) == (0, 1)
    assert backend.raw_get(manifest) == data  # the same bytes, back in place


def test_a_long_lived_uploader_writes_its_vanished_manifest_again(backend: Backend) -> None:
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({_keys(1)[0]: b"x" * 100}).ok
        manifest = up.keys.config_key()
        data = backend.raw_get(manifest)
        backend.raw_delete(manifest)  # gc --delete-empty-manifests, between two jobs
        assert up.put_blocks({_keys(1, start=9)[0]: b"x" * 100}).ok  # within the interval
        up.manifest_recheck_seconds = 0.0  # the interval passed
        assert up.put_blocks({_keys(1, start=10)[0]: b"x" * 100}).ok
        assert backend.raw_get(manifest) == data
        # once found again, it is not written again on every job
        up.manifest_recheck_seconds = 3600.0
        backend.raw_delete(manifest)
        assert up.put_blocks({_keys(1, start=11)[0]: b"x" * 100}).ok
        assert manifest not in backend.raw_keys(_prefix(backend))


def test_two_gc_runs_never_both_claim_the_same_frees(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(backend, _keys(6))
    inside, release = threading.Event(), threading.Event()

    def hold(*args: Any) -> None:  # the first run waits inside its first delete
        inside.set()
        assert release.wait(20)

    real_open = gc_module.open_store
    opened: list[int] = []

    def open_store(loc: Any, settings: Any) -> Any:
        opened.append(1)
        store = real_open(loc, settings)
        return Hooked(store, {"delete_if_unchanged": hold}, {}) if len(opened) == 1 else store

    monkeypatch.setattr(gc_module, "open_store", open_store)
    reports: list[Any] = []
    first = threading.Thread(target=lambda: reports.append(
        gc(backend.location, older_than=0, now=LATER, settings=backend.settings)))
    first.start()
    try:
        assert inside.wait(20)
        with pytest.raises(LeaseHeldError, match="another s3kv gc is running"):
            gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    finally:
        release.set()
        first.join(20)
    (report,) = reports
    assert report.blocks_deleted == 6
    # the lease went with the run that held it: the next run starts (and frees nothing)
    again = gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    assert (again.blocks_deleted, again.bytes_freed) == (0, 0)
    assert not [k for k in backend.raw_keys() if k.endswith(GC_LEASE_NAME)]


def test_a_held_lease_is_no_stray_key(backend: Backend) -> None:
    _write(backend, _keys(2))
    store = open_store(backend.location, backend.settings)
    try:
        lease = GCLease(store, parse_location(backend.location), backend.settings)
        lease.acquire()
        assert inventory(backend.location, settings=backend.settings).stray_keys == 0
        if backend.is_s3:  # nor in a listing of the whole bucket (the cache is nested there)
            whole = parse_location(f"s3://{backend.bucket}")
            listed = [e.info.key for e in walk(store, whole)]
            assert listed and not [k for k in listed if k.endswith(GC_LEASE_NAME)]
        with pytest.raises(LeaseHeldError):
            GCLease(store, parse_location(backend.location), backend.settings).acquire()
        lease.release()
    finally:
        store.close()


def test_blocks_gone_before_the_delete_are_not_counted_as_freed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory knows: unlink says whether the file was still there."""
    root = tmp_path / "cache"
    backend = Backend("local", str(root), None, root=root)
    from s3kv import S3Settings

    backend.settings = S3Settings.resolve()
    mapper = _write(backend, _keys(4))
    victims = [mapper.key_for(k) for k in _keys(2)]

    def someone_else_deletes(items: list[tuple[str, str | None]]) -> None:
        for key in victims:
            if (root / key).exists():
                (root / key).unlink()

    _hook_gc(monkeypatch, before_delete_if_unchanged=someone_else_deletes)
    report = gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    assert (report.blocks_deleted, report.bytes_freed, report.already_gone) == (2, 200, 2)
    assert report.ok


def test_s3_deletes_carry_the_listed_etag_and_count_only_what_is_confirmed() -> None:
    """What AWS answers to a conditional DeleteObjects (moto and RGW 16 ignore ETags), and
    an answer that names no key (an empty or foreign 200): nothing counts as freed."""
    import boto3

    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k",
                          aws_secret_access_key="s")
    store = S3Store("b", _settings(), client=client)
    items = [("kv/a.bin", '"1"'), ("kv/b.bin", '"2"'), ("kv/c.bin", '"3"'), ("kv/d.bin", None)]
    sent = {"Bucket": "b", "Delete": {"Objects": [
        {"Key": "kv/a.bin", "ETag": '"1"'}, {"Key": "kv/b.bin", "ETag": '"2"'},
        {"Key": "kv/c.bin", "ETag": '"3"'}, {"Key": "kv/d.bin"}], "Quiet": False}}
    with Stubber(client) as stub:
        stub.add_response(
            "delete_objects",
            {"Deleted": [{"Key": "kv/a.bin"}],
             "Errors": [{"Key": "kv/b.bin", "Code": "NoSuchKey", "Message": "gone"},
                        {"Key": "kv/c.bin", "Code": "PreconditionFailed", "Message": "etag"},
                        {"Key": "kv/d.bin", "Code": "AccessDenied", "Message": "no"}]},
            sent,
        )
        stub.add_response("delete_objects", {}, sent)  # a 200 that confirms nothing
        failed, gone = store.delete_if_unchanged(items)
        assert gone == {"kv/b.bin", "kv/c.bin"}
        assert failed == {"kv/d.bin": "AccessDenied: no"}
        failed, gone = store.delete_if_unchanged(items)
        assert gone == set() and set(failed) == {k for k, _ in items}
        assert "did not name this key as deleted" in failed["kv/a.bin"]


def _settings() -> Any:
    from s3kv import S3Settings

    return S3Settings.resolve(endpoint_url="http://127.0.0.1:9", max_attempts=1)
