"""docs/img/dashboard.png: the Grafana dashboard's queries over a real tier run.

    .venv-vllm/bin/python scripts/dashboard_run.py [--rounds 40]   # writes docs/img/dashboard.json
    .venv/bin/python scripts/dashboard_run.py --redraw docs/img/dashboard.json

How it is made (and what it is not): vLLM's real TieringOffloadingManager with s3kv's
tier on moto's S3 server (loopback) goes through ``--rounds`` rounds of
tests/vllm/tier_run.py's traffic (stores, hits, misses, a renewal per used block, one
damaged and one deleted block per round), more or less of it from round to round, and
every sixth round a store that throttles (503 SlowDown on the first PUT of each block, from
tests/faults/proxy.py in front of moto: retried, and counted). vLLM's
own Prometheus path serves the tier's metrics over HTTP, a second endpoint serves
``s3kv ls --prometheus`` of the bucket, and a real Prometheus (Debian's ``prometheus``
package) scrapes both every second. Then every query of grafana/s3kv-dashboard.json is
sent to that Prometheus as written (``$__rate_interval`` = 15s, each variable set to All
as Grafana sends it: the values its ``label_values`` query finds) and
the answers are saved; ``--redraw`` draws each panel with matplotlib where the dashboard
places it. Grafana itself draws nothing here. The numbers are those of a small synthetic
run on a shared machine, a picture of what the panels show, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DASHBOARD = ROOT / "grafana" / "s3kv-dashboard.json"
OUT_JSON = ROOT / "docs" / "img" / "dashboard.json"
OUT_PNG = ROOT / "docs" / "img" / "dashboard.png"
RATE_INTERVAL = "15s"
LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$")


def substituted(expr: str, variables: dict[str, str]) -> str:
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(f"${name}", value)
    return expr


def resolve_variables(prometheus: str, dashboard: dict[str, Any]) -> dict[str, str]:
    """What Grafana sends for each variable set to All: the regex of every value its
    query finds (``label_values(selector, label)``), as Grafana builds it without an
    ``allValue``."""
    variables = {"__rate_interval": RATE_INTERVAL}
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = LABEL_VALUES.match(var["query"]["query"])
        assert match, var["query"]
        selector, label = match.groups()
        query = urllib.parse.urlencode(
            {"match[]": substituted(selector, variables)} if selector else {})
        with urllib.request.urlopen(f"{prometheus}/api/v1/label/{label}/values?{query}") as r:
            values = json.loads(r.read())["data"]
        # A regex inside a PromQL string: its backslashes doubled, as Grafana sends them.
        escaped = (re.escape(v).replace("\\", "\\\\") for v in values)
        variables[var["name"]] = "(" + "|".join(escaped) + ")"
    return variables


# -- the run (.venv-vllm) ---------------------------------------------------------------


class _Serve(BaseHTTPRequestHandler):
    body: Any = staticmethod(lambda: b"")

    def do_GET(self) -> None:
        data = type(self).body()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # Prometheus hanging up at the end is no error worth a traceback


def _serve(body: Any) -> tuple[ThreadingHTTPServer, int]:
    handler = type("Handler", (_Serve,), {"body": staticmethod(body)})
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def _query_range(
    prometheus: str, expr: str, variables: dict[str, str], start: float, end: float
) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": substituted(expr, variables), "start": start,
                                    "end": end, "step": "2s"})  # fmt: skip
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{query}", timeout=30) as r:
        answer = json.loads(r.read())
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def run(rounds: int) -> None:
    import boto3
    from botocore.config import Config

    from s3kv.cli.ls_prometheus import exposition
    from s3kv.ops.demo import embedded_s3
    from s3kv.ops.inventory import inventory
    from s3kv.settings import S3Settings
    from tests.faults.proxy import FaultProxy, once_per_block
    from tests.vllm import managed, tier_run

    if shutil.which("prometheus") is None:
        sys.exit("needs Prometheus: apt-get install prometheus (Debian's package)")
    # Only the embedded endpoint started below is ever talked to: it takes any key.
    os.environ.update(AWS_ACCESS_KEY_ID="s3kv-demo", AWS_SECRET_ACCESS_KEY="s3kv-demo",
                      AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")  # fmt: skip
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "S3KV_ENDPOINT_URL"):
        os.environ.pop(name, None)
    dashboard = json.loads(DASHBOARD.read_text())
    with embedded_s3() as endpoint, tempfile.TemporaryDirectory() as work:
        s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(
            s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
            response_checksum_validation="when_required"))  # fmt: skip
        bucket = "s3kv-dashboard"
        s3.create_bucket(Bucket=bucket)
        url = f"s3://{bucket}/kv"
        settings = S3Settings.resolve(endpoint_url=endpoint)
        # Every sixth round the store throttles: the first PUT of each block gets 503 SlowDown.
        throttled = threading.Event()
        slow_down = once_per_block("503", "PUT")
        proxy = FaultProxy(endpoint, lambda r: slow_down(r) if throttled.is_set() else None)
        entry = managed.s3_entry(url, endpoint_url=proxy.url, renew_after=tier_run.RENEW_AFTER)
        with proxy, managed.manager_with(entry, chunks=32) as manager:
            scraper = tier_run.Scraper(manager)
            lock = threading.Lock()  # one scrape at a time drains the manager's stats

            def tier_metrics() -> bytes:
                with lock:
                    return scraper.text().encode()

            def bucket_metrics() -> bytes:
                return exposition(inventory(url, settings=settings)).encode()

            tier_server, tier_port = _serve(tier_metrics)
            bucket_server, bucket_port = _serve(bucket_metrics)
            prom_port = _free_port()
            config = Path(work, "prometheus.yml")
            config.write_text(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n"
                f"  - {{job_name: vllm, static_configs: "
                f"[{{targets: ['127.0.0.1:{tier_port}']}}]}}\n"
                f"  - {{job_name: s3kv-ls, static_configs: "
                f"[{{targets: ['127.0.0.1:{bucket_port}']}}]}}\n"
            )
            prom = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work}/tsdb",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            prometheus = f"http://127.0.0.1:{prom_port}"
            try:
                _wait_ready(prometheus)
                start = time.time()
                for i in range(rounds):
                    stored = 5 + round(4 * (1 + math.sin(i / 3)))  # more and less traffic
                    if i % 6 == 5:
                        throttled.set()
                    tier_run.exercise(manager, s3, bucket, round=i, stored=stored)
                    throttled.clear()
                    print(f"round {i + 1}/{rounds}: {stored} blocks stored", flush=True)
                time.sleep(5)  # two more scrapes of the last round
                end = time.time()
                variables = resolve_variables(prometheus, dashboard)
                panels = []
                for panel in dashboard["panels"]:
                    if panel["type"] == "row":
                        continue
                    panels.append({
                        "title": panel["title"], "type": panel["type"],
                        "unit": panel["fieldConfig"]["defaults"].get("unit", ""),
                        "gridPos": panel["gridPos"],
                        "targets": [
                            {"expr": t["expr"], "legend": t.get("legendFormat", ""),
                             "result": _query_range(prometheus, t["expr"], variables, start, end)}
                            for t in panel["targets"]],
                    })  # fmt: skip
            finally:
                prom.terminate()
                prom.wait(30)
                tier_server.shutdown()
                bucket_server.shutdown()
    version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True)
    from importlib import metadata

    OUT_JSON.write_text(json.dumps({
        "how": "vLLM's TieringOffloadingManager with s3kv's tier on moto's S3 server, scraped "
        "every second by a real Prometheus; each panel's query sent to it as the dashboard "
        "writes it ($__rate_interval = 15s, each variable = All)",
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rounds": rounds, "variables": variables, "start": start, "end": end,
        "vllm": metadata.version("vllm"),
        "prometheus": (version.stdout or version.stderr).splitlines()[0],
        "panels": panels,
    }, indent=1) + "\n")  # fmt: skip
    print(f"wrote {OUT_JSON}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(prometheus: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{prometheus}/-/ready", timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# -- the picture (.venv, matplotlib) ----------------------------------------------------

UNIT = {"percentunit": ("%", 100.0), "s": ("s", 1.0), "Bps": ("KiB/s", 1 / 1024),
        "bytes": ("KiB", 1 / 1024), "reqps": ("req/s", 1.0), "ops": ("/s", 1.0),
        "short": ("", 1.0)}  # fmt: skip


def redraw(path: Path) -> None:
    from scripts.charts import pyplot

    data = json.loads(path.read_text())
    plt = pyplot()
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in data["panels"])
    fig = plt.figure(figsize=(16, rows * 0.36 + 1.2), facecolor="#111217")
    grid = fig.add_gridspec(rows, 24, hspace=3.5, wspace=1.2, top=0.96, bottom=0.05,
                            left=0.03, right=0.99)  # fmt: skip
    start = data["start"]
    for panel in data["panels"]:
        pos = panel["gridPos"]
        # the last grid row of each panel is left for the title of the one below
        down = slice(pos["y"], pos["y"] + pos["h"] - 1)
        ax = fig.add_subplot(grid[down, pos["x"] : pos["x"] + pos["w"]])
        ax.set_facecolor("#181b1f")
        ax.set_title(panel["title"], color="#d8d9da", fontsize=9, loc="left")
        label, scale = UNIT.get(panel["unit"], ("", 1.0))
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        ax.tick_params(colors="#9fa7b3", labelsize=7)
        if panel["type"] == "stat":
            ax.set_xticks([])
            ax.set_yticks([])
            values = [float(v) for t in panel["targets"] for s in t["result"]
                      for _, v in s["values"] if v not in ("NaN", "+Inf")]  # fmt: skip
            last = values[-1] * scale if values else float("nan")
            last = max(last, 0.0) if panel["unit"] == "s" else last  # clocks a hair apart
            text = f"{last:.0f}{label}" if label in ("%", "s") else f"{last:.2f}{label}"
            ax.text(0.5, 0.45, text, color="#73bf69", fontsize=26, ha="center", va="center",
                    transform=ax.transAxes)  # fmt: skip
            continue
        for target in panel["targets"]:
            for series in target["result"]:
                points = [(float(t) - start, float(v) * scale) for t, v in series["values"]
                          if v not in ("NaN", "+Inf", "-Inf")]  # fmt: skip
                if not points:
                    continue
                legend = target["legend"]
                for key, value in series["metric"].items():
                    legend = legend.replace("{{" + key + "}}", value)
                xs, ys = zip(*points)
                ax.plot(xs, ys, linewidth=1.1, label=legend[:40])
        ax.set_ylabel(label, color="#9fa7b3", fontsize=7)
        ax.grid(color="#2c3235", linewidth=0.5)
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left", facecolor="#181b1f", edgecolor="#2c3235",
                      labelcolor="#d8d9da", ncol=2)  # fmt: skip
        else:
            ax.text(0.5, 0.5, "no data (nothing of this kind happened)", color="#9fa7b3",
                    fontsize=8, ha="center", va="center", transform=ax.transAxes)  # fmt: skip
    fig.suptitle(
        f"grafana/s3kv-dashboard.json's queries, evaluated by {data['prometheus'].split(' (')[0]} "
        f"over a {data['rounds']}-round tier run (vLLM {data['vllm']}, moto's S3 on loopback, "
        f"{data['when'][:10]}); drawn with matplotlib. Seconds since the run started on x.",
        color="#9fa7b3", fontsize=9, y=0.995)  # fmt: skip
    fig.savefig(OUT_PNG, dpi=110, facecolor=fig.get_facecolor())
    print(f"wrote {OUT_PNG}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=24, help="rounds of traffic; default 24")
    parser.add_argument("--redraw", type=Path, metavar="JSON", help="draw the picture from JSON")
    args = parser.parse_args()
    if args.redraw:
        redraw(args.redraw)
    else:
        run(args.rounds)


if __name__ == "__main__":
    main()
