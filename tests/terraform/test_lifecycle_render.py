"""The lifecycle rules as S3's API takes them, rendered by terraform/modules/documents.

``tests/data/lifecycle-rgw.json`` is what ``tests/vllm/test_lifecycle_rgw.py`` puts on
Ceph RGW (whose lifecycle engine then really expires blocks): the vLLM venv has no
Terraform, so the rendered JSON is committed and this test keeps it what Terraform
renders today. The rule is "days since last use": its variables say so, and the filter
is the one the lifecycle proof proves (blocks expire, manifests never do).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_lifecycle_proof import BLOCK_TAGS, block_key, manifest_key, rule_matches
from tfhelpers import TERRAFORM_DIR, blocks, render_documents

pytestmark = pytest.mark.terraform

RGW_RULES = Path(__file__).resolve().parents[1] / "data" / "lifecycle-rgw.json"
RGW_INPUTS = {"bucket": "s3kv-lifecycle-proof", "prefix": "team/kv", "block_expiration_days": 1}


def _render(**inputs: object) -> dict:
    return render_documents({"documents": inputs})["documents"]


def test_the_committed_rgw_rules_are_what_terraform_renders() -> None:
    rendered = json.loads(_render(**RGW_INPUTS)["lifecycle_configuration_json"])
    assert json.loads(RGW_RULES.read_text()) == rendered, (
        "terraform/modules/documents renders other lifecycle rules than "
        "tests/data/lifecycle-rgw.json: regenerate it from lifecycle_configuration_json"
    )


def _as_filter(api_filter: dict) -> dict:
    """The S3 API's Filter as the aws provider's filter block (what the proof speaks)."""
    if "And" in api_filter:
        both = api_filter["And"]
        return {"and": {"prefix": both["Prefix"],
                        "tags": {t["Key"]: t["Value"] for t in both["Tags"]}}}
    return {"prefix": api_filter["Prefix"]}


def test_blocks_expire_after_days_since_last_use_and_manifests_never() -> None:
    docs = _render(bucket="s3kv-cache", prefix="teams/kv", block_expiration_days=9,
                   abort_incomplete_multipart_upload_days=2)
    rules = {r["ID"]: r for r in json.loads(docs["lifecycle_configuration_json"])["Rules"]}
    assert set(rules) == {"expire-s3kv-blocks", "abort-incomplete-multipart-uploads"}
    expire = rules["expire-s3kv-blocks"]
    assert expire["Status"] == "Enabled" and expire["Expiration"] == {"Days": 9}
    assert _as_filter(expire["Filter"]) == docs["block_expiration_filter"]
    assert rule_matches(_as_filter(expire["Filter"]), block_key("teams/kv", "ab" * 16),
                        BLOCK_TAGS, 1)
    assert not rule_matches(_as_filter(expire["Filter"]), manifest_key("teams/kv"), {}, 1)
    abort = rules["abort-incomplete-multipart-uploads"]
    assert abort["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 2}
    assert "Expiration" not in abort  # nothing but blocks ever expires
    assert docs["block_expiration_days"] == 9


@pytest.mark.parametrize("module", ["aws", "minio", "documents"])
def test_the_expiry_variable_says_days_since_last_use(module: str) -> None:
    variable = blocks(TERRAFORM_DIR / "modules" / module, "variable")["block_expiration_days"]
    assert "since a block's last use" in variable["description"]
    assert "renew_after" in variable["description"]


@pytest.mark.parametrize("module", ["aws", "minio"])
def test_backend_modules_hand_their_expiry_to_the_documents(module: str) -> None:
    call = blocks(TERRAFORM_DIR / "modules" / module, "module")["documents"]
    assert call["block_expiration_days"] == "${var.block_expiration_days}"
