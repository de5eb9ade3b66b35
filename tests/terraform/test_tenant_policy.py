"""Issue 39, point 4: a tenant's role reaches its prefix only; the platform's, every tenant.

terraform/modules/aws-tenant and minio-tenant render the documents module for
``<prefix>/tenants/<tenant>``; this renders it the same way (Terraform itself) and
evaluates every S3 operation s3kv makes (the static list of test_policy_proof, each on a
block, a manifest and the listings) on the tenant's own prefix, on another tenant's and
on the cache's own namespaces.
"""

from __future__ import annotations

import pytest
from policy_eval import Policy
from test_policy_proof import (
    BUCKET,
    KMS_KEY,
    PREFIX,
    READER_OPERATIONS,
    STATIC_S3KV_OPERATIONS,
    denied,
    documents_for,
    synthesize,
)
from tfhelpers import TERRAFORM_DIR, load_hcl

pytestmark = pytest.mark.terraform

ACME, GLOBEX = f"{PREFIX}/tenants/acme", f"{PREFIX}/tenants/globex"
# Bucket-wide reads the writer needs (no s3:prefix key to hold them to): not a tenant's KV.
BUCKET_WIDE = {"ListMultipartUploads", "GetBucketVersioning"}


def calls(operations, prefix):
    return [c for name in sorted(operations) for c in synthesize(name, BUCKET, prefix)]


@pytest.fixture(scope="module")
def rendered() -> dict:
    return {
        "acme": documents_for(BUCKET, ACME, kms_key_arns=[KMS_KEY]),
        "platform": documents_for(BUCKET, PREFIX),
    }


def test_the_tenant_modules_render_the_documents_for_the_tenants_prefix() -> None:
    for module in ("aws-tenant", "minio-tenant"):
        main = load_hcl(TERRAFORM_DIR / "modules" / module / "main.tf")
        (call,) = [m["documents"] for m in main["module"] if "documents" in m]
        assert call["prefix"] == "${local.tenant_prefix}", module
        local = {k: v for entry in main["locals"] for k, v in entry.items()}
        assert local["tenant_prefix"] == "${var.prefix}/tenants/${var.tenant}", module


def test_a_tenants_writer_does_all_s3kv_does_on_its_prefix(rendered: dict) -> None:
    writer = Policy(rendered["acme"]["writer_policy_json"])
    assert denied(writer, calls(STATIC_S3KV_OPERATIONS, ACME), KMS_KEY) == []
    reader = Policy(rendered["acme"]["reader_policy_json"])
    assert denied(reader, calls(READER_OPERATIONS, ACME), KMS_KEY) == []


@pytest.mark.parametrize("role", ["writer", "reader"])
@pytest.mark.parametrize("elsewhere", [GLOBEX, PREFIX, f"{PREFIX}/tenants"])
def test_a_tenants_role_reaches_nothing_elsewhere(rendered: dict, role: str,
                                                  elsewhere: str) -> None:
    policy = Policy(rendered["acme"][f"{role}_policy_json"])
    targeted = calls(STATIC_S3KV_OPERATIONS - BUCKET_WIDE, elsewhere)
    allowed = [c for c in targeted for r in c.requests(KMS_KEY) if policy.allows(r)
               and not r.action.startswith("kms:")]
    assert allowed == [], f"{role} of acme reaches {elsewhere}: {allowed}"


def test_the_platform_role_reaches_every_tenant(rendered: dict) -> None:
    platform = Policy(rendered["platform"]["writer_policy_json"])
    for prefix in (ACME, GLOBEX):
        assert denied(platform, calls(STATIC_S3KV_OPERATIONS, prefix)) == []


def test_a_tenants_kms_key_is_its_own(rendered: dict) -> None:
    writer = Policy(rendered["acme"]["writer_policy_json"])
    kms = [s for s in writer.statements if "kms:GenerateDataKey" in str(s.get("Action"))]
    assert [s["Resource"] for s in kms] == [[KMS_KEY]]
