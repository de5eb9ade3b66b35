"""Bare awscrt, the floor the evidence scripts hold s3kv against: files to or from a bucket
with awscrt's S3 client, 32 requests in flight, nothing of s3kv (and no check of any kind
unless ``--s3kv-headers`` asks for s3kv's write headers).

    python bench/evidence/bare_awscrt.py put SRC BUCKET URL KEY SECRET [--s3kv-headers] [--ca FILE]
    python bench/evidence/bare_awscrt.py get BUCKET URL KEY SECRET OUT [--ca FILE] [--keys FILE]

``put`` uploads every file under SRC to ``kv/<its path under SRC>`` (``send_filepath``);
``--s3kv-headers`` adds what s3kv sends with a block: ``If-None-Match: *``, the CRC32C
taken over the file, a write id, the block tag. ``get`` lists ``kv/`` with boto3 and has
awscrt write each object into a temp file (``recv_filepath``), renamed into place under
OUT; with ``--keys`` it reads the keys from FILE (one a line) instead and never imports
boto3: awscrt alone. Exit 1 if any request failed.
"""

from __future__ import annotations

import argparse
import base64
import mmap
import os
import secrets
import sys
import threading
from typing import Any

from awscrt import auth, checksums, http, io, s3

IN_FLIGHT = 32


class Client:
    """awscrt's S3 client for one endpoint, and the requests it runs, IN_FLIGHT at once."""

    def __init__(self, url: str, key: str, secret: str, ca: str | None) -> None:
        self.host, tls = url.split("://")[1], url.startswith("https")
        elg = io.EventLoopGroup()
        extra: dict[str, Any] = {}
        if tls:
            options = io.TlsContextOptions()
            if ca:
                options.override_default_trust_store_from_path(ca_filepath=ca)
            conn = io.ClientTlsContext(options).new_connection_options()
            conn.set_server_name(self.host.split(":")[0])
            extra["tls_connection_options"] = conn
        self.client = s3.S3Client(
            bootstrap=io.ClientBootstrap(elg, io.DefaultHostResolver(elg)),
            region="us-east-1", part_size=8 << 20,
            credential_provider=auth.AwsCredentialsProvider.new_static(key, secret),
            tls_mode=s3.S3RequestTlsMode.ENABLED if tls else s3.S3RequestTlsMode.DISABLED,
            max_active_connections_override=IN_FLIGHT, multipart_upload_threshold=64 << 20,
            **extra)
        self.slots, self.lock, self.idle = threading.Semaphore(IN_FLIGHT), threading.Lock(), \
            threading.Condition(threading.Lock())
        self.live: dict[int, Any] = {}
        self.failed: list[object] = []

    def run(self, i: int, method: str, path: str, fields: list[tuple[str, str]],
            then: Any = None, **files: str) -> None:
        """Start request ``i`` once a slot is free; ``then()`` after it succeeded."""
        self.slots.acquire()

        def on_done(error: Any = None, status_code: int | None = None, **_: Any) -> None:
            if error is not None or (status_code or 0) >= 300:
                self.failed.append(status_code or error)
            elif then is not None:
                then()
            self.slots.release()
            with self.idle:
                self.live.pop(i, None)
                self.idle.notify_all()

        request = http.HttpRequest(method, path, http.HttpHeaders([("Host", self.host),
                                                                   *fields]))
        kind = s3.S3RequestType.PUT_OBJECT if method == "PUT" else s3.S3RequestType.GET_OBJECT
        with self.idle:
            self.live[i] = self.client.make_request(type=kind, request=request,
                                                    on_done=on_done, **files)

    def wait(self) -> int:
        with self.idle:
            while self.live:
                self.idle.wait()
        return 1 if self.failed else 0


def put(args: argparse.Namespace, client: Client) -> int:
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(args.src) for f in names)
    for i, path in enumerate(files):
        size = os.path.getsize(path)
        fields = [("Content-Length", str(size))]
        if args.s3kv_headers:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), size,
                                                  access=mmap.ACCESS_READ) as m:
                crc = checksums.crc32c(m)
            fields += [("If-None-Match", "*"),
                       ("x-amz-checksum-crc32c",
                        base64.b64encode(crc.to_bytes(4, "big")).decode()),
                       ("x-amz-meta-s3kv-write", secrets.token_hex(8)),
                       ("x-amz-tagging", "s3kv-kind=block")]
        client.run(i, "PUT", f"/{args.bucket}/kv/{os.path.relpath(path, args.src)}", fields,
                   send_filepath=path)
    return client.wait()


def get(args: argparse.Namespace, client: Client) -> int:
    if args.keys:
        with open(args.keys) as f:
            objects = f.read().split()
    else:
        import boto3

        listing = boto3.client("s3", endpoint_url=args.url, region_name="us-east-1",
                               aws_access_key_id=args.key, aws_secret_access_key=args.secret,
                               verify=args.ca or True)
        objects = [o["Key"] for page in listing.get_paginator("list_objects_v2").paginate(
            Bucket=args.bucket, Prefix="kv/") for o in page.get("Contents", [])]
    for i, name in enumerate(objects):
        path = os.path.join(args.out, name[len("kv/"):])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        client.run(i, "GET", f"/{args.bucket}/{name}", [], recv_filepath=tmp,
                   then=lambda tmp=tmp, path=path: os.rename(tmp, path))
    return client.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="direction", required=True)
    up = sub.add_parser("put")
    up.add_argument("src")
    down = sub.add_parser("get")
    for p in (up, down):
        p.add_argument("bucket")
        p.add_argument("url")
        p.add_argument("key")
        p.add_argument("secret")
        p.add_argument("--ca")
    up.add_argument("--s3kv-headers", action="store_true")
    down.add_argument("out")
    down.add_argument("--keys", help="the keys to get, one a line (no listing, no boto3)")
    args = parser.parse_args(argv)
    client = Client(args.url, args.key, args.secret, args.ca)
    return put(args, client) if args.direction == "put" else get(args, client)


if __name__ == "__main__":
    sys.exit(main())
