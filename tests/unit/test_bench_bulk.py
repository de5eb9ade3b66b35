"""bench/bench_bulk.py's parts that need no server: the tree check that stops a run, the
commands each tool is run with, the child's timing, the rows and the tables the docs show.

tests/cli/test_bench_bulk_quick.py runs the whole benchmark small against Ceph RGW.
The numbers here are made up (``FIXTURE``); none is a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import bench_bulk
from bench.lib import bulk_report as report
from bench.lib import bulk_tools as tools
from bench.lib import bulk_tree as tree
from scripts import doc_figures
from tests.unit.bench_fixtures import FIXTURE, trust

pytestmark = pytest.mark.unit

HTTP = tools.Endpoint("rgw-http", "http://127.0.0.1:7480", "AK", "SK")
HTTPS = tools.Endpoint("rgw-https", "https://127.0.0.1:7443", "AK", "SK", ca_bundle="/ca.pem")


# -- the tree check -------------------------------------------------------------------------


def make_tree(root: Path) -> Path:
    (root / "ns_abc").mkdir(parents=True)
    (root / "ns_abc" / "config.json").write_text("{}")
    blocks = root / "ns_abc_r0" / "0a1" / "b2_g0"
    blocks.mkdir(parents=True)
    for i in range(3):
        (blocks / f"{i:064x}.bin").write_bytes(bytes([i]) * 5000)
    return root


def test_an_identical_tree_passes_and_empty_directories_do_not_count(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    copy = make_tree(tmp_path / "copy")
    (copy / "ns_abc_r0" / "empty").mkdir()
    assert tree.compare(src, copy) == []


def test_every_kind_of_difference_is_named(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    copy = make_tree(tmp_path / "copy")
    blocks = copy / "ns_abc_r0" / "0a1" / "b2_g0"
    (blocks / f"{0:064x}.bin").unlink()  # missing
    (copy / "stray.part").write_bytes(b"x")  # extra
    flipped = bytearray((blocks / f"{1:064x}.bin").read_bytes())
    flipped[4999] ^= 1  # same size, one bit off
    (blocks / f"{1:064x}.bin").write_bytes(flipped)
    (blocks / f"{2:064x}.bin").write_bytes(b"\x02" * 4999)  # short
    problems = tree.compare(src, copy)
    assert problems == [
        f"1 missing: ns_abc_r0/0a1/b2_g0/{0:064x}.bin",
        "1 extra: stray.part",
        f"2 different bytes: ns_abc_r0/0a1/b2_g0/{1:064x}.bin, ns_abc_r0/0a1/b2_g0/{2:064x}.bin",
    ]
    assert tree.compare(src, tmp_path / "nothing") == [f"{tmp_path / 'nothing'} is not a directory"]


# -- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize("tool", tools.TOOLS)
def test_push_and_pull_are_the_same_copy_both_ways(tool: str) -> None:
    push = tools.command(tool, "push", HTTP, "/c", "bkt", f"/bin/{tool}")
    pull = tools.command(tool, "pull", HTTP, "/p", "bkt", f"/bin/{tool}")
    assert push.argv[0] == pull.argv[0] == f"/bin/{tool}"
    remote = {"s3kv": "s3://bkt/kv", "s5cmd": "s3://bkt/kv/", "aws-cli": "s3://bkt/kv",
              "rclone": "rgw:bkt/kv"}[tool]
    local_push = "/c/*" if tool == "s5cmd" else "/c"
    local_pull = "/p/" if tool == "s5cmd" else "/p"
    remote_pull = remote + "*" if tool == "s5cmd" else remote
    assert push.argv.index(local_push) + 1 == push.argv.index(remote)
    assert pull.argv.index(remote_pull) + 1 == pull.argv.index(local_pull)
    assert "/ca.pem" not in " ".join(push.argv) + json.dumps(push.env)  # HTTP: no CA


def test_each_tool_trusts_the_ca_its_own_way_over_tls() -> None:
    def run(tool: str) -> tools.Invocation:
        return tools.command(tool, "push", HTTPS, "/c", "bkt", tool)

    assert run("s3kv").argv[-2:] == ["--ca-bundle", "/ca.pem"]
    assert run("aws-cli").argv[-2:] == ["--ca-bundle", "/ca.pem"]
    assert run("rclone").argv[-2:] == ["--ca-cert", "/ca.pem"]
    assert run("s5cmd").env == {"AWS_CA_BUNDLE": "/ca.pem"}  # s5cmd has no option
    rclone = run("rclone").env
    assert rclone["RCLONE_CONFIG_RGW_ENDPOINT"] == HTTPS.url
    assert rclone["RCLONE_CONFIG_RGW_TYPE"] == "s3" and rclone["RCLONE_CONFIG_RGW_ENV_AUTH"]


def test_the_one_departure_from_a_default_is_aws_cli_over_tls_and_it_is_shown() -> None:
    for tool in tools.TOOLS:
        env = tools.command(tool, "push", HTTP, "/c", "b", tool).env
        assert "AWS_REQUEST_CHECKSUM_CALCULATION" not in env
    tls = tools.command("aws-cli", "push", HTTPS, "/c", "b", "aws")
    assert tls.env["AWS_REQUEST_CHECKSUM_CALCULATION"] == "when_required"
    assert tls.typed.startswith("AWS_REQUEST_CHECKSUM_CALCULATION=when_required aws s3 cp ")
    assert report.deviations() == {"aws-cli": {"https": {
        "env": {"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"},
        "why": tools.WHY[("aws-cli", "https")]}}}


def test_the_typed_commands_are_what_an_operator_types() -> None:
    assert tools.typed_template("s5cmd", "pull", HTTPS) == (
        "AWS_CA_BUNDLE=ca.pem s5cmd --endpoint-url https://URL cp 's3://BUCKET/kv/*' DIR/")
    assert tools.typed_template("s3kv", "push", HTTP) == (
        "s3kv push DIR s3://BUCKET/kv --endpoint-url http://URL")
    assert tools.typed_template("rclone", "pull", HTTP).endswith(
        "rclone copy rgw:BUCKET/kv DIR")
    with pytest.raises(ValueError, match="unknown tool 'mc'"):
        tools.command("mc", "push", HTTP, "/c", "b", "mc")


def test_no_variable_of_this_machine_reaches_a_tool(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    for name in ("AWS_CA_BUNDLE", "AWS_PROFILE", "S3KV_CONCURRENCY", "RCLONE_TRANSFERS"):
        monkeypatch.setenv(name, "from-the-machine")
    env = tools.base_env(HTTP, tmp_path)
    assert env["HOME"] == str(tmp_path) and env["AWS_ACCESS_KEY_ID"] == "AK"
    assert not {"AWS_CA_BUNDLE", "AWS_PROFILE", "S3KV_CONCURRENCY", "RCLONE_TRANSFERS"} & set(env)


def test_every_tool_goes_first_in_turn() -> None:
    names = list(tools.TOOLS)
    orders = [bench_bulk.rotation(names, r) for r in range(5)]
    assert [o[0] for o in orders] == ["s3kv", "s5cmd", "aws-cli", "rclone", "s3kv"]
    assert all(sorted(o) == sorted(names) for o in orders)


def test_caches_are_parsed_to_whole_blocks() -> None:
    assert bench_bulk.parse_caches("256K:256M,2M:5M") == [
        {"block_bytes": 256 << 10, "blocks": 1024, "bytes": 256 << 20},
        {"block_bytes": 2 << 20, "blocks": 2, "bytes": 4 << 20}]
    for bad in ("2M", "2M:1M", "2X:4M"):
        with pytest.raises(SystemExit, match="--caches"):
            bench_bulk.parse_caches(bad)


def test_quick_is_small_unless_told_otherwise() -> None:
    quick = bench_bulk.parse_args(["--quick"])
    assert (quick.cache_list, quick.rounds, quick.warmup, quick.link_list) == (
        [{"block_bytes": 256 << 10, "blocks": 16, "bytes": 4 << 20}], 1, 0, ["rgw-http"])
    assert bench_bulk.parse_args(["--quick", "--links", "rgw-https"]).link_list == ["rgw-https"]
    with pytest.raises(SystemExit):  # a smoke run never lands in the docs' JSON
        bench_bulk.parse_args(["--quick", "--json", str(doc_figures.json_path("bulk"))])
    full = bench_bulk.parse_args([])
    assert [c["block_bytes"] >> 10 for c in full.cache_list] == [256, 2048, 8192, 32768]
    assert (full.rounds, full.warmup, full.link_list) == (3, 1, ["rgw-http", "rgw-https"])


# -- a copy, timed and checked --------------------------------------------------------------


def test_a_child_s_cpu_is_measured_and_a_failure_keeps_its_output(tmp_path: Path) -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    got = bench_bulk.timed([sys.executable, "-c", burn], dict(os.environ), tmp_path / "o", 60)
    assert got["exit"] == 0 and "error" not in got
    assert got["cpu_s"] >= 0.3 and got["seconds"] >= 0.3
    bad = bench_bulk.timed([sys.executable, "-c", "print('no bucket'); raise SystemExit(3)"],
                           dict(os.environ), tmp_path / "o", 60)
    assert bad["exit"] == 3 and bad["error"].startswith("exit 3: no bucket")
    hung = bench_bulk.timed([sys.executable, "-c", "import time; time.sleep(30)"],
                            dict(os.environ), tmp_path / "o", 0.5)
    assert hung["exit"] == -9 and "killed at --timeout" in hung["error"]


FAKE = """#!{python}
# A stand-in for s3kv's CLI: a "bucket" is a directory beside HOME; a marker file corrupts
# what it pulls.
import shutil, sys
from pathlib import Path
import os
home = Path(os.environ["HOME"])
op, a, b = sys.argv[1:4]
remote = lambda url: home.parent / "store" / url.removeprefix("s3://")
if op == "push":
    shutil.copytree(a, remote(b))
