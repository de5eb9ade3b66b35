"""Record the object keys vLLM 0.33.0's object-store tier really stores (golden vectors).

    .venv-vllm/bin/python scripts/record_vllm_obj_keys.py \\
        [--out tests/data/vllm_obj_tier_wire_keys.json] [--servers moto,rgw]

Builds vLLM's ``ObjectStoreSecondaryTierManager`` (through vLLM's own
``SecondaryTierFactory``, NIXL's OBJ plugin underneath) against moto's S3 server and a
Ceph RGW 16 (``tests/servers/rgw.py``), with the prefixes ``team/kv``, ``""`` and
``team/kv/``. For each it stores two blocks (KV-cache groups 0 and 1), looks them up and
loads them back, then records, server side:

* ``requests``: the request lines that reached the server, from a recording proxy in
  front of moto (moto closes every connection, so each request is seen) and from RGW's
  beast access log (``debug_rgw`` 1, its default);
* ``stored_keys``: the bucket's listing (boto3 ``ListObjectsV2``).

Beside them, ``file_mapper_keys`` are the tier's ``FileMapper`` strings (what vLLM asks
for), so the file shows the difference: the AWS C++ SDK drops empty path segments.
On RGW 16 the tier needs ``AWS_REQUEST_CHECKSUM_CALCULATION=when_required`` (its SDK's
default, aws-chunked bodies with trailing checksums, gets ``411 Length Required``); the
script records that failure too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PREFIXES = ("team/kv", "", "team/kv/")
OUT_NAME = "vllm_obj_tier_wire_keys.json"
ACCESS = re.compile(r'"(PUT|GET|HEAD|DELETE|POST) (/\S*) HTTP/1\.[01]" (\d{3})')


def _boto(endpoint: str, access_key: str, secret_key: str, ca: str | None = None) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        verify=ca if ca else True,
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def _run_case(
    *, endpoint: str, bucket: str, prefix: str, seed: int, access_key: str, secret_key: str
) -> dict[str, Any]:
    """Store, look up and load two blocks with vLLM's obj tier; what vLLM asked for."""
    import numpy as np

    from tests.vllm import harness as h

    spec = h.spec()
    view, array = h.primary_view()
    keys = [h.keys(1, start=seed)[0], h.keys(1, start=seed + 1, group=1)[0]]
    h.fill(array, range(2), seed=seed)
    tier = h.obj_tier(
        view, spec, endpoint=endpoint, bucket=bucket, prefix=prefix,
        access_key=access_key, secret_key=secret_key,
    )
    try:
        stored = h.run(tier, h.job(keys, range(2), load=False)).success
        found = [str(r.name) for r in h.lookup(tier, keys)] if stored else []
        loaded = stored and h.run(tier, h.job(keys, range(2, 4), load=True)).success
        same = bool(loaded and np.array_equal(array[2:4], array[0:2]))
        names = [tier._file_mapper.get_file_name(k) for k in keys]
        run_config = tier._file_mapper.get_run_config()
    finally:
        tier.shutdown()
    return {
        "prefix": prefix,
        "offload_keys": [k.hex() for k in keys],
        "file_mapper_keys": names,
        "stored": stored,
        "lookups": found,
        "loaded_byte_for_byte": same,
        "run_config": run_config,
    }


def _listing(s3: Any, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def record_moto() -> list[dict[str, Any]]:
    from tests.functional.proxy import FaultProxy

    from s3kv.demo import embedded_s3

    cases = []
    with embedded_s3() as url, FaultProxy(url, lambda method, path, n: None) as proxy:
        s3 = _boto(url, "testing", "testing")
        for i, prefix in enumerate(PREFIXES):
            bucket = f"obj-keys-moto-{i}"
            s3.create_bucket(Bucket=bucket)
            case = _run_case(endpoint=proxy.url, bucket=bucket, prefix=prefix, seed=100 + 10 * i,
                             access_key="testing", secret_key="testing")
            with proxy.lock:
                seen = sorted(f"{m} {p}" for m, p in proxy.attempts if p.startswith(f"/{bucket}/"))
            cases.append({"server": "moto", **case, "requests": seen,
                          "stored_keys": _listing(s3, bucket)})
    return cases


def record_rgw() -> list[dict[str, Any]]:
    from tests.servers.rgw import RGWServer

    cases = []
    with RGWServer() as rgw:
        assert rgw.http_endpoint and rgw.log_dir
        s3 = _boto(rgw.http_endpoint, rgw.access_key, rgw.secret_key)
        log = rgw.log_dir / "ceph-client.rgw.a.log"
        creds = {"access_key": rgw.access_key, "secret_key": rgw.secret_key}
        # The SDK's default first: aws-chunked bodies with a trailing checksum.
        os.environ.pop("AWS_REQUEST_CHECKSUM_CALCULATION", None)
        s3.create_bucket(Bucket="obj-keys-rgw-default")
        default = _run_case(endpoint=rgw.http_endpoint, bucket="obj-keys-rgw-default",
                            prefix="team/kv", seed=900, **creds)
        time.sleep(1)  # let RGW flush its log
        statuses = sorted({f"{m} {s}" for m, p, s in ACCESS.findall(log.read_text())
                           if p.startswith("/obj-keys-rgw-default/") and m == "PUT"})
        cases.append({"server": "rgw", "env": {}, **default, "put_statuses": statuses,
                      "stored_keys": _listing(s3, "obj-keys-rgw-default")})
        os.environ["AWS_REQUEST_CHECKSUM_CALCULATION"] = "when_required"
        for i, prefix in enumerate(PREFIXES):
            bucket = f"obj-keys-rgw-{i}"
            s3.create_bucket(Bucket=bucket)
            case = _run_case(endpoint=rgw.http_endpoint, bucket=bucket, prefix=prefix,
                             seed=100 + 10 * i, **creds)
            time.sleep(1)
            seen = sorted({f"{m} {p}" for m, p, s in ACCESS.findall(log.read_text())
                           if p.startswith(f"/{bucket}/")})
            cases.append({"server": "rgw",
                          "env": {"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"},
                          **case, "requests": seen, "stored_keys": _listing(s3, bucket)})
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests/data" / OUT_NAME)
    parser.add_argument("--servers", default="moto,rgw")
    args = parser.parse_args()
    servers = args.servers.split(",")
    cases: list[dict[str, Any]] = []
    if "moto" in servers:
        cases += record_moto()
    if "rgw" in servers:
        cases += record_rgw()
    doc = {
        "source": "scripts/record_vllm_obj_keys.py: vLLM's ObjectStoreSecondaryTierManager "
        "(tiering/obj/manager.py) storing two blocks per case; requests and bucket "
        "listings recorded at the server",
        "command": f".venv-vllm/bin/python scripts/{Path(__file__).name} --servers {args.servers}",
        "versions": {n: metadata.version(n) for n in ("vllm", "nixl", "nixl-cu12", "moto")},
        "cases": cases,
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(cases)} cases to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
