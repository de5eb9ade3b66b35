"""Fault injection through botocore's event hooks on s3kv's own client."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body

    def read(self, *_: Any) -> bytes:
        return self.body


def error_response(url: str, status: int, code: str) -> AWSResponse:
    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    return AWSResponse(url, status, {"Content-Type": "application/xml"}, _Raw(body))


class Faults:
    """Fail chosen requests: ``rule(operation, key, attempt) -> None | "503" | "500" | "reset"``."""

    def __init__(self, client: Any, rule: Callable[[str, str, int], str | None]) -> None:
        self.rule = rule
        self.attempts: dict[tuple[str, str], int] = {}
        self.injected: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        client.meta.events.register_first("before-send.s3", self._before_send)

    def _before_send(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        op = request.context.get("operation_name") or kwargs.get("event_name", "").split(".")[-1]
        key = request.url.split("?", 1)[0].split("/", 4)[-1]
        with self.lock:
            n = self.attempts.get((op, key), 0) + 1
            self.attempts[(op, key)] = n
        fault = self.rule(op, key, n)
        if fault is None:
            return None
        with self.lock:
            self.injected.append((op, key, fault))
        if fault == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        if fault == "503":
            return error_response(request.url, 503, "SlowDown")
        if fault == "409":
            return error_response(request.url, 409, "ConditionalRequestConflict")
        return error_response(request.url, int(fault), "InternalError")


class BodyReset:
    """Cut GetObject bodies midway (after ``after`` bytes) for chosen attempts."""

    def __init__(self, client: Any, should_cut: Callable[[str, int], bool], after: int) -> None:
        self.should_cut = should_cut
        self.after = after
        self.attempts: dict[str, int] = {}
        self.cuts = 0
        self.lock = threading.Lock()
        client.meta.events.register("after-call.s3.GetObject", self._after_call)

    def _after_call(
        self, http_response: Any, parsed: dict[str, Any], model: Any, **kw: Any
    ) -> None:
        key = http_response.url.split("?", 1)[0].split("/", 4)[-1] if http_response else ""
        with self.lock:
            n = self.attempts.get(key, 0) + 1
            self.attempts[key] = n
        if "Body" in parsed and key.endswith(".bin") and self.should_cut(key, n):
            with self.lock:
                self.cuts += 1
            parsed["Body"]._raw_stream = _CutStream(parsed["Body"]._raw_stream, self.after)


class _CutStream:
    def __init__(self, inner: Any, after: int) -> None:
        self.inner = inner
        self.left = after

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            raise ConnectionResetError("injected: connection reset by peer")
        view = memoryview(buffer)[: self.left]
        data = self.inner.read(len(view))
        view[: len(data)] = data
        self.left -= len(data)
        return len(data)

    def close(self) -> None:
        self.inner.close()

    def release_conn(self) -> None:
        pass
