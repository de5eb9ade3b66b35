"""bench/evidence/_rounds.py's before/after runs: the order alternates by round, and the
JSON keeps each tree's cells as medians with their range."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from bench.evidence import _rounds as rounds


def args(**given: object) -> argparse.Namespace:
    values: dict[str, object] = {"before": "HEAD", "after": "", "what": "a change",
                                 "rounds": 3, "out": "x.json"}  # fmt: skip
    return argparse.Namespace(**(values | given))


def test_the_trees_alternate_by_round_and_the_worktree_is_removed(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    seen: list[tuple[str, Path]] = []
    for name, tree, scratch in rounds.alternating(root, args()):
        assert (tree / "s3kv" / "__init__.py").exists() and not scratch.exists()
        seen.append((name, tree))
    assert [n for n, _ in seen] == ["before", "after", "after", "before", "before", "after"]
    before = {t for n, t in seen if n == "before"}
    assert {t for n, t in seen if n == "after"} == {root} and before != {root}
    assert not any(t.exists() for t in before)  # the worktree went with the run
    listed = subprocess.run(["git", "-C", str(root), "worktree", "list"], check=True,
                            capture_output=True, text=True).stdout  # fmt: skip
    assert str(next(iter(before))) not in listed


def test_the_json_has_each_trees_medians_with_their_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    runs = {"before": {"8 MiB": {"load_s": [2.0, 1.0, 3.0]}},
            "after": {"8 MiB": {"load_s": [1.5, 0.5, 1.0, 2.5]}}}  # fmt: skip
    rounds.write_before_after(out, args(after="abc1234"), "the command", 0.4, runs)
    doc = json.loads(out.read_text())
    assert doc["rows"] == {"before": {"8 MiB": {"load_s": {"median": 2.0, "min": 1.0, "max": 3.0}}},
                           "after": {"8 MiB": {"load_s": {"median": 1.25, "min": 0.5,
                                                          "max": 2.5}}}}  # fmt: skip
    assert (doc["before"], doc["after"], doc["load_average_at_start"]) == ("HEAD", "abc1234", 0.4)
    printed = capsys.readouterr().out
    assert "8 MiB  before    2.000 (1.00-3.00)" in printed
