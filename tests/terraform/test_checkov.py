"""checkov over terraform/, through scripts/checkov.sh (its own virtualenv,
since checkov pins an old boto3): zero failed checks. The first run creates
.venv-checkov from PyPI, which takes a few minutes; later runs take seconds."""

from __future__ import annotations

import subprocess

import pytest
from tfhelpers import REPO_ROOT

# The slowest test of the main suite (checkov's own start-up, then every one of its
# Terraform checks over terraform/): needed at that cost, it is the only static security
# check of the modules. Under xdist it holds one worker while the other goes on.
pytestmark = [pytest.mark.terraform, pytest.mark.venv]


def test_checkov_reports_no_failed_check():
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "checkov.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"checkov failed (exit {result.returncode}):\n{report[-6000:]}"
    assert "Failed checks: 0" in result.stdout, report[-6000:]
