"""The writer policy grants what renewal needs and nothing more; readers cannot renew.

Renewal (s3kv.ops.gc.renewal) copies a used block onto itself (CopyObject, tags copied), and on
stores that drop tags on such a copy (Ceph RGW) reads and writes the tags. Every action
the writer policy names must be needed by an operation s3kv makes: the static list of
test_policy_proof plus renewal's; the traced operations of the functional tests are
checked against the same policy by test_policy_proof.
"""

from __future__ import annotations

import pytest
from policy_eval import Policy, requests_for
from test_policy_proof import (
    BUCKET,
    KMS_KEY,
    PREFIX,
    STATIC_S3KV_OPERATIONS,
    block_key,
    documents_for,
    synthesize,
)

pytestmark = pytest.mark.terraform

RENEWAL = [
    ("CopyObject", {"source_bucket": BUCKET, "source_key": block_key(PREFIX)}),
    ("GetObjectTagging", {}),
    ("PutObjectTagging", {}),
    ("HeadObject", {}),
]


def _renewal_requests(kms_key_arn: str | None = None) -> list:
    return [
        req
        for operation, extra in RENEWAL
        for req in requests_for(operation, bucket=BUCKET, key=block_key(PREFIX),
                                kms_key_arn=kms_key_arn, **extra)
    ]


@pytest.mark.parametrize("kms", [None, KMS_KEY])
def test_the_writer_may_renew(kms: str | None) -> None:
    docs = documents_for(BUCKET, PREFIX, **({"kms_key_arns": [kms]} if kms else {}))
    writer = Policy(docs["writer_policy_json"])
    denied = [r for r in _renewal_requests(kms) if not writer.allows(r)]
    assert not denied


def test_the_writer_names_nothing_s3kv_does_not_do() -> None:
    docs = documents_for(BUCKET, PREFIX, kms_key_arns=[KMS_KEY])
    needed = {
        req.action
        for name in STATIC_S3KV_OPERATIONS
        for call in synthesize(name, BUCKET, PREFIX)
        for req in call.requests(KMS_KEY)
    } | {req.action for req in _renewal_requests(KMS_KEY)}
    granted = Policy(docs["writer_policy_json"]).actions()
    assert granted - needed == set(), f"granted but never used: {granted - needed}"
    assert needed - granted == set()


def test_a_reader_cannot_renew() -> None:
    """A read-only tier never renews: a reader that could copy objects onto themselves
    could also copy one block's bytes under another key."""
    reader = Policy(documents_for(BUCKET, PREFIX)["reader_policy_json"])
    copy = requests_for("CopyObject", bucket=BUCKET, key=block_key(PREFIX),
                        source_bucket=BUCKET, source_key=block_key(PREFIX))
    assert not all(reader.allows(r) for r in copy)
    for operation in ("PutObjectTagging", "GetObjectTagging"):
        (req,) = requests_for(operation, bucket=BUCKET, key=block_key(PREFIX))
        assert not reader.allows(req), operation
