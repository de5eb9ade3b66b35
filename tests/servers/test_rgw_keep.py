"""A Ceph directory outlives the run only when a test failed, and the output says where.

Runs a small inner pytest session with rgw_keep's hooks and stand-in servers (a
directory each, no Ceph), so this costs a second, not a cluster start.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''
from pathlib import Path

import pytest

from tests.servers import rgw_keep
from tests.servers.rgw_keep import pytest_runtest_makereport, pytest_terminal_summary  # noqa


class FakeServer:
    """What rgw_keep uses of an RGWServer: base_dir, stop(), remove()."""

    def __init__(self, base_dir):
        self.base_dir = base_dir
        (base_dir / "logs").mkdir(parents=True)

    def stop(self):
        return self.base_dir / "logs"

    def remove(self):
        import shutil

        shutil.rmtree(self.base_dir)


@pytest.fixture
def server(request):
    s = FakeServer(Path(request.config.getoption("--dirs")) / request.node.name)
    rgw_keep.track(request.node, s)
    yield s
    rgw_keep.finish(s, keep=rgw_keep.failed(request.node))


def pytest_addoption(parser):
    parser.addoption("--dirs")
'''

TESTS = """
def test_passes(server):
    pass


def test_fails(server):
    assert False, "boom"
"""


def test_ceph_directory_kept_only_for_a_failed_test_and_named(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "conftest.py").write_text(CONFTEST)
    (inner / "test_inner.py").write_text(TESTS)
    dirs = tmp_path / "ceph"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--dirs", str(dirs), str(inner)],
        cwd=inner,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not (dirs / "test_passes").exists()
    kept = dirs / "test_fails"
    assert (kept / "logs").is_dir()
    # in the failure's own section, and in the run's summary
    assert f"kept for this failure: {kept} (logs in {kept / 'logs'})" in proc.stdout
    assert "Ceph RGW directories kept (a test failed)" in proc.stdout
    assert proc.stdout.count(str(kept)) >= 2
