"""bench/bench_prompt_load.py's ``--loop-work-ms``: the stand-in scheduler's Python work per
step, which a diagnostic run sets to 0 to see how much of a tier's load time is the CPU
the scheduler's steps take."""

from __future__ import annotations

import pytest

from bench import bench_prompt_load
from bench.lib import engine_loop


def test_the_default_is_the_loop_s_own_work_per_step() -> None:
    args = bench_prompt_load.parse_args([])
    assert args.loop_work_ms == engine_loop.WORK_SECONDS * 1000 == 2.0


def test_a_negative_time_per_step_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_prompt_load.parse_args(["--loop-work-ms", "-1"])
    assert exit_.value.code == 2
    assert "--loop-work-ms is a time per step: 0 or more" in capsys.readouterr().err


def test_no_work_leaves_one_iteration_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_loop, "_iterations", 0)
    monkeypatch.setattr(engine_loop, "WORK_SECONDS", 0.0)
    assert engine_loop.calibrate() == 1
    monkeypatch.setattr(engine_loop, "_iterations", 0)
    monkeypatch.setattr(engine_loop, "WORK_SECONDS", 0.002)
    assert engine_loop.calibrate() > 1
