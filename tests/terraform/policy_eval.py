"""A small, honest IAM evaluator for the s3kv policy proofs.

Two halves:

* ``requests_for``: what IAM checks one botocore S3 operation triggers, as
  (action, resource ARN, condition context) triples, following the S3 action
  and resource mapping in AWS's service authorization reference.
* ``Policy``: evaluates a policy document for one such request: explicit Deny
  wins, then any Allow, else implicit deny. It knows Action/NotAction,
  Resource/NotResource, Principal (for bucket policies) and the condition
  operators these policies use; anything else raises instead of guessing.

It is not a full IAM engine (no SCPs, permission boundaries, session
policies or ForAnyValue/ForAllValues set operators), and says so by raising.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache

ALLOW = "Allow"
DENY = "Deny"
NOT_APPLICABLE = "NotApplicable"


@dataclass(frozen=True)
class Request:
    """One IAM authorization check."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def context_dict(self) -> dict[str, str]:
        return dict(self.context)


def bucket_arn(bucket: str, partition: str = "aws") -> str:
    return f"arn:{partition}:s3:::{bucket}"


def object_arn(bucket: str, key: str, partition: str = "aws") -> str:
    return f"arn:{partition}:s3:::{bucket}/{key}"


# botocore operation -> (IAM actions on the object, or on the bucket).
# Writes that carry tags (s3kv tags every block) also need s3:PutObjectTagging.
_OBJECT_OPERATIONS: dict[str, tuple[str, ...]] = {
    "HeadObject": ("s3:GetObject",),
    "GetObject": ("s3:GetObject",),
    "GetObjectTagging": ("s3:GetObjectTagging",),
    "PutObject": ("s3:PutObject", "s3:PutObjectTagging"),
    "PutObjectTagging": ("s3:PutObjectTagging",),
    "CreateMultipartUpload": ("s3:PutObject", "s3:PutObjectTagging"),
    "UploadPart": ("s3:PutObject",),
    "CompleteMultipartUpload": ("s3:PutObject",),
    "AbortMultipartUpload": ("s3:AbortMultipartUpload",),
    "ListParts": ("s3:ListMultipartUploadParts",),
    "DeleteObject": ("s3:DeleteObject",),
    # DeleteObjects is authorized key by key as s3:DeleteObject, and as
    # s3:DeleteObjectVersion for the keys it names with a VersionId (recorded as
    # "DeleteObjectVersion" by the suite's trace).
    "DeleteObjects": ("s3:DeleteObject",),
    "DeleteObjectVersion": ("s3:DeleteObjectVersion",),
}
_BUCKET_OPERATIONS: dict[str, tuple[str, ...]] = {
    # ListObjects(V2) carry the request's Prefix as the s3:prefix key.
    "ListObjectsV2": ("s3:ListBucket",),
    "ListObjects": ("s3:ListBucket",),
    # HeadBucket is authorized as s3:ListBucket, without any s3:prefix.
    "HeadBucket": ("s3:ListBucket",),
    # s3:ListBucketMultipartUploads has no s3:prefix condition key.
    "ListMultipartUploads": ("s3:ListBucketMultipartUploads",),
    "GetBucketLocation": ("s3:GetBucketLocation",),
    "GetBucketVersioning": ("s3:GetBucketVersioning",),
    # ListObjectVersions carries the request's Prefix as the s3:prefix key too.
    "ListObjectVersions": ("s3:ListBucketVersions",),
}
# Copies: read the source object (and its tags, copied with it), write the
# destination object with those tags.
_COPY_OPERATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "CopyObject": (
        ("s3:GetObject", "s3:GetObjectTagging"),
        ("s3:PutObject", "s3:PutObjectTagging"),
    ),
    "UploadPartCopy": (("s3:GetObject",), ("s3:PutObject",)),
}
# With SSE-KMS the same request also needs the key (S3 Bucket Keys cut how
# often, not which permission).
_KMS_ACTIONS: dict[str, tuple[str, ...]] = {
    "GetObject": ("kms:Decrypt",),
    "PutObject": ("kms:GenerateDataKey",),
    "CreateMultipartUpload": ("kms:GenerateDataKey",),
    "UploadPart": ("kms:Decrypt",),
    "CompleteMultipartUpload": ("kms:Decrypt",),
    "CopyObject": ("kms:Decrypt", "kms:GenerateDataKey"),
    "UploadPartCopy": ("kms:Decrypt", "kms:GenerateDataKey"),
}

KNOWN_OPERATIONS = (
    frozenset(_OBJECT_OPERATIONS) | frozenset(_BUCKET_OPERATIONS) | frozenset(_COPY_OPERATIONS)
)


