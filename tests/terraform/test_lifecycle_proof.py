"""Prove the block-expiry lifecycle rule against the objects s3kv writes.

The filter is rendered by Terraform from terraform/modules/documents, and the
aws and minio modules are checked (HCL) to pass exactly that filter to their
lifecycle resources. Objects come from the ``written_s3_objects`` fixture when
the suite provides one (a list of (key, tags, size) of what the functional
tests wrote); otherwise from static examples of s3kv's layout. Which one was
used is recorded in user_properties ("s3_objects_source") and named in every
failure message; test_written_objects_are_used skips while the static
examples stand in.
"""

from __future__ import annotations

import pytest
from tfhelpers import TERRAFORM_DIR, render_documents, resources

pytestmark = [pytest.mark.terraform, pytest.mark.after_functional]

PREFIX = "teams/kv"
_FOLDER = "Qwen_Qwen3-0.6B_0123456789ab"
_HASHES = [
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "00000000000000000000000000000001",
]
BLOCK_TAGS = {"s3kv-object": "block"}
BLOCK_BYTES = 2 * 1024 * 1024


def rule_matches(rule_filter: dict, key: str, tags: dict, size: int) -> bool:
    """S3 lifecycle filter semantics for one current object version.

    rule_filter uses the aws_s3_bucket_lifecycle_configuration filter shape:
    one of prefix, tag {key, value}, object_size_greater_than,
    object_size_less_than, or and {prefix, tags, object_size_greater_than,
    object_size_less_than}. An empty filter matches every object. Prefix is a
    plain byte prefix (no wildcards); every tag of the filter must be on the
    object with the same value (extra object tags do not matter); sizes are
    strict bounds in bytes.
    """
    if not rule_filter:
        return True
    allowed = {"prefix", "tag", "and", "object_size_greater_than", "object_size_less_than"}
    unknown = set(rule_filter) - allowed
    if unknown:
        raise ValueError(f"unknown lifecycle filter elements: {sorted(unknown)}")
    if len(rule_filter) != 1:
        raise ValueError(f"a lifecycle filter holds exactly one element, got {sorted(rule_filter)}")
    ((element, value),) = rule_filter.items()
    if element == "prefix":
        return key.startswith(value)
    if element == "tag":
        return tags.get(value["key"]) == value["value"]
    if element == "object_size_greater_than":
        return size > int(value)
    if element == "object_size_less_than":
        return size < int(value)
    unknown = set(value) - {"prefix", "tags", "object_size_greater_than", "object_size_less_than"}
    if unknown:
        raise ValueError(f"unknown elements in and: {sorted(unknown)}")
    return (
        key.startswith(value.get("prefix") or "")
        and all(tags.get(k) == v for k, v in (value.get("tags") or {}).items())
        and (
            "object_size_greater_than" not in value or size > int(value["object_size_greater_than"])
        )
        and ("object_size_less_than" not in value or size < int(value["object_size_less_than"]))
    )


def block_key(prefix: str, block_hash: str, rank: int = 0, group: int = 0) -> str:
    return (
        f"{prefix}/{_FOLDER}_r{rank}/{block_hash[:3]}/{block_hash[3:5]}_g{group}/{block_hash}.bin"
    )


def manifest_key(prefix: str) -> str:
    return f"{prefix}/{_FOLDER}/config.json"


STATIC_WRITTEN_OBJECTS = [
    *[
        (block_key(PREFIX, h, rank=r, group=g), BLOCK_TAGS, BLOCK_BYTES)
        for h in _HASHES
        for r in (0, 3)
        for g in (0, 1)
    ],
    (manifest_key(PREFIX), {}, 412),
]


def _prefix_of(key: str) -> str:
    # <prefix>/<folder>[_r<rank>]/...: blocks sit 4 levels below the prefix,
    # manifests 2.
    parts = key.split("/")
    depth = 2 if key.endswith("/config.json") else 4
    return "/".join(parts[:-depth])


def kind_of(key: str) -> str:
    if key.endswith("/config.json"):
        return "manifest"
    if key.endswith(".bin"):
        return "block"
    raise AssertionError(f"object {key!r} is neither a block nor a manifest")


@pytest.fixture
def written_objects(request) -> tuple[str, str, list]:
    try:
        written = request.getfixturevalue("written_s3_objects")
    except pytest.FixtureLookupError:
        written = None
    source, objects = ("recorded", list(written)) if written else ("static", STATIC_WRITTEN_OBJECTS)
    prefixes = {_prefix_of(key) for key, _, _ in objects}
    assert len(prefixes) == 1, f"{source} objects span several prefixes: {prefixes}"
    request.node.user_properties.append(("s3_objects_source", source))
    return source, prefixes.pop(), objects


def block_filter(prefix: str) -> dict:
    docs = render_documents({"documents": {"bucket": "s3kv-proof-cache", "prefix": prefix}})
    return docs["documents"]["block_expiration_filter"]


def test_written_objects_are_used(request):
    try:
        written = request.getfixturevalue("written_s3_objects")
    except pytest.FixtureLookupError:
        written = None
    if not written:
        pytest.skip(
            "no written_s3_objects fixture: the lifecycle proof ran on STATIC_WRITTEN_OBJECTS"
        )


