"""The request hook on every data path: boto3 (moto), awscrt (moto's server: submitted
PUTs and GETs, blocking GETs and HEADs) and a directory, through the block API."""

from __future__ import annotations

import pytest

from s3kv import Downloader, Namespace, Uploader
from s3kv.stores import open_store
from s3kv.stores.base import RequestEvent
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="m", tokens_per_hash=16, dtype="float16")
KEYS = [bytes([i]) * 32 + (0).to_bytes(4, "big") for i in range(1, 4)]
ROW = 4096


def test_every_block_request_is_reported(backend: Backend) -> None:
    store = open_store(backend.location, backend.settings)
    events: list[RequestEvent] = []
    store.on_request = events.append
    try:
        with Uploader(backend.location, NS, settings=backend.settings, store=store) as up:
            assert up.put_blocks({k: bytes([7]) * ROW for k in KEYS}).ok
            stored = {up.keys.key_for(k) for k in KEYS}
        with Downloader(backend.location, NS, settings=backend.settings, store=store) as down:
            rows = [bytearray(ROW) for _ in KEYS]
            assert down.get_blocks(KEYS, into=rows).ok
            absent = bytes([9]) * 32 + (0).to_bytes(4, "big")
            assert down.lookup([*KEYS[:1], absent]) == 1  # the first known present
            missing = down.keys.key_for(absent)
    finally:
        store.close()
    blocks = [e for e in events if e.key in stored]
    puts = [(e.key, e.outcome, e.nbytes, e.attempt) for e in blocks if e.operation == "put"]
    assert sorted(puts) == sorted((k, "created", ROW, 1) for k in stored)
    gets = [e for e in blocks if e.operation == "get"]
    assert sorted(e.key for e in gets) == sorted(stored)
    assert all(e.outcome == "ok" and e.nbytes == ROW for e in gets)
    assert all(e.info is not None and e.info.key == e.key for e in gets)
    heads = [(e.outcome, e.attempt) for e in events if e.key == missing]
    assert heads == [("not_found", 1)]
    assert {e.operation for e in events if e.key == missing} == {"head"}
