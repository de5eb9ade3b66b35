"""Run the examples as written, in a sandbox that holds what they name.

    unshare --mount --net --fork --kill-child -- python -m tests.docs.sandbox IN.json OUT.json

Started by tests/docs/test_examples.py in new mount and network namespaces, so the
examples run exactly as the docs and ``--help`` write them, with nothing rewritten:

* the network is loopback only (the examples cannot reach the internet, or anything
  else), with moto's S3 server listening on 127.0.0.1:9000;
* ``/etc/hosts`` names ``minio`` and ``minio.internal`` 127.0.0.1, so ``--endpoint-url
  http://minio:9000`` reaches that server, and ``AWS_ENDPOINT_URL`` points everything
  else (AWS itself, in the examples) at it: the endpoint comes from the environment;
* ``/mnt`` is an empty tmpfs where :mod:`tests.docs.world` lays out the caches the
  examples name (``/mnt/kv``, ``/mnt/kv-old``), next to the buckets (``my-bucket``,
  ``team-a``, ``kv-cache``, ...): each example finds that world as laid out (it is laid
  out again after any example that changed it, :func:`tests.docs.world.fingerprint`).

Each example runs in a fresh working directory with ``bash -e -o pipefail`` (Python for
docs/library.md's), and its exit code and output are written to OUT.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.docs import world

PORT = 9000
ENDPOINT = f"http://127.0.0.1:{PORT}"
TIMEOUT = 300.0
MNT = Path("/mnt")
HOSTS = "127.0.0.1 localhost minio minio.internal\n::1 localhost\n"


def isolate(work: Path) -> None:
    """Loopback up, an empty /mnt, and an /etc/hosts that names minio."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "s3kv-examples", "/mnt"],
                   check=True)  # fmt: skip
    hosts = work / "hosts"
    hosts.write_text(HOSTS)
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)


def start_s3(work: Path) -> subprocess.Popen[bytes]:
    log = (work / "moto.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(PORT)],
        stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{ENDPOINT}/moto-api/", timeout=1).close()
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((work / "moto.log").read_text()[-2000:]) from None
            time.sleep(0.1)


def environment(home: Path) -> dict[str, str]:
    """What a user's shell would have: the project's venv on PATH, AWS credentials, and
    the endpoint from the environment (no S3KV_* setting)."""
    venv_bin = Path(sys.executable).parent
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "AWS_ENDPOINT_URL": ENDPOINT,
        "AWS_ACCESS_KEY_ID": world.ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": world.ACCESS_KEY,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }


class World:
    """The examples' world, laid out again only when the last example changed it."""

    def __init__(self) -> None:
        self.s3 = world.client(ENDPOINT)  # one client for every layout and fingerprint
        self.fresh: list[object] | None = None  # its fingerprint as laid out
        self.changed = True

    def ready(self) -> bool:
        """Lay the world out if it changed; True if it was laid out."""
        if not self.changed:
            return False
        world.reset(ENDPOINT, self.s3, MNT)
        self.fresh = world.fingerprint(self.s3, MNT)
        return True

    def check(self) -> None:
        self.changed = world.fingerprint(self.s3, MNT) != self.fresh


def run_one(example: dict[str, str], work: Path, examples_world: World) -> dict[str, object]:
    laid_out = examples_world.ready()
    cwd = Path(tempfile.mkdtemp(dir=work, prefix="example-"))
    if example["language"] == "python":
        argv = [sys.executable, "-c", example["script"]]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", example["script"]]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, env=environment(cwd), capture_output=True,
                              text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = -1, str(exc.stdout or ""), f"timed out after {TIMEOUT:.0f}s"
    shutil.rmtree(cwd, ignore_errors=True)
    examples_world.check()
    return {"where": example["where"], "code": code, "stdout": out[-4000:],
            "stderr": err[-4000:], "seconds": round(time.monotonic() - started, 2),
            "laid_out": laid_out}  # fmt: skip


def main() -> None:
    examples = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="s3kv-examples-") as tmp:
        work = Path(tmp)
        isolate(work)
        server = start_s3(work)
        try:
            examples_world = World()
            results = [run_one(example, work, examples_world) for example in examples]
        finally:
            server.terminate()
            server.wait(30)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