else:
    shutil.copytree(remote(a), b)
    if (home.parent / "corrupt").exists():
        victim = sorted(Path(b).rglob("*.bin"))[0]
        data = bytearray(victim.read_bytes()); data[0] ^= 1; victim.write_bytes(data)
"""


class Admin:
    """The boto3 calls Bench makes for a bucket (its argument names are boto3's)."""

    def __init__(self) -> None:
        self.buckets: list[str] = []

    def create_bucket(self, Bucket: str) -> None:
        self.buckets.append(Bucket)

    def get_paginator(self, name: str) -> Any:
        return argparse.Namespace(paginate=lambda **kw: [{"Contents": []}])

    def list_multipart_uploads(self, Bucket: str) -> dict[str, Any]:
        return {}

    def delete_bucket(self, Bucket: str) -> None:
        self.buckets.remove(Bucket)


def fake_bench(tmp_path: Path) -> tuple[bench_bulk.Bench, Any, dict[str, Any]]:
    exe = tmp_path / "fake-s3kv"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    bench = bench_bulk.Bench(argparse.Namespace(timeout=60), work, {"s3kv": str(exe)})
    gc: list[bool] = []
    link = argparse.Namespace(admin=Admin(), collect_garbage=lambda: gc.append(True), gc=gc)
    cache = {"block_bytes": 5000, "blocks": 3, "bytes": 15000,
             "dir": make_tree(tmp_path / "cache")}
    return bench, link, cache


def test_a_faithful_copy_is_recorded_checked_and_cleaned_up(tmp_path: Path) -> None:
    bench, link, cache = fake_bench(tmp_path)
    bench.copy(link, HTTP, cache, "s3kv", 0, warmup=False)
    push, pull = bench.runs
    assert (push["direction"], pull["direction"]) == ("push", "pull")
    assert pull["compared"] is True and "compared" not in push
    assert pull["cpu_s"] > 0 and not bench.errors
    assert link.admin.buckets == [] and link.gc == [True]  # dropped, its tails freed
    left = sorted(p.name for p in bench.work.iterdir())
    assert left == ["home", "store"]  # no pulled tree, no logs ("store": the fake's bucket)


def test_a_pulled_tree_that_differs_stops_the_run(tmp_path: Path) -> None:
    bench, link, cache = fake_bench(tmp_path)
    (bench.work / "corrupt").touch()
    with pytest.raises(bench_bulk.Mismatch, match=r"s3kv pull .* 1 different bytes: "
                       r"ns_abc_r0/0a1/b2_g0/0{64}\.bin"):
        bench.copy(link, HTTP, cache, "s3kv", 0, warmup=False)
    assert [r["direction"] for r in bench.runs] == ["push"]  # the bad pull is not a result


def test_a_failed_push_is_an_error_and_nothing_is_pulled(tmp_path: Path) -> None:
    bench, link, cache = fake_bench(tmp_path)
    cache["dir"] = tmp_path / "no-such-cache"
    bench.copy(link, HTTP, cache, "s3kv", 2, warmup=False)
    (run,) = bench.runs
    assert run["exit"] != 0 and "FileNotFoundError" in run["error"]
    (error,) = bench.errors
    assert error["tool"] == "s3kv" and error["direction"] == "push" and error["round"] == 2


# -- rows and tables ------------------------------------------------------------------------


def run(tool: str, direction: str, seconds: float, round_: int = 1, link: str = "rgw-http",
        block: int = 2 << 20, **extra: Any) -> dict[str, Any]:
    return {"round": round_, "warmup": round_ == 0, "link": link, "block_bytes": block,
            "blocks": (512 << 20) // block, "bytes": 512 << 20, "tool": tool,
            "direction": direction, "seconds": seconds, "cpu_s": seconds / 4, **extra}


def doc(loaded: bool = False) -> dict[str, Any]:
    runs = [run("s3kv", "push", 99.0, round_=0)]  # a warm-up: not counted
    for r, f in ((1, 1.0), (2, 1.05), (3, 0.95)):
        runs += [run("s3kv", "push", 2.0 * f, r), run("s5cmd", "push", 1.0 * f, r),
                 run("s3kv", "pull", 2.0 * f, r), run("s5cmd", "pull", 4.0 * f, r)]
    runs.append(run("rclone", "pull", 3.0, 1, exit=1, error="exit 1: boom"))
    runs.append(run("s5cmd", "push", 9.0, 4))  # a round far off: marked
    meta = {"writer_label": "vLLM 0.33.0's own fs tier", "rounds": 3, "warmup": 1,
            "caches": [{"block_bytes": 2 << 20, "blocks": 256, "bytes": 512 << 20}],
            "tools": {"s3kv": {}, "s5cmd": {}, "rclone": {},
                      "aws-cli": {"deviations": report.deviations()["aws-cli"]}},
            "errors": [{"round": 1, "link": "rgw-http", "block_bytes": 2 << 20,
                        "direction": "pull", "tool": "rclone", "error": "exit 1: boom"}]}
    return {"fixture": FIXTURE, "meta": meta, "rows": report.summarize(runs), "runs": runs,
            "loaded": loaded, "trust": trust(loaded)}


def test_rows_are_medians_of_the_counted_rounds_with_the_ratio_to_s3kv() -> None:
    rows = {(r["direction"], r["tool"]): r for r in doc()["rows"]}
    assert set(rows) == {("push", "s3kv"), ("push", "s5cmd"), ("pull", "s3kv"),
                         ("pull", "s5cmd")}  # no warm-up, no failed rclone
    push = rows[("push", "s3kv")]
    assert push["rounds"] == 3 and push["seconds"] == 2.0
    assert (push["seconds_min"], push["seconds_max"]) == (1.9, 2.1)
    assert push["cpu_s_per_gib"] == pytest.approx(0.5 / 0.5)  # 0.5 s of CPU for 0.5 GiB
    assert push["vs_s3kv"] == 1.0 and push["disagree"] == []
    fast = rows[("push", "s5cmd")]  # its fourth round, far off, is marked
    assert fast["rounds"] == 4 and fast["seconds"] == pytest.approx(1.025)
    assert fast["vs_s3kv"] == pytest.approx(0.5125)
    assert fast["disagree"] == ["cpu_s_per_gib", "seconds"]
    assert rows[("pull", "s5cmd")]["vs_s3kv"] == pytest.approx(2.0)


def test_the_table_shows_seconds_ratios_cpu_failures_and_departures() -> None:
    table = report.markdown(doc())
    assert "| link | cache | direction | s3kv | s5cmd | aws-cli | rclone |" in table
    assert ("| rgw-http | 512 MiB of 2 MiB blocks | pull | 2.00 s (1.90-2.10)<br>1.00 s/GiB "
            "CPU | 4.00 s (3.80-4.20), 2.00x<br>2.00 s/GiB CPU | - | failed |") in table
    assert "| push | 2.00 s (1.90-2.10)<br>1.00 s/GiB CPU | 1.02 s (0.95-9.00)†, 0.51x<br>" \
        "0.51 s/GiB CPU† | - | - |" in table  # rclone failed its pull only
    assert "aws-cli over TLS runs with AWS_REQUEST_CHECKSUM_CALCULATION=when_required: Ceph " \
        "RGW 16 answers" in table
    assert "Failed in some round (see the JSON's meta.errors): rclone pull of 2 MiB blocks " \
        "on rgw-http." in table
    assert "† after a figure: its rounds disagree by more than 20%" in table
    assert "median (min-max) of 3 interleaved rounds, after a warm-up round;" in table
    assert "vLLM 0.33.0's own fs tier" in table and "LOADED" not in table
    assert "LOADED MACHINE" in report.markdown(doc(loaded=True))
    summary = report.summary(doc())
    assert "| link | cache | direction | s3kv s | s5cmd s | aws-cli s | rclone s |" in summary
    assert "| rgw-http | 512 MiB of 2 MiB blocks | push | 2.00 | 1.02†, 0.51x | - | - |" \
        in summary
    assert "| rgw-http | 512 MiB of 2 MiB blocks | pull | 2.00 | 4.00, 2.00x | - | failed |" \
        in summary


def test_the_docs_blocks_wait_for_the_json_then_show_it(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doc_figures, "IMG", tmp_path)
    page = tmp_path / "page.md"
    page.write_text("<!-- bench:bulk:table -->\n<!-- /bench -->\n"
                    "<!-- bench:bulk:summary -->\nold\n<!-- /bench -->\n")
    pending = doc_figures.regenerate(page)
    assert pending.count("bench/bench_bulk.py --json docs/img/bulk.json") == 2
    (tmp_path / "bulk.json").write_text(json.dumps(doc()))
    shown = doc_figures.regenerate(page)
    assert report.markdown(doc()) in shown and report.summary(doc()) in shown


def test_a_saved_json_prints_its_table_without_measuring(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    saved = tmp_path / "bulk.json"
    saved.write_text(json.dumps(doc()))
    assert bench_bulk.main(["--table", str(saved)]) == 0
    assert capsys.readouterr().out.strip() == report.markdown(doc())


def test_a_before_after_run_times_the_s3kv_tree_on_its_pythonpath_and_no_other_tool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bench/evidence/push_before_after.py runs bench_bulk.py with PYTHONPATH set to the
    tree it times: s3kv's child gets it (ahead of the venv's editable install), the other
    tools do not, and the command shown to operators leaves it out."""
    monkeypatch.setenv("PYTHONPATH", "/tmp/before")
    s3kv = tools.command("s3kv", "push", HTTP, "/c", "b", "s3kv")
    assert s3kv.env["PYTHONPATH"] == "/tmp/before"
    assert "PYTHONPATH" not in s3kv.typed
    for tool in tools.TOOLS[1:]:
        assert "PYTHONPATH" not in tools.command(tool, "push", HTTP, "/c", "b", tool).env
    monkeypatch.delenv("PYTHONPATH")
    assert "PYTHONPATH" not in tools.command("s3kv", "push", HTTP, "/c", "b", "s3kv").env