def test_blocks_expire_and_manifests_never_do(written_objects):
    source, prefix, objects = written_objects
    rule_filter = block_filter(prefix)
    kinds = {kind_of(key) for key, _, _ in objects}
    assert kinds == {"block", "manifest"}, f"{source} objects lack a kind: {kinds}"
    for key, tags, size in objects:
        expected = kind_of(key) == "block"
        assert rule_matches(rule_filter, key, tags, size) is expected, (
            f"{source} {kind_of(key)} {key} tags={tags}: rule match should be {expected}"
        )


def test_only_s3kv_blocks_under_the_prefix_expire():
    rule_filter = block_filter(PREFIX)
    h = _HASHES[0]
    # vLLM's own object tier stores the same keys but writes no tags: kept.
    assert not rule_matches(rule_filter, block_key(PREFIX, h), {}, BLOCK_BYTES)
    # A tagged block elsewhere in the bucket: not this cache's business.
    assert not rule_matches(rule_filter, block_key("other", h), BLOCK_TAGS, BLOCK_BYTES)
    assert not rule_matches(rule_filter, block_key(PREFIX + "-sibling", h), BLOCK_TAGS, BLOCK_BYTES)
    # A manifest that somehow got the tag would expire: s3kv must never tag one.
    assert rule_matches(rule_filter, manifest_key(PREFIX), BLOCK_TAGS, 412)
    # Extra tags on a block do not stop expiry.
    assert rule_matches(rule_filter, block_key(PREFIX, h), {**BLOCK_TAGS, "team": "a"}, BLOCK_BYTES)


@pytest.mark.parametrize(
    ("rule_filter", "key", "tags", "size", "expected"),
    [
        ({}, "a/b", {}, 0, True),
        ({"prefix": "a/"}, "a/b", {}, 0, True),
        ({"prefix": "a/"}, "ab", {}, 0, False),
        ({"tag": {"key": "k", "value": "v"}}, "x", {"k": "v"}, 0, True),
        ({"tag": {"key": "k", "value": "v"}}, "x", {"k": "w"}, 0, False),
        ({"object_size_greater_than": 10}, "x", {}, 10, False),
        ({"object_size_greater_than": 10}, "x", {}, 11, True),
        ({"object_size_less_than": 10}, "x", {}, 10, False),
        ({"and": {"prefix": "a/", "tags": {"k": "v", "j": "u"}}}, "a/x", {"k": "v"}, 1, False),
        (
            {"and": {"prefix": "a/", "tags": {"k": "v"}, "object_size_less_than": 5}},
            "a/x",
            {"k": "v"},
            4,
            True,
        ),
        ({"and": {"prefix": "a/", "object_size_greater_than": 5}}, "a/x", {}, 5, False),
    ],
)
def test_rule_matches_follows_s3_semantics(rule_filter, key, tags, size, expected):
    assert rule_matches(rule_filter, key, tags, size) is expected


def test_rule_matches_refuses_what_it_does_not_know():
    with pytest.raises(ValueError):
        rule_matches({"suffix": ".bin"}, "x.bin", {}, 0)
    with pytest.raises(ValueError):
        rule_matches({"prefix": "a/", "tag": {"key": "k", "value": "v"}}, "a/x", {}, 0)


# --- the modules pass the proven filter, and nothing else expires objects ----

FILTER = "${module.documents.block_expiration_filter.and.prefix}"
TAGS = "${module.documents.block_expiration_filter.and.tags}"


def _rules(lifecycle: dict) -> list[dict]:
    rules = list(lifecycle.get("rule", []))
    for dynamic in lifecycle.get("dynamic", []):
        for body in (
            dynamic.get("rule", {}).get("content", [])
            if isinstance(dynamic.get("rule"), dict)
            else []
        ):
            rules.append(body)
    return rules


def test_aws_module_expires_blocks_with_the_proven_filter():
    lifecycle = resources(
        TERRAFORM_DIR / "modules" / "aws", "aws_s3_bucket_lifecycle_configuration"
    )["this"]
    rules = {rule["id"]: rule for rule in _rules(lifecycle)}
    assert set(rules) == {
        "expire-s3kv-blocks",
        "abort-incomplete-multipart-uploads",
        "expire-noncurrent-versions",
    }
    block_rule = rules["expire-s3kv-blocks"]
    assert block_rule["filter"] == [{"and": [{"prefix": FILTER, "tags": TAGS}]}]
    assert block_rule["expiration"] == [{"days": "${var.block_expiration_days}"}]
    # No other rule may expire current versions: that would reach manifests.
    for rule_id, rule in rules.items():
        if rule_id != "expire-s3kv-blocks":
            for expiration in rule.get("expiration", []):
                assert set(expiration) == {"expired_object_delete_marker"}, rule_id


def test_minio_module_expires_blocks_with_the_proven_filter():
    ilm = resources(TERRAFORM_DIR / "modules" / "minio", "minio_ilm_policy")["this"]
    rules = {rule["id"]: rule for rule in _rules(ilm)}
    assert set(rules) == {"expire-s3kv-blocks", "expire-noncurrent-versions"}
    block_rule = rules["expire-s3kv-blocks"]
    assert (block_rule["filter"], block_rule["tags"]) == (FILTER, TAGS)
    assert block_rule["expiration"] == "${var.block_expiration_days}d"
    for rule_id, rule in rules.items():
        if rule_id != "expire-s3kv-blocks":
            assert "expiration" not in rule, rule_id
