"""Where a store reports its requests to :attr:`Store.on_request`: one place per client.

* A blocking call (``get``, ``get_into``, ``get_range``, ``put``, ``head``, ``describe``,
  ``renew``, ``get_tags``, ``put_tags``) is :func:`reported`: the decorator times it and
  judges its result or error. A call that reaches another reported call (a subclass's
  method calling its parent's, ``describe`` calling ``head``) is one request: only the
  outermost reports.
* A submitted request (awscrt's ``submit_put``/``submit_get_into``) wraps its ``done``
  with :func:`reporting_done`, which reports as the request ends.

The attempt is read when the request starts, from :data:`s3kv.retry.ATTEMPT`, which the
retry loops set: retries are known, not guessed. Without a hook (the default) a reported
call costs one attribute read.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from s3kv.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    SizeMismatchError,
    StorePausedError,
    TransientStoreError,
)
from s3kv.retry import ATTEMPT
from s3kv.stores.base import ObjectDetails, ObjectInfo, RequestEvent, RequestHook, Store

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

Judged = tuple[str, ObjectInfo | None, int]
"""(outcome, what the answer said, payload bytes)."""


def outcome_of(error: BaseException) -> str:
    """The outcome of a request that raised ``error``."""
    if isinstance(error, ObjectNotFoundError):
        return "not_found"
    if isinstance(error, SizeMismatchError):
        return "size_mismatch"
    if isinstance(error, TransientStoreError):
        return "transient"
    if isinstance(error, AccessDeniedError):
        return "denied"
    return "error"


def _nbytes(data: Any) -> int:
    return memoryview(data).nbytes


def _details_info(got: ObjectDetails | None) -> ObjectInfo | None:
    return got.info if got is not None else None


def _found(info: ObjectInfo | None) -> Judged:
    return ("ok", info, 0) if info is not None else ("not_found", None, 0)


# method name -> (operation, judge(result, arguments after the key, keyword arguments))
Judge = Callable[[Any, tuple[Any, ...], dict[str, Any]], Judged]
_JUDGES: dict[str, tuple[str, Judge]] = {
    "get": ("get", lambda got, _, __: ("ok", got[1], len(got[0]))),
    "get_into": ("get", lambda info, _, __: ("ok", info, info.size)),
    "get_range": ("get", lambda data, _, __: ("ok", None, len(data))),
    "put": ("put", lambda created, args, kwargs: (
        "created" if created else "exists", None,
        _nbytes(args[0] if args else kwargs["data"]))),
    "head": ("head", lambda info, _, __: _found(info)),
    "describe": ("head", lambda got, _, __: _found(_details_info(got))),
    "renew": ("copy", lambda when, _, __: ("ok" if when is not None else "not_found", None, 0)),
    "get_tags": ("tagging", lambda _, __, ___: ("ok", None, 0)),
    "put_tags": ("tagging", lambda _, __, ___: ("ok", None, 0)),
}

_inside = threading.local()
"""``active`` while this thread is inside a reported call that reports."""


def reported(method: F) -> F:
    """A store method that reports each call to the store's hook (see the module)."""
    operation, judge = _JUDGES[method.__name__]

    @functools.wraps(method)
    def reporting(self: Store, key: str, *args: Any, **kwargs: Any) -> Any:
        hook = self.on_request
        if hook is None or getattr(_inside, "active", False):
            return method(self, key, *args, **kwargs)
        attempt = ATTEMPT.get()
        started = time.monotonic()
        _inside.active = True
        try:
            result = method(self, key, *args, **kwargs)
        except BaseException as exc:
            _inside.active = False
            if isinstance(exc, StorePausedError):
                raise  # not sent: no request to report
            now = time.monotonic()
            hook(RequestEvent(operation, key, outcome_of(exc), attempt, 0, now - started,
                              ended=now))
            raise
        _inside.active = False
        outcome, info, nbytes = judge(result, args, kwargs)
        now = time.monotonic()
        hook(RequestEvent(operation, key, outcome, attempt, nbytes, now - started, info, now))
        return result

    return cast(F, reporting)


def reporting_done(
    hook: RequestHook,
    operation: str,
    key: str,
    nbytes: int,
    done: Callable[[R | None, BaseException | None], None],
) -> Callable[[R | None, BaseException | None], None]:
    """``done`` of a submitted ``put`` or ``get``, reporting the request first."""
    attempt = ATTEMPT.get()
    started = time.monotonic()

    def reported_done(result: R | None, error: BaseException | None) -> None:
        if isinstance(error, StorePausedError):  # not sent: no request to report
            done(result, error)
            return
        if error is not None:
            outcome, info, sent = outcome_of(error), None, 0
        elif operation == "put":
            outcome, info, sent = ("created" if result else "exists"), None, nbytes
        else:
            outcome, info, sent = "ok", cast(ObjectInfo | None, result), nbytes
        now = time.monotonic()
        hook(RequestEvent(operation, key, outcome, attempt, sent, now - started, info, now))
        done(result, error)

    return reported_done