def requests_for(
    operation: str,
    *,
    bucket: str,
    key: str = "",
    source_bucket: str | None = None,
    source_key: str | None = None,
    kms_key_arn: str | None = None,
    partition: str = "aws",
) -> list[Request]:
    """The IAM checks one S3 operation makes. ``key`` is the list Prefix for lists."""
    requests: list[Request] = []
    if operation in _OBJECT_OPERATIONS:
        requests += [
            Request(a, object_arn(bucket, key, partition)) for a in _OBJECT_OPERATIONS[operation]
        ]
    elif operation in _BUCKET_OPERATIONS:
        context: tuple[tuple[str, str], ...] = ()
        if operation in ("ListObjectsV2", "ListObjects", "ListObjectVersions"):
            context = (("s3:prefix", key),)
        requests += [
            Request(a, bucket_arn(bucket, partition), context)
            for a in _BUCKET_OPERATIONS[operation]
        ]
    elif operation in _COPY_OPERATIONS:
        if source_bucket is None or source_key is None:
            raise ValueError(f"{operation} needs source_bucket and source_key")
        read, write = _COPY_OPERATIONS[operation]
        requests += [Request(a, object_arn(source_bucket, source_key, partition)) for a in read]
        requests += [Request(a, object_arn(bucket, key, partition)) for a in write]
    else:
        raise KeyError(
            f"unmapped S3 operation {operation!r}: add it to policy_eval before trusting a proof"
        )
    if kms_key_arn is not None:
        requests += [Request(a, kms_key_arn) for a in _KMS_ACTIONS.get(operation, ())]
    return requests


@cache
def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{body}$", re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _matches_any(patterns, value: str, *, ignore_case: bool) -> bool:
    return any(_wildcard(p, ignore_case).match(value) for p in _as_list(patterns))


_STATEMENT_KEYS = {
    "Sid",
    "Effect",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
    "Principal",
}


class Policy:
    """An IAM policy document (identity policy or bucket policy)."""

    def __init__(self, document: str | dict):
        self.document = json.loads(document) if isinstance(document, str) else document
        self.statements = _as_list(self.document["Statement"])
        for statement in self.statements:
            unknown = set(statement) - _STATEMENT_KEYS
            if unknown:
                raise NotImplementedError(f"statement keys not understood: {sorted(unknown)}")
            if statement["Effect"] not in (ALLOW, DENY):
                raise ValueError(f"bad Effect {statement['Effect']!r}")

    def decide(self, request: Request, *, principal: str | None = None) -> str:
        """Allow, Deny (explicit) or NotApplicable (implicit deny)."""
        effects = {s["Effect"] for s in self.statements if _applies(s, request, principal)}
        if DENY in effects:
            return DENY
        return ALLOW if ALLOW in effects else NOT_APPLICABLE

    def allows(self, request: Request, *, principal: str | None = None) -> bool:
        return self.decide(request, principal=principal) == ALLOW

    def actions(self, effect: str = ALLOW) -> set[str]:
        """Every action string the policy names with this effect."""
        names: set[str] = set()
        for statement in self.statements:
            if statement["Effect"] == effect:
                if "NotAction" in statement:
                    raise NotImplementedError("NotAction names what it does not grant")
                names.update(_as_list(statement["Action"]))
        return names


def _applies(statement: dict, request: Request, principal: str | None) -> bool:
    if "Principal" in statement and not _principal_matches(statement["Principal"], principal):
        return False
    if "Action" in statement:
        if not _matches_any(statement["Action"], request.action, ignore_case=True):
            return False
    elif _matches_any(statement["NotAction"], request.action, ignore_case=True):
        return False
    if "Resource" in statement:
        if not _matches_any(statement["Resource"], request.resource, ignore_case=False):
            return False
    elif _matches_any(statement["NotResource"], request.resource, ignore_case=False):
        return False
    return _conditions_hold(statement.get("Condition", {}), request.context_dict())


def _principal_matches(spec, principal: str | None) -> bool:
    if spec == "*":
        return True
    if principal is None:
        return False
    if not isinstance(spec, dict) or set(spec) - {"AWS"}:
        raise NotImplementedError(f"Principal not understood: {spec!r}")
    return any(p == "*" or p == principal for p in _as_list(spec["AWS"]))


def _conditions_hold(conditions: dict, context: dict[str, str]) -> bool:
    for operator, tests in conditions.items():
        for context_key, wanted in tests.items():
            if not _condition(operator, context.get(context_key), _as_list(wanted)):
                return False
    return True


def _condition(operator: str, value: str | None, wanted: list) -> bool:
    if operator.startswith(("ForAnyValue:", "ForAllValues:")):
        raise NotImplementedError(f"set operator {operator} not supported")
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    if base == "Null":
        return (value is None) == (str(wanted[0]).lower() == "true")
    negated = base in (
        "StringNotEquals",
        "StringNotLike",
        "StringNotEqualsIgnoreCase",
        "ArnNotEquals",
        "ArnNotLike",
    )
    if value is None:
        # A missing key fails positive operators and satisfies negated ones.
        return if_exists or negated
    wanted = [str(w) for w in wanted]
    if base in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals"):
        hit = value in wanted
    elif base in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        hit = value.lower() in [w.lower() for w in wanted]
    elif base in ("StringLike", "StringNotLike", "ArnLike", "ArnNotLike"):
        hit = _matches_any(wanted, value, ignore_case=False)
    elif base == "Bool":
        hit = value.lower() in [w.lower() for w in wanted]
    else:
        raise NotImplementedError(f"condition operator {operator} not supported")
    return not hit if negated else hit
