"""__all__ is sorted, complete and importable (as httpx's test_exported_members)."""

from __future__ import annotations

import pytest

import s3kv

pytestmark = pytest.mark.unit


def test_all_is_sorted_and_exported() -> None:
    assert s3kv.__all__ == sorted(s3kv.__all__)
    for name in s3kv.__all__:
        assert hasattr(s3kv, name), name
    public = {n for n in dir(s3kv) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(s3kv.__all__), public - set(s3kv.__all__)


def test_every_error_is_in_the_tree() -> None:
    for name in s3kv.__all__:
        obj = getattr(s3kv, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, s3kv.S3KVError), name


def test_importing_s3kv_does_not_import_vllm() -> None:
    import sys

    assert "vllm" not in sys.modules
