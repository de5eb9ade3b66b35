"""The links a prompt load is measured on: Ceph RGW over HTTP and TLS, and an AWS-like one.

* ``rgw-http``, ``rgw-https``: Ceph RGW 16 on loopback (tests/servers/rgw.py), one
  memstore OSD; ``rgw-https`` with its self-signed certificate's CA bundle.
* ``aws-like``: the same RGW's HTTP endpoint behind bench/lib/latency_proxy.py, which adds a
  first-byte latency to every request and caps each connection's rate (both settable;
  defaults from published S3 figures, see that module); ``aws-like-tls`` the same with
  TLS between the client and the proxy, as to S3. The tiers talk to the proxy;
  bucket chores (create, empty) go straight to RGW, so the proxy's counts are the
  tiers' requests only.

RGW keeps objects of up to 4 MiB whole in their head object; larger ones put the rest in
tail objects that a delete hands to RGW's garbage collector, which by default waits two
hours. Here it waits for nothing (``rgw_gc_obj_min_wait = 0``) and ``collect_garbage()``
runs a pass between rounds, so the memstore OSD (in RAM) holds one prompt at a time.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

NAMES = ("rgw-http", "rgw-https", "aws-like", "aws-like-tls")


@dataclass
class Link:
    name: str
    endpoint: str
    access_key: str
    secret_key: str
    ca_bundle: str | None
    admin: Any  # boto3 client straight to the server, for bucket chores
    conf: str  # the cluster's ceph.conf, for radosgw-admin
    proxy: Any = None
    settings: dict[str, Any] = field(default_factory=dict)
    server_pids: list[int] = field(default_factory=list)
    """RGW's processes (monitor, OSD, gateway), whose CPU a job's rows report apart."""

    def credentials(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "access_key": self.access_key,
                "secret_key": self.secret_key, "ca_bundle": self.ca_bundle}

    def bucket(self, hint: str) -> str:
        name = f"prompt-{hint}-{uuid.uuid4().hex[:8]}"
        self.admin.create_bucket(Bucket=name)
        return name

    def block_keys(self, bucket: str) -> list[str]:
        """Every block object in the bucket (the ``.bin`` keys), sorted."""
        keys: list[str] = []
        for page in self.admin.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".bin")]
        return sorted(keys)

    def empty(self, bucket: str) -> None:
        """Delete what a round stored (blocks only; a tier's manifest stays)."""
        for page in self.admin.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])
                    if not o["Key"].endswith("config.json")]
            if keys:
                self.admin.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})

    def collect_garbage(self) -> None:
        """Free deleted objects' tails now (RGW's garbage collector, one full pass)."""
        for attempt in range(3):  # a pass can lose a shard lock to the gateway's own
            proc = subprocess.run(["radosgw-admin", "-c", self.conf, "gc", "process",
                                   "--include-all"], capture_output=True, text=True,
                                  timeout=300)
            if proc.returncode == 0:
                return
            time.sleep(1 + attempt)
        raise RuntimeError(f"radosgw-admin gc process: exit {proc.returncode}: "
                           f"{proc.stderr.strip()[-800:]}")

    def requests(self) -> dict[str, int] | None:
        """Requests the proxy saw so far, per method (None without a proxy)."""
        return None if self.proxy is None else self.proxy.counts()


def _admin(endpoint: str, access: str, secret: str, ca: str | None) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
        region_name="us-east-1", verify=ca or True,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=16,
                      request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))


@contextlib.contextmanager
def links(names: list[str], *, memstore_bytes: int, first_byte_seconds: float,
          connection_bytes_per_second: float | None) -> Iterator[dict[str, Link]]:
    """Start one RGW (and the proxy, for ``aws-like``); the links by name."""
    from bench.lib.latency_proxy import LatencyProxy
    from tests.servers.rgw import RGWServer

    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise SystemExit(f"--links: unknown {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    # aws-like-tls ends TLS at the proxy, as a load balancer in front of RGW would:
    # RGW then takes customer keys (SSE-C, --tiers s3kv-sse-c) over the proxy's HTTP hop.
    rgw = RGWServer(memstore_bytes=memstore_bytes,
                    extra_conf={"global": {"rgw_gc_obj_min_wait": "0",
                                           "rgw_crypt_require_ssl": "false"}}).start()
    proxies: list[Any] = []
    failed = True
    try:
        assert rgw.http_endpoint and rgw.https_endpoint and rgw.ca_bundle
        keys = (rgw.access_key, rgw.secret_key)
        http_admin = _admin(rgw.http_endpoint, *keys, None)
        out: dict[str, Link] = {}
        if "rgw-http" in names:
            out["rgw-http"] = Link("rgw-http", rgw.http_endpoint, *keys, None, http_admin,
                                   str(rgw.conf))
        if "rgw-https" in names:
            out["rgw-https"] = Link("rgw-https", rgw.https_endpoint, *keys, rgw.ca_bundle,
                                    _admin(rgw.https_endpoint, *keys, rgw.ca_bundle),
                                    str(rgw.conf))
        shape = {"first_byte_ms": first_byte_seconds * 1000,
                 "connection_mb_s": (connection_bytes_per_second or 0) / 1e6 or None}
        for name in ("aws-like", "aws-like-tls"):
            if name not in names:
                continue
            # aws-like-tls: clients speak TLS to the proxy (RGW's certificate), as to S3
            tls = (rgw.ca_bundle, str(rgw._key_pem)) if name == "aws-like-tls" else None
            proxy = LatencyProxy(rgw.http_endpoint, delay_seconds=first_byte_seconds,
                                 rate_bytes_per_second=connection_bytes_per_second, tls=tls)
            proxies.append(proxy)
            out[name] = Link(name, proxy.url, *keys, rgw.ca_bundle if tls else None,
                             http_admin, str(rgw.conf), proxy, shape)
        for link in out.values():
            link.server_pids = sorted(rgw.pids.values())
        yield out
        failed = False
    finally:
        for proxy in proxies:
            proxy.close()
        rgw.stop()
        if failed:
            print(f"Ceph RGW logs kept in {rgw.log_dir}")
        else:
            rgw.remove()
