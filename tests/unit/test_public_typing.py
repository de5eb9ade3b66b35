"""The public API is typed: a user's script made of docs/library.md's example passes
``mypy --strict``, what it gets back has precise types (``reveal_type``), and misuse is
caught by the type checker, not only at run time. Reports print one summary line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from s3kv import TransferReport

pytestmark = [pytest.mark.unit, pytest.mark.xdist_group("mypy")]  # one .mypy_cache writer

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = 'hashes: list[str] = ["ab" * 32, "cd" * 32]\n'

# After the documented example: what each name it binds must be, as mypy sees it.
REVEALED = {
    "up": "s3kv.transfers.uploader.Uploader",
    "down": "s3kv.transfers.downloader.Downloader",
    "report": "s3kv.report.TransferReport",
    "report.failed": "typing.Mapping[bytes, str]",
    "report.stored": "tuple[bytes, ...]",
    "hits": "int",
    "job": "s3kv.transfers.jobs.TransferJob",
    "job.wait(1)": "s3kv.report.TransferReport",
    "down.contains(keys)": "list[bool]",
    "down.get_range(keys[0], start=0, end=4)": "bytes",
    "settings": "s3kv.settings.S3Settings",
}

# Each line is wrong in a way the signatures must catch (an Any would let it through).
MISUSE = [
    'up.put_blocks({"a-str-is-no-key": b"x"})',
    'down.get_blocks(keys, into=["a str is no buffer"])',
    "down.get_blocks([3.5])",
    "down.lookup(keys[0])",
    'Downloader("s3://b/p", ns, settings=settings, no_such_option=1)',
    'Uploader("s3://b/p", ns, concurrency="8")',
]


def _example() -> str:
    text = (ROOT / "docs" / "library.md").read_text()
    (first, *_) = re.findall(r"```python\n(.*?)```", text, re.S)
    return first


def _mypy(tmp_path: Path, body: str) -> list[str]:
    from mypy import api

    script = tmp_path / "user_script.py"
    script.write_text(body)
    # The project's settings (strict; stub-less awscrt/moto ignored) and its warm cache.
    out, err, _ = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(ROOT / ".mypy_cache"), str(script)])
    assert not err, err
    return [line for line in out.splitlines() if line.startswith(str(script))]


def test_the_documented_example_passes_mypy_strict_with_precise_types(tmp_path: Path) -> None:
    lines = PRELUDE + _example()
    first = lines.count("\n") + 1
    lines += "".join(f"reveal_type({expr})\n" for expr in REVEALED)
    out = _mypy(tmp_path, lines)
    errors = [line for line in out if ": error:" in line]
    assert not errors, "\n".join(errors)
    revealed = {
        int(m.group(1)): m.group(2)
        for line in out
        if (m := re.search(r":(\d+): note: Revealed type is \"(.*)\"$", line))
    }
    got = {expr: revealed.get(first + i) for i, expr in enumerate(REVEALED)}
    assert got == REVEALED


def test_misuse_of_the_api_is_a_type_error(tmp_path: Path) -> None:
    lines = PRELUDE + _example()
    first = lines.count("\n") + 1
    lines += "".join(f"{line}\n" for line in MISUSE)
    out = _mypy(tmp_path, lines)
    flagged = {int(m.group(1)) for line in out if (m := re.search(r":(\d+): error:", line))}
    missed = [line for i, line in enumerate(MISUSE) if first + i not in flagged]
    assert not missed, "\n".join(out)
    assert flagged <= set(range(first, first + len(MISUSE))), "\n".join(out)


def test_a_report_prints_its_summary_and_its_repr_stays_short() -> None:
    keys = tuple(i.to_bytes(36, "big") for i in range(5000))
    report = TransferReport(
        "download", done=keys[:4990], failed={k: "checksum mismatch " * 50 for k in keys[4990:]},
        bytes=4990 * 2048, seconds=0.5, data={k: b"x" * 2048 for k in keys[:4990]},
    )
    assert str(report) == report.summary()
    assert str(report).startswith("4990 loaded, 0 missing, 10 failed; 9.7 MiB in 0.50s")
    text = repr(report)
    assert len(text) < 600 and "done=4990" in text and "failed=10" in text
    assert "(+7 more)" in text and keys[0].hex() not in text


def test_the_worker_group_reaches_xdist(request: pytest.FixtureRequest) -> None:
    """``--dist loadgroup`` keeps each ``xdist_group`` on one worker only while xdist can
    tag its tests (the pin on pytest in pyproject.toml): else two Ceph servers, two mypy
    caches and two doc-example sandboxes run at once, and nothing else says so."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under pytest-xdist --dist loadgroup")
    assert request.node.nodeid.endswith("@mypy"), request.node.nodeid
