"""Issue 29, point 3: every example in ``--help`` and in the docs runs as written.

The examples (tests/docs/examples.py: each ``--help`` paragraph of ``s3kv`` lines, each
shell block of README.md, docs/ and terraform/'s READMEs, docs/library.md's Python) run
unchanged in a sandbox of their own (tests/docs/sandbox.py): new mount and network
namespaces where ``/mnt`` holds the caches they name, the buckets they name exist on moto's
S3 server at 127.0.0.1:9000, ``minio`` resolves there and ``AWS_ENDPOINT_URL`` points AWS
there too. An example fails this test when it exits non-zero or prints a traceback.
Those that cannot run offline are skipped with the reason (``EXCLUDED``), visibly.

The sandbox needs ``unshare --mount --net`` (root, as ``make test`` already is for Ceph,
or unprivileged user namespaces): without it the test fails and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from tests.docs.examples import EXCLUDED, ROOT, Example, all_examples

# All examples run once, in one sandbox, on one worker: about a minute and a half, two
# demos of 128 MiB included (each example gets its world laid out afresh).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("doc-examples")]

EXAMPLES = all_examples()
RUN = [e for e in EXAMPLES if not e.excluded]


# Session-scoped: xdist may interleave other modules' tests on this worker, and a module
# fixture would then be built again (twice 200 s in CI).
@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if shutil.which("unshare") is None:
        pytest.fail("the doc examples run under unshare (util-linux): install it")
    work = tmp_path_factory.mktemp("examples")
    given, out = work / "examples.json", work / "results.json"
    given.write_text(json.dumps([
        {"where": e.where, "script": e.script, "language": e.language} for e in RUN]))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["unshare", "--mount", "--net", "--fork", "--kill-child", "--",
         sys.executable, "-m", "tests.docs.sandbox", str(given), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)  # fmt: skip
    if done.returncode != 0 or not out.exists():
        pytest.fail(
            "the examples' sandbox did not run (it needs unshare --mount --net: root, or "
            f"unprivileged user namespaces):\n{done.stderr[-3000:]}"
        )
    return {r["where"]: r for r in json.loads(out.read_text())}


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_the_example_runs_as_written(example: Example, results: dict[str, dict[str, Any]]) -> None:
    if example.excluded:
        pytest.skip(f"not run offline: {example.excluded}")
    result = results[example.where]
    shown = (f"{example.where} exited {result['code']}\n--- script\n{example.script}"
             f"--- stdout\n{result['stdout']}\n--- stderr\n{result['stderr']}")  # fmt: skip
    assert result["code"] == 0, shown
    assert "Traceback" not in result["stdout"] + result["stderr"], shown


def test_exclusions_are_few_and_each_still_names_an_example() -> None:
    unused = [
        key for key in EXCLUDED
        if not any(e.page == key[0] and e.first_line.startswith(key[1]) for e in EXAMPLES)
    ]  # fmt: skip
    assert unused == [], f"exclusions that match no example any more: {unused}"
    assert len(EXCLUDED) <= 15 and len(RUN) >= 2 * len(EXCLUDED)
    assert all(e.page.startswith(("README.md", "docs/", "terraform/"))
               for e in EXAMPLES if e.excluded)  # fmt: skip


def test_every_command_has_examples_that_run() -> None:
    from s3kv.cli.app import COMMANDS

    for module in COMMANDS:
        name = module.__name__.rsplit(".", 1)[1]
        assert any(e.where.startswith(f"s3kv {name} --help") for e in RUN), name
