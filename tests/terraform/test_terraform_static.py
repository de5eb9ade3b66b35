"""Static checks of terraform/: formatting by a real Terraform, HCL conventions.

No provider can be downloaded here, so `terraform validate` is out of reach;
these checks, the proofs and checkov (test_checkov.py) stand in for it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from tfhelpers import TERRAFORM_DIR, blocks, fmt_check, load_hcl, module_dirs

pytestmark = pytest.mark.terraform

MODULES = {"aws", "aws-tenant", "documents", "minio", "minio-tenant"}
EXAMPLES = {"aws-single-cluster", "aws-cross-region-sharing", "minio"}

# Variables without a default, on purpose: nothing sensible to default to.
REQUIRED_VARIABLES = {
    "modules/documents": {"bucket", "prefix"},
    "modules/aws-tenant": {"bucket", "tenant"},
    "modules/minio-tenant": {"bucket", "tenant"},
    "modules/minio": {"endpoint_url"},
    "examples/minio": {"minio_server", "minio_user", "minio_password"},
}

ALL_DIRS = module_dirs()


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_layout():
    assert {p.name for p in (TERRAFORM_DIR / "modules").iterdir() if p.is_dir()} == MODULES
    assert {p.name for p in (TERRAFORM_DIR / "examples").iterdir() if p.is_dir()} == EXAMPLES
    assert (TERRAFORM_DIR / "README.md").is_file()


def test_fmt_is_clean():
    retcode, stdout, stderr = fmt_check(TERRAFORM_DIR)
    assert retcode == 0, f"terraform fmt -check -recursive found changes:\n{stdout}\n{stderr}"


def test_fmt_check_catches_bad_formatting(tmp_path):
    shutil.copy(TERRAFORM_DIR / "modules" / "documents" / "versions.tf", tmp_path / "versions.tf")
    (tmp_path / "bad.tf").write_text("locals {\n  a = 1\n  bbb = 2\n}\n")
    retcode, stdout, _ = fmt_check(tmp_path)
    assert retcode != 0 and "bad.tf" in stdout


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_id)
def test_files_parse_and_standard_files_exist(directory):
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (directory / name).is_file(), f"{_id(directory)} lacks {name}"
    for path in directory.glob("*.tf"):
        load_hcl(path)


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_id)
def test_versions_are_bounded(directory):
    (terraform,) = load_hcl(directory / "versions.tf")["terraform"]
    assert _bounded(terraform["required_version"]), terraform["required_version"]
    for providers in terraform.get("required_providers", []):
        for name, spec in providers.items():
            assert "/" in spec["source"], f"{name}: source must be namespace/name"
            assert _bounded(spec["version"]), (
                f"{_id(directory)} {name}: {spec['version']!r} is unbounded"
            )


def _bounded(constraint: str) -> bool:
    parts = [p.strip() for p in constraint.split(",")]
    return any(p.startswith(">=") for p in parts) and any(
        p.startswith("<") and not p.startswith("<=") for p in parts
    )


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_id)
def test_variables_are_typed_described_and_defaulted(directory):
    variables = blocks(directory, "variable")
    required = REQUIRED_VARIABLES.get(_id(directory), set())
    for name, body in variables.items():
        assert body.get("type"), f"{_id(directory)} var.{name} has no type"
        assert len(body.get("description", "")) >= 10, (
            f"{_id(directory)} var.{name} is not described"
        )
        if name in required:
            assert "default" not in body, (
                f"{_id(directory)} var.{name} is listed as required but has a default"
            )
        else:
            assert "default" in body, (
                f"{_id(directory)} var.{name} has no default and is not in REQUIRED_VARIABLES"
            )
    assert required <= set(variables), (
        f"REQUIRED_VARIABLES names missing variables: {required - set(variables)}"
    )


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_id)
def test_outputs_are_described(directory):
    outputs = blocks(directory, "output")
    assert outputs, f"{_id(directory)} has no outputs"
    for name, body in outputs.items():
        assert len(body.get("description", "")) >= 10, (
            f"{_id(directory)} output.{name} is not described"
        )


@pytest.mark.parametrize("directory", ALL_DIRS, ids=_id)
def test_readme_covers_every_variable_and_output(directory):
    readme = (directory / "README.md").read_text()
    names = [f"var {n}" for n in blocks(directory, "variable")] + [
        f"output {n}" for n in blocks(directory, "output")
    ]
    missing = [n for n in names if f"`{n.split()[1]}`" not in readme]
    assert not missing, f"{_id(directory)}/README.md does not mention {missing}"


@pytest.mark.parametrize("directory", [d for d in ALL_DIRS if d.parent.name == "examples"], ids=_id)
def test_examples_call_modules_by_relative_path(directory):
    calls = blocks(directory, "module")
    assert calls
    for name, body in calls.items():
        source = body["source"]
        assert re.fullmatch(r"\.\./\.\./modules/(aws|minio)", source), (
            f"module.{name} source {source!r}"
        )


def test_s3kv_outputs_are_offered_by_both_backend_modules():
    wanted = {
        "bucket",
        "prefix",
        "region",
        "endpoint",
        "s3kv_url",
        "s3kv_env",
        "writer_policy_json",
        "reader_policy_json",
    }
    for module in ("aws", "minio"):
        outputs = blocks(TERRAFORM_DIR / "modules" / module, "output")
        assert wanted <= set(outputs), f"modules/{module} lacks {wanted - set(outputs)}"
    minio_env = blocks(TERRAFORM_DIR / "modules" / "minio", "output")["s3kv_env"]["value"]
    assert set(minio_env) == {"AWS_ENDPOINT_URL", "AWS_REGION", "S3KV_PATH_STYLE"}


def test_versioning_is_forced_on_by_replication():
    main = (TERRAFORM_DIR / "modules" / "aws" / "main.tf").read_text()
    locals_ = {
        k: v
        for entry in load_hcl(TERRAFORM_DIR / "modules" / "aws" / "main.tf")["locals"]
        for k, v in entry.items()
    }
    assert locals_["versioning_enabled"] == (
        "${var.versioning_enabled || var.replication != null || var.receives_replication}"
    ), main


# --- checkov skips -------------------------------------------------------------

SKIP = re.compile(r"#\s*checkov:skip=([A-Z0-9_]+)(?::(.*))?")


def _skips():
    for path in sorted(TERRAFORM_DIR.rglob("*.tf")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = SKIP.search(line)
            if match:
                yield (
                    f"{path.relative_to(TERRAFORM_DIR)}:{number}",
                    match[1],
                    (match[2] or "").strip(),
                )


def test_every_checkov_skip_gives_a_reason():
    skips = list(_skips())
    assert skips, "expected the deliberate skips documented in modules/aws"
    for where, check, reason in skips:
        assert re.fullmatch(r"CKV2?_[A-Z]+_\d+", check), (
            f"{where}: {check} is not a checkov check id"
        )
        assert len(reason.split()) >= 8, (
            f"{where}: skip of {check} needs a reason a reviewer would accept"
        )
