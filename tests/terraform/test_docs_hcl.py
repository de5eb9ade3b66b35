"""The Terraform in the docs calls the modules as they are (issue 29, point 7).

docs/kubernetes.md, docs/sharing.md and the README show HCL that users copy. No provider
can be downloaded here (no `terraform validate`), so each ```hcl block is held to what
can be checked offline: it parses, `terraform fmt` leaves it as it is, every argument
given to a module of terraform/modules is one of its variables and every variable it
requires is given, and every `module.NAME.OUTPUT` it reads is one of that module's
outputs.
"""

from __future__ import annotations

import re
from pathlib import Path

import hcl2
import pytest
from tfhelpers import REPO_ROOT, TERRAFORM_DIR, blocks, fmt_check

pytestmark = pytest.mark.terraform

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```hcl\n(.*?)^```", re.S | re.M)
META = {"source", "version", "providers", "count", "for_each", "depends_on"}


def hcl_blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(REPO_ROOT)}:{line}", match.group(1)))
    return found


BLOCKS = hcl_blocks()


def test_the_docs_hold_hcl() -> None:
    assert any(where.startswith("docs/kubernetes.md") for where, _ in BLOCKS)


@pytest.mark.parametrize(("where", "text"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_each_block_parses_and_is_formatted(where: str, text: str, tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(text)
    code, out, err = fmt_check(tmp_path)
    assert code == 0, f"{where}: terraform fmt would change it:\n{out}{err}"
    hcl2.loads(text)


@pytest.mark.parametrize(("where", "text"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_each_module_call_matches_the_module(where: str, text: str) -> None:
    options = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
    parsed = hcl2.loads(text, serialization_options=options)
    calls = {name: body for entry in parsed.get("module", []) for name, body in entry.items()}
    for name, body in calls.items():
        source = str(body["source"]).strip('"')
        # ./terraform/... from the repository's root; ../../modules/... from an example
        base = REPO_ROOT if source.startswith("./") else TERRAFORM_DIR / "examples" / "any"
        module = (base / source).resolve()
        assert module.is_relative_to(TERRAFORM_DIR / "modules"), (where, source)
        variables = blocks(module, "variable")
        given = {arg for arg in body if not arg.startswith("__")} - META
        assert given <= set(variables), f"{where}: {name} has no variable {given - set(variables)}"
        required = {v for v, spec in variables.items() if "default" not in spec}
        assert required <= given, f"{where}: {name} needs {required - given}"
        outputs = set(blocks(module, "output"))
        used = set(re.findall(rf"module\.{name}\.(\w+)", text))
        assert used <= outputs, f"{where}: {name} has no output {used - outputs}"
