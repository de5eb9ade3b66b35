"""The house's floors (docs/architecture.md): no module imports a higher floor, and no
modules import each other in a circle. scripts/layers.py reads the imports from source."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "layers.py"


def _layers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("s3kv_layers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["s3kv_layers"] = module
    spec.loader.exec_module(module)
    return module


def test_no_module_imports_a_higher_floor_or_closes_a_circle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    layers = _layers()
    assert layers.main([]) == 0, capsys.readouterr().out
    edges = layers.graph()
    assert "s3kv.stores.rules" in edges and "s3kv.errors" in edges["s3kv.stores.rules"]


def test_the_check_finds_an_upward_import_and_a_circle() -> None:
    layers = _layers()
    edges = {"s3kv.errors": {"s3kv.cli.app"}, "s3kv.cli.app": {"s3kv.errors"}}
    assert layers.upward(edges) == [("s3kv.errors", "s3kv.cli.app")]
    assert layers.circles(edges) == [["s3kv.cli.app", "s3kv.errors"]]


def test_every_module_stands_on_a_floor() -> None:
    layers = _layers()
    floors = {name: layers.floor_of(name) for name in layers.modules()}
    assert floors["s3kv"] == 0 and floors["s3kv.stores.crt"] == 2
    assert floors["s3kv.vllm._tier"] == floors["s3kv.cli.app"] == len(layers.FLOORS) - 1


def test_no_module_outside_the_stores_asks_a_store_its_type() -> None:
    """What a store can do is its capabilities (``records_checksums``, ``has_tags``,
    ``is_local``, ``copies_from``), not its class: a wrapper or a new store then works."""
    import re

    asks = re.compile(r"isinstance\([^)]*\b(S3Store|CrtS3Store|LocalStore)\b")
    root = SCRIPT.parent.parent / "s3kv"
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in root.rglob("*.py")
        if "stores" not in path.relative_to(root).parts
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert found == []
    from s3kv.stores import LocalStore, S3Store

    assert S3Store.records_checksums and S3Store.has_tags and not S3Store.is_local
    assert LocalStore.is_local and not LocalStore.records_checksums
