"""Prove the writer and reader policies against the S3 operations s3kv makes.

The policy JSON is rendered by Terraform itself from terraform/modules/documents
(the module the aws and minio modules use), then evaluated by policy_eval.

Operations come from the ``recorded_s3_operations`` fixture when the suite
provides one (operations recorded from botocore events during the functional
tests); otherwise from STATIC_S3KV_OPERATIONS below. Which one was used is
recorded in each test's user_properties ("s3_operations_source"), named in
every failure message, and test_recorded_operations_are_used skips while the
static list stands in.

Recorded entries are tuples: ``(operation,)``, ``(operation, bucket, key)``
(key is the Prefix for list operations, "" for bucket operations) or
``("CopyObject", bucket, key, source_bucket, source_key)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from policy_eval import KNOWN_OPERATIONS, Policy, requests_for
from tfhelpers import render_documents

# after_functional: the recorded operations exist only once the functional tests ran.
pytestmark = [pytest.mark.terraform, pytest.mark.after_functional]

BUCKET = "s3kv-proof-cache"
PEER_BUCKET = "s3kv-proof-peer"
PREFIX = "teams/kv"
KMS_KEY = "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000"
OTHER_ACCOUNT = "arn:aws:iam::444455556666:role/inference"

# What s3kv's push/put/gc (writer) and lookup/load (reader) do, as decided
# for the s3kv side. HeadBucket is left out on purpose: see
# test_bucket_wide_calls_are_not_granted.
STATIC_S3KV_OPERATIONS = frozenset(
    {
        "PutObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
        "ListMultipartUploads",
        "HeadObject",
        "GetObject",
        "ListObjectsV2",
        "DeleteObjects",
        "DeleteObject",  # repair's conditional delete of an unrepairable block
        "CopyObject",
        "GetBucketVersioning",  # gc: is a delete there only a delete marker?
        "ListObjectVersions",  # gc: what stays stored in a versioned bucket
        "DeleteObjectVersion",  # gc --delete-noncurrent-versions
    }
)
READER_OPERATIONS = frozenset({"HeadObject", "GetObject", "ListObjectsV2"})
READER_MUST_NOT = frozenset(
    {
        "PutObject",
        "PutObjectTagging",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
        "ListMultipartUploads",
        "DeleteObject",
        "DeleteObjects",
        "DeleteObjectVersion",
        "CopyObject",
    }
)

# A block and a manifest as s3kv lays them out (vLLM's FileMapper layout).
_FOLDER = "Qwen_Qwen3-0.6B_0123456789ab"
_HASH = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def block_key(prefix: str) -> str:
    return f"{prefix}/{_FOLDER}_r0/{_HASH[:3]}/{_HASH[3:5]}_g0/{_HASH}.bin"


def manifest_key(prefix: str) -> str:
    return f"{prefix}/{_FOLDER}/config.json"


# <prefix>/<model>_<digest12>[_r<rank>]/...: the prefix is what precedes the folder.
_LAYOUT = re.compile(r"^(?P<prefix>.+?)/[^/]+_[0-9a-f]{12}(?:_r\d+)?/")


@dataclass(frozen=True)
class Call:
    """One S3 operation with its target, as s3kv would make it."""

    operation: str
    bucket: str
    key: str
    source_bucket: str | None = None
    source_key: str | None = None

    def requests(self, kms_key_arn: str | None = None):
        return requests_for(
            self.operation,
            bucket=self.bucket,
            key=self.key,
            source_bucket=self.source_bucket,
            source_key=self.source_key,
            kms_key_arn=kms_key_arn,
        )


def synthesize(operation: str, bucket: str, prefix: str) -> list[Call]:
    """Representative calls for an operation name: every kind of target s3kv uses."""
    if operation in ("ListObjectsV2", "ListObjects", "ListObjectVersions"):
        return [
            Call(operation, bucket, f"{prefix}/"),
            Call(operation, bucket, f"{prefix}/{_FOLDER}_r0/"),
        ]
    if operation in (
        "ListMultipartUploads", "HeadBucket", "GetBucketLocation", "GetBucketVersioning"
    ):
        return [Call(operation, bucket, "")]
    if operation in ("CopyObject", "UploadPartCopy"):
        return [
            Call(operation, bucket, block_key(prefix), PEER_BUCKET, block_key(prefix)),
            Call(operation, bucket, manifest_key(prefix), bucket, manifest_key(prefix)),
        ]
    return [
        Call(operation, bucket, block_key(prefix)),
        Call(operation, bucket, manifest_key(prefix)),
    ]


@dataclass(frozen=True)
class OperationSet:
    source: str  # "recorded" or "static"
    bucket: str
    prefix: str
    calls: tuple[Call, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(c.operation for c in self.calls)


def _prefix_of(key: str) -> str:
    match = _LAYOUT.match(key)
    if not match:
        raise AssertionError(f"recorded key {key!r} does not follow s3kv's key layout")
    return match["prefix"]


def operation_set_from(recorded) -> OperationSet:
    """Turn recorded tuples into calls, deriving bucket and prefix from them."""
    entries = [(e,) if isinstance(e, str) else tuple(e) for e in recorded]
    targeted = [e for e in entries if len(e) >= 3]
    buckets = {e[1] for e in targeted}
    prefixes = {_prefix_of(e[2]) for e in targeted if e[2] and not e[2].endswith("/")}
    if len(buckets) > 1 or len(prefixes) > 1:
        raise AssertionError(f"recorded operations span several caches: {buckets} {prefixes}")
    bucket = next(iter(buckets), BUCKET)
    prefix = next(iter(prefixes), PREFIX)
    calls: list[Call] = []
    for entry in entries:
        if len(entry) >= 3:
            calls.append(
                Call(*entry[:5]) if len(entry) >= 5 else Call(entry[0], entry[1], entry[2])
            )
        else:
            calls.extend(synthesize(entry[0], bucket, prefix))
    return OperationSet("recorded", bucket, prefix, tuple(calls))


@pytest.fixture
def s3_operations(request) -> OperationSet:
    try:
        recorded = request.getfixturevalue("recorded_s3_operations")
    except pytest.FixtureLookupError:
        recorded = None
    if recorded:
        operations = operation_set_from(recorded)
    else:
        calls = [
            c for name in sorted(STATIC_S3KV_OPERATIONS) for c in synthesize(name, BUCKET, PREFIX)
        ]
        operations = OperationSet("static", BUCKET, PREFIX, tuple(calls))
    request.node.user_properties.append(("s3_operations_source", operations.source))
    return operations


def documents_for(bucket: str, prefix: str, **extra) -> dict:
    inputs = {"bucket": bucket, "prefix": prefix, "read_bucket_names": [PEER_BUCKET], **extra}
    return render_documents({"documents": inputs})["documents"]


@pytest.fixture(scope="module")
def documents() -> dict:
    return documents_for(BUCKET, PREFIX)


def denied(policy: Policy, calls, kms_key_arn=None) -> list[str]:
    return [
        f"{call.operation} -> {req.action} on {req.resource} {req.context_dict() or ''}"
        for call in calls
        for req in call.requests(kms_key_arn)
        if not policy.allows(req)
    ]


def test_recorded_operations_are_used(request):
    try:
        recorded = request.getfixturevalue("recorded_s3_operations")
    except pytest.FixtureLookupError:
        recorded = None
    if not recorded:
        pytest.skip(
            "no recorded_s3_operations fixture: policy proofs ran on STATIC_S3KV_OPERATIONS"
        )
    unknown = {(e if isinstance(e, str) else e[0]) for e in recorded} - KNOWN_OPERATIONS
    assert not unknown, f"recorded operations policy_eval cannot map: {sorted(unknown)}"


def test_writer_grants_every_s3kv_operation(s3_operations):
    docs = documents_for(s3_operations.bucket, s3_operations.prefix)
    missing = denied(Policy(docs["writer_policy_json"]), s3_operations.calls)
    assert not missing, f"writer policy denies ({s3_operations.source} operations): {missing}"


def test_writer_grants_every_s3kv_operation_with_kms(s3_operations):
    docs = documents_for(s3_operations.bucket, s3_operations.prefix, kms_key_arns=[KMS_KEY])
    missing = denied(Policy(docs["writer_policy_json"]), s3_operations.calls, kms_key_arn=KMS_KEY)
    assert not missing, (
        f"writer policy with SSE-KMS denies ({s3_operations.source} operations): {missing}"
    )


def test_reader_grants_lookups_and_loads(s3_operations):
    docs = documents_for(s3_operations.bucket, s3_operations.prefix, kms_key_arns=[KMS_KEY])
    reads = [c for c in s3_operations.calls if c.operation in READER_OPERATIONS]
    assert reads, f"no lookup/load operation among the {s3_operations.source} operations"
    missing = denied(Policy(docs["reader_policy_json"]), reads, kms_key_arn=KMS_KEY)
    assert not missing, f"reader policy denies ({s3_operations.source} operations): {missing}"


def test_reader_denies_everything_that_writes_or_deletes(s3_operations):
    docs = documents_for(s3_operations.bucket, s3_operations.prefix, kms_key_arns=[KMS_KEY])
    reader = Policy(docs["reader_policy_json"])
    names = (s3_operations.names - READER_OPERATIONS) | READER_MUST_NOT
    calls = [
        c
        for name in sorted(names)
        for c in synthesize(name, s3_operations.bucket, s3_operations.prefix)
    ]
    calls += [c for c in s3_operations.calls if c.operation not in READER_OPERATIONS]
    # An operation goes through only if every check it triggers is allowed.
    granted = [c for c in calls if all(reader.allows(r) for r in c.requests())]
    assert not granted, f"reader policy grants ({s3_operations.source} operations): {granted}"


def test_reader_names_only_read_actions(documents):
    assert Policy(documents["reader_policy_json"]).actions() == {"s3:GetObject", "s3:ListBucket"}
    kms_docs = documents_for(BUCKET, PREFIX, kms_key_arns=[KMS_KEY])
    assert Policy(kms_docs["reader_policy_json"]).actions() == {
        "s3:GetObject",
        "s3:ListBucket",
        "kms:Decrypt",
    }


def test_policies_name_no_wildcard_actions_or_buckets(documents):
    for name in ("writer_policy_json", "reader_policy_json"):
        policy = Policy(documents[name])
        assert not [a for a in policy.actions() if "*" in a or "?" in a], name
        for statement in policy.statements:
            for resource in statement["Resource"]:
                bucket_part = resource.split(":::", 1)[1]
                assert "*" not in bucket_part.split("/", 1)[0], f"{name}: {resource}"


@pytest.mark.parametrize("role", ["writer_policy_json", "reader_policy_json"])
@pytest.mark.parametrize(
    "key",
    [
        "other/" + _FOLDER + "/config.json",  # another prefix
        PREFIX + "-sibling/" + _FOLDER + "/config.json",  # shares the prefix's letters
        _FOLDER + "/config.json",  # bucket root
    ],
)
def test_grants_stop_at_the_prefix(documents, role, key):
    policy = Policy(documents[role])
    for operation in ("GetObject", "PutObject", "DeleteObjects"):
        for req in requests_for(operation, bucket=BUCKET, key=key):
            assert not policy.allows(req), f"{role} allows {req}"
    for list_prefix in ("", PREFIX, PREFIX + "-sibling/", "other/"):
        (req,) = requests_for("ListObjectsV2", bucket=BUCKET, key=list_prefix)
        assert not policy.allows(req), f"{role} lists {list_prefix!r}"
    for req in requests_for("PutObject", bucket="someone-elses-bucket", key=block_key(PREFIX)):
        assert not policy.allows(req)


def test_writer_copies_between_caches_but_not_into_peers(documents):
    writer = Policy(documents["writer_policy_json"])
    into_cache = Call("CopyObject", BUCKET, block_key(PREFIX), PEER_BUCKET, block_key(PREFIX))
    into_peer = Call("CopyObject", PEER_BUCKET, block_key(PREFIX), BUCKET, block_key(PREFIX))
    assert not denied(writer, [into_cache])
    assert denied(writer, [into_peer])


def test_bucket_wide_calls_are_not_granted(documents):
    """HeadBucket is authorized as an unconditioned s3:ListBucket, which would
    reveal every key of the bucket; the policies grant ListBucket only under
    the prefix, so s3kv must not rely on HeadBucket (a 403 is expected)."""
    for role in ("writer_policy_json", "reader_policy_json"):
        for req in requests_for("HeadBucket", bucket=BUCKET):
            assert not Policy(documents[role]).allows(req)


def test_bucket_policy_denies_plain_http_and_lets_other_accounts_read():
    docs = documents_for(BUCKET, PREFIX, reader_principal_arns=[OTHER_ACCOUNT])
    bucket_policy = Policy(docs["bucket_policy_json"])
    secure = (("aws:SecureTransport", "true"),)
    insecure = (("aws:SecureTransport", "false"),)

    def decide(operation, key, context, principal=OTHER_ACCOUNT):
        decisions = set()
        for req in requests_for(operation, bucket=BUCKET, key=key):
            decisions.add(
                bucket_policy.decide(
                    type(req)(req.action, req.resource, req.context + context), principal=principal
                )
            )
        return decisions

    assert decide("GetObject", block_key(PREFIX), secure) == {"Allow"}
    assert decide("ListObjectsV2", f"{PREFIX}/", secure) == {"Allow"}
    assert decide("GetObject", block_key(PREFIX), insecure) == {"Deny"}
    assert decide(
        "GetObject", block_key(PREFIX), insecure, principal="arn:aws:iam::111122223333:root"
    ) == {"Deny"}
    assert "Allow" not in decide("PutObject", block_key(PREFIX), secure)
    assert "Allow" not in decide("DeleteObjects", block_key(PREFIX), secure)
    assert "Allow" not in decide("GetObject", "other/x.bin", secure)
