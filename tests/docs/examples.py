"""Every example the project shows: in each command's ``--help`` and in the docs.

* ``--help``: each paragraph of an epilog made of ``s3kv ...`` lines (and their ``#``
  comments and ``\\`` continuations) is one example, run as one script: a paragraph is
  a story (``gc --dry-run``, then ``gc``).
* README.md, docs/*.md and terraform/**/README.md: each shell block (```sh, ```bash,
  ```shell) is one script; and docs/library.md's Python example.

Examples that cannot run offline are listed in :data:`EXCLUDED` with the reason, matched
by their page and first line (a test fails when one no longer matches, so the list
cannot hide a new example). tests/docs/test_examples.py runs the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = ("sh", "bash", "shell")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "terraform").glob("**/README.md"))]  # fmt: skip
FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```", re.S | re.M)

NEEDS_ACCOUNT = "Terraform against AWS or MinIO: a cloud account and providers from the internet"
EXCLUDED: dict[tuple[str, str], str] = {
    ("README.md", "make demo"): "builds .venv from the package registries (the demo itself "
    "runs here as s3kv demo's --help examples), and make test is this suite",
    ("README.md", "vllm serve Qwen/Qwen3-8B --kv-transfer-config '{"): "a vLLM server: a "
    "GPU and a model download",
    ("docs/vllm-tier.md", "vllm serve Qwen/Qwen3-8B --kv-transfer-config '{"): "a vLLM "
    "server: a GPU and a model download",
    ("docs/vllm-tier.md", "AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin \\"):
    "a vLLM server: a GPU and a model download",
    ("docs/benchmarks.md", ".venv-vllm/bin/python bench/bench_prompt_load.py"): "the full "
    "benchmark, an hour on a quiet machine (tests/vllm/test_bench_prompt_load.py runs it "
    "small)",
    ("docs/e2e.md", "bash scripts/vllm-engine-venv.sh"): "builds a 3.6 GB virtualenv "
    "(make test does, for tests/e2e)",
    ("docs/e2e.md", "VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=2 \\"):
    "a real engine with a model of your own (tests/e2e runs the same with a test model)",
    ("docs/e2e.md", ".venv-vllm-engine/bin/python bench/bench_ttft.py"): "a benchmark of a "
    "real engine, minutes on a quiet machine",
    ("terraform/examples/aws-cross-region-sharing/README.md", "terraform init"): NEEDS_ACCOUNT,
    ("terraform/examples/aws-single-cluster/README.md", "terraform init"): NEEDS_ACCOUNT,
    ("terraform/examples/aws-single-cluster/README.md", "export $(terraform output -json "
     "s3kv_env | jq -r 'to_entries[] | \"\\(.key)=\\(.value)\"')"): NEEDS_ACCOUNT,
    ("terraform/examples/minio/README.md", "terraform init"): NEEDS_ACCOUNT,
    ("terraform/examples/minio/README.md", "export $(terraform output -json s3kv_env | jq -r "
     "'to_entries[] | \"\\(.key)=\\(.value)\"')"): NEEDS_ACCOUNT,
    ("terraform/modules/documents/README.md", "terraform output -raw "
     "lifecycle_configuration_json > lifecycle.json"): NEEDS_ACCOUNT,
}


@dataclass(frozen=True)
class Example:
    where: str
    """``s3kv gc --help:3`` (the paragraph) or ``docs/operations.md:48`` (the fence line)."""
    script: str
    language: str = "bash"
    page: str = ""
    """The page (``README.md``, ``docs/x.md``) a doc example comes from; "" for --help."""

    @property
    def first_line(self) -> str:
        return next(line.strip() for line in self.script.splitlines() if line.strip()
                    and not line.lstrip().startswith("#"))  # fmt: skip

    @property
    def excluded(self) -> str | None:
        """Why it is not run (its page and the start of its first line are listed)."""
        for (page, start), why in EXCLUDED.items():
            if page == self.page and self.first_line.startswith(start):
                return why
        return None


def help_examples() -> list[Example]:
    from s3kv.cli.app import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    found = []
    for name, sub in commands.items():
        for i, paragraph in enumerate((sub.epilog or "").split("\n\n")):
            lines = [line[2:] for line in paragraph.splitlines() if line.startswith("  ")]
            if not any(line.startswith("s3kv ") for line in lines):
                continue
            found.append(Example(f"s3kv {name} --help:{i}", "\n".join(lines) + "\n"))
    return found


def doc_examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text()
        name = page.relative_to(ROOT).as_posix()
        for match in FENCE.finditer(text):
            language, body = match.group(1), match.group(2)
            line = text.count("\n", 0, match.start()) + 1
            if language in SHELL:
                found.append(Example(f"{name}:{line}", body, "bash", name))
            elif language == "python" and name == "docs/library.md" and not found_python(found):
                found.append(Example(f"{name}:{line}", body, "python", name))
    return found


def found_python(found: list[Example]) -> bool:
    return any(e.language == "python" for e in found)


def all_examples() -> list[Example]:
    return help_examples() + doc_examples()
