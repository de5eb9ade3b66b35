"""A response's timestamps parsed as botocore parses them, listings' without dateutil."""

from __future__ import annotations

import pytest
from botocore.utils import parse_timestamp

from s3kv.settings import S3Settings
from s3kv.stores.s3_client import new_session, parse_time


@pytest.mark.parametrize("value", [
    "2026-12-04T04:05:30.226Z",  # a listing's LastModified (AWS, RGW, MinIO, moto)
    "2026-12-04T04:05:30Z",
    "2026-12-04T04:05:30.226000+00:00",
    "2026-12-04T06:05:30+02:00",
    "Fri, 04 Dec 2026 04:05:30 GMT",  # a HEAD's Last-Modified
    "1733284000",  # epoch seconds
    "2026-12-04T04:05:30",  # no zone: botocore's reading, whatever it is
])
def test_the_same_instant_as_botocore(value: str) -> None:
    ours, theirs = parse_time(value), parse_timestamp(value)
    assert ours == theirs and ours.utcoffset() == theirs.utcoffset()


def test_an_unparseable_timestamp_fails_as_botocore_fails() -> None:
    with pytest.raises(ValueError):
        parse_time("yesterday-ish")


def test_the_sessions_clients_use_it() -> None:
    session = new_session(S3Settings.resolve(region="us-east-1"))
    factory = session._session.get_component("response_parser_factory")
    parser = factory.create_parser("rest-xml")
    assert parser._timestamp_parser is parse_time
