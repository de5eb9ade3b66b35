"""More users on a running Ceph RGW (tests/servers/rgw.py), and reader rights for them.

``RGWServer`` creates one user, who owns every bucket the tests create. A consumer
cluster holds only the reader policy of ``terraform/modules/documents``: ``s3:ListBucket``
held to the prefix and ``s3:GetObject`` under it (so GET and HEAD, never a write). On
RGW a second user gets exactly that from a bucket policy the owner sets::

    user = create_user(rgw, "s3kv-reader")
    grant_reader(owner_client, bucket, "team/kv", user)

Only the server's handle is used: its ``ceph.conf`` for ``radosgw-admin``.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RGWUser:
    uid: str
    access_key: str
    secret_key: str

    @property
    def arn(self) -> str:
        """The principal a bucket policy names (no tenant)."""
        return f"arn:aws:iam:::user/{self.uid}"


def _admin(server: Any, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["radosgw-admin", "-c", str(server.conf), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"radosgw-admin {' '.join(args)}: exit {proc.returncode}: "
                           f"{proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


def create_user(server: Any, uid: str) -> RGWUser:
    """A user with fresh keys and no bucket of its own (created once per server and uid)."""
    try:
        info = _admin(server, "user", "info", "--uid", uid)
    except RuntimeError:  # no such user yet
        access = "S3KV" + secrets.token_hex(8).upper()
        info = _admin(server, "user", "create", "--uid", uid, "--display-name", uid,
                      "--access-key", access, "--secret-key", secrets.token_hex(20))
    key = next(k for k in info["keys"] if k["user"] == uid)
    return RGWUser(uid, key["access_key"], key["secret_key"])


def reader_policy(bucket: str, prefix: str, principal_arn: str) -> dict[str, Any]:
    """terraform/modules/documents' reader statements, as a bucket policy for one user."""
    key_prefix = prefix.strip("/") + "/"
    principal = {"AWS": [principal_arn]}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListCachePrefix",
                "Effect": "Allow",
                "Principal": principal,
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLike": {"s3:prefix": [f"{key_prefix}*"]}},
            },
            {
                "Sid": "ReadCacheObjects",
                "Effect": "Allow",
                "Principal": principal,
                "Action": ["s3:GetObject"],
                "Resource": [f"arn:aws:s3:::{bucket}/{key_prefix}*"],
            },
        ],
    }


def grant_reader(owner_client: Any, bucket: str, prefix: str, user: RGWUser) -> dict[str, Any]:
    """Set the reader policy on ``bucket`` (as its owner); returns the policy set."""
    policy = reader_policy(bucket, prefix, user.arn)
    owner_client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    return policy


def tenant_policy(bucket: str, prefix: str, users: dict[str, RGWUser]) -> dict[str, Any]:
    """terraform/modules/documents' writer grants for each tenant's prefix
    (``<prefix>/tenants/<tenant>/``: what terraform/modules/aws-tenant gives a tenant's
    role), as one bucket policy naming each tenant's user."""
    statements: list[dict[str, Any]] = []
    for tenant, user in users.items():
        key_prefix = f"{prefix.strip('/')}/tenants/{tenant}/"
        principal = {"AWS": [user.arn]}
        statements += [
            {
                "Sid": f"ListTenantPrefix{len(statements)}",
                "Effect": "Allow",
                "Principal": principal,
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLike": {"s3:prefix": [f"{key_prefix}*"]}},
            },
            {
                "Sid": f"TenantObjects{len(statements)}",
                "Effect": "Allow",
                "Principal": principal,
                "Action": ["s3:GetObject", "s3:GetObjectTagging", "s3:PutObject",
                           "s3:PutObjectTagging", "s3:DeleteObject"],
                "Resource": [f"arn:aws:s3:::{bucket}/{key_prefix}*"],
            },
        ]
    return {"Version": "2012-10-17", "Statement": statements}


def grant_tenants(owner_client: Any, bucket: str, prefix: str,
                  users: dict[str, RGWUser]) -> dict[str, Any]:
    """Set :func:`tenant_policy` on ``bucket`` (as its owner); returns the policy set."""
    policy = tenant_policy(bucket, prefix, users)
    owner_client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    return policy
