"""One error table for every request (issue 26, point 1): S3's answers to a skewed clock,
a bucket in another region and expired credentials get their own error and message, with
the fix, whichever client sent the request: a block GET, PUT and look (presence) on
awscrt or on boto3, a listing and a manifest read on boto3, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from s3kv import (
    ClockSkewError,
    Downloader,
    ExpiredCredentialsError,
    S3KVError,
    TransientStoreError,
    Uploader,
    WrongRegionError,
)
from s3kv.stores import open_store
from s3kv.stores.rules import ConditionFailed, error_for
from tests.faults.conftest import NS, cli, keys, rows, seed_blocks, settings

pytestmark = pytest.mark.integration

EXPECTED: dict[str, tuple[type[S3KVError], tuple[str, ...]]] = {
    # awscrt reads RequestTimeTooSkewed itself and keeps the store's Date: the amount of
    # the skew shows only where the answer reaches s3kv (boto3), the fix everywhere
    "skew": (ClockSkewError, ("this host's clock", "15 minutes", "chrony")),
    "region": (WrongRegionError, ("eu-west-1", "--region eu-west-1")),
    "expired": (ExpiredCredentialsError, ("expired", "refresh")),
}


def check(error: BaseException | str, fault: str) -> None:
    kind, words = EXPECTED[fault]
    if not isinstance(error, str):
        assert isinstance(error, kind), (type(error), error)
    text = str(error)
    for word in words:
        assert word in text, (word, text)
    assert "check the credentials" not in text  # not the generic access-denied advice


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_block_get_put_and_look_name_the_cause(
    proxy: Any, bucket: str, moto_server: str, data_path: str, fault: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks = seed_blocks(url, moto_server, 2)
    p = proxy(lambda r: fault if r.is_block else None)
    s = settings(p.url, data_path, max_attempts=3)
    with Downloader(url, NS, settings=s) as down:
        report = down.get_blocks(ks, into=list(np.zeros((2, 4096), dtype=np.uint8)))
        assert len(report.failed) == 2
        for why in report.failed.values():
            check(why, fault)
    with Uploader(url, NS, settings=s) as up:
        report = up.put_blocks(dict(zip(keys(2), rows(2))))
        assert len(report.failed) == 2
        for why in report.failed.values():
            check(why, fault)
    store = open_store(url, s)
    try:
        key = Downloader(url, NS, settings=settings(moto_server, "botocore")).keys.key_for(ks[0])
        with pytest.raises(S3KVError) as caught:
            store.head(key)  # a look: a GET of one byte, whose answer has a body (a
        check(caught.value, fault)  # HEAD's has none: expired credentials were "HTTP 400")
    finally:
        store.close()
    assert p.injected(fault)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_listings_and_manifests_name_the_cause_on_the_command_line(
    proxy: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    fault: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"s3://{bucket}/kv"
    seed_blocks(url, moto_server, 1)
    p = proxy(lambda r: fault)  # every request: listings and the manifest first
    for argv in (["ls", url], ["pull", url, str(tmp_path / "dst")]):
        code, out, err = cli(capsys, *argv, "--json", endpoint=p.url, data_path=data_path)
        assert code != 0 and "Traceback" not in err
        text = json.dumps(json.loads(out))
        check(text, fault)
        if fault == "skew":  # boto3 hands over the store's Date: the skew is measured
            assert "20 minutes ahead of" in text


def test_a_403_without_a_body_but_a_skewed_date_names_the_clock() -> None:
    # A HEAD has no body: the store's Date header tells a skewed clock from a denial.
    import time
    from email.utils import formatdate

    err = error_for("HEAD", "s3://b/k", status=403,
                    headers=[("Date", formatdate(time.time() + 3600, usegmt=True))])
    assert isinstance(err, ClockSkewError) and "behind the store's" in str(err)
    plain = error_for("HEAD", "s3://b/k", status=403,
                      headers=[("Date", formatdate(time.time(), usegmt=True))])
    assert not isinstance(plain, ClockSkewError) and "access denied" in str(plain)


def test_a_head_in_another_region_names_it_from_the_header() -> None:
    err = error_for("HEAD", "s3://b/k", status=400,
                    headers=[("x-amz-bucket-region", "ap-south-1")], region="us-east-1")
    assert isinstance(err, WrongRegionError) and err.region == "ap-south-1"
    assert "--region ap-south-1" in str(err)


def test_a_412_to_a_read_is_a_stale_answer_and_retried() -> None:
    # s3kv sends no condition with a HEAD or GET: a 412 there is another request's answer
    # (a refused create-only PUT's), left on a desynchronised connection. Seen in a
    # fresh-clone make test: the HEAD that settles a PUT's 412 got one, and the block failed.
    for op in ("HEAD", "GET"):
        err = error_for(op, "s3://b/k", status=412)
        assert isinstance(err, TransientStoreError), err
        assert "stale answer" in str(err) and "retried" in str(err)
    # a write's 412 keeps its meaning: the object is there (or changed)
    assert isinstance(error_for("PUT", "s3://b/k", status=412, code="PreconditionFailed"),
                      ConditionFailed)
