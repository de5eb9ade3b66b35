"""Keep a Ceph RGW directory only when a test failed, and say where.

A stopped ``RGWServer`` leaves its logs and certificate in a temp directory (tens of MB
after a suite run). Servers are torn down with ``finish()``: removed when every test
that used them passed, kept otherwise. A failing test that used a server gets a
"Ceph RGW" section in its failure output naming the directory, and the run's summary
lists every directory kept.

The hooks are pulled into tests/conftest.py by name.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

# The servers a test started itself (the session's server is module state).
SERVERS = pytest.StashKey[list[Any]]()
REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()

_session: list[Any] = []  # the session's server while it runs
_kept: list[Path] = []  # what finish() kept, for the run's summary


def track(item: pytest.Item, server: Any) -> None:
    """Name server's directory in item's failure output."""
    item.stash.setdefault(SERVERS, []).append(server)


def track_session(server: Any) -> None:
    _session[:] = [server]


def failed(item: pytest.Item) -> bool:
    """True once any phase of item (setup, call) has failed."""
    return any(r.failed for r in item.stash.get(REPORTS, {}).values())


def finish(server: Any, *, keep: bool) -> None:
    """Stop server; delete its directory unless keep (then the summary names it)."""
    try:
        server.stop()
    finally:
        if server.base_dir is None:
            pass
        elif keep:
            _kept.append(server.base_dir)
        else:
            server.remove()
        if server in _session:
            _session.clear()


def uses_session_server(item: pytest.Item) -> bool:
    if "rgw" in getattr(item, "fixturenames", ()):
        return True
    # backend/s3_backend reach the rgw fixture by name at run time (rgw-http, rgw-https)
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(str(v).startswith("rgw") for v in params.values())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: Any
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    item.stash.setdefault(REPORTS, {})[report.when] = report
    if report.failed:
        servers = list(item.stash.get(SERVERS, []))
        if uses_session_server(item):
            servers += _session
        dirs = [s.base_dir for s in servers if s.base_dir is not None]
        if dirs:
            text = "\n".join(f"kept for this failure: {d} (logs in {d / 'logs'})" for d in dirs)
            report.sections.append(("Ceph RGW", text))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _kept:
        terminalreporter.write_sep("-", "Ceph RGW directories kept (a test failed)")
        for d in _kept:
            terminalreporter.write_line(f"{d}  (logs: {d / 'logs'})")
