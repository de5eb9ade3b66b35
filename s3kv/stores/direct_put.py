"""One block's PUT on the direct data path (:mod:`.direct`): the kernel sends the body
straight from the caller's buffer (OpenSSL encrypts from it over TLS).

The answer is checked as on every data path (:meth:`Answer.stored`: an ETag, and the
store's checksum echo must be ours where it sends one); 412 to a create-only PUT means
the object was there (``done(False, None)``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from s3kv.errors import TransferCancelledError
from s3kv.stores.base import PutOptions
from s3kv.stores.crt_request import AlreadyExists, Answer, translate_status
from s3kv.stores.direct import PutDone
from s3kv.stores.wire import Link, keep_alive, mapped, read_head, read_small_body, signed_request

if TYPE_CHECKING:
    from s3kv.stores.direct import Direct


class PutTask:
    """A PUT of ``body`` at ``key`` with ``headers`` (conditions, checksum, metadata,
    tags); ``options`` is what the answer is checked against."""

    def __init__(
        self,
        key: str,
        where: str,
        body: memoryview,
        headers: list[tuple[str, str]],
        options: PutOptions,
        done: PutDone,
    ) -> None:
        self.key, self.where, self.body, self.headers = key, where, body, headers
        self.options, self._done = options, done
        self.cancelled = False
        self._lock = threading.Lock()
        self._link: Link | None = None

    def watch(self, link: Link) -> None:
        with self._lock:
            self._link = link
            cancelled = self.cancelled
        if cancelled:
            link.shutdown()

    def unwatch(self, link: Link) -> None:
        with self._lock:
            self._link = None

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            link = self._link
        if link is not None:
            link.shutdown()

    def run(self, direct: Direct) -> None:
        try:
            if self.cancelled:
                raise TransferCancelledError(f"PUT {self.where}: cancelled")
            created = direct.exchange(
                self, f"PUT {self.where}", lambda link: self._put(link, direct)
            )
        except AlreadyExists:
            self._done(False, None)
        except BaseException as exc:  # reported, never lost
            url = direct.endpoint.url
            self._done(None, mapped(exc, "PUT", self.where, url, direct.settings))
        else:
            self._done(created, None)

    def _put(self, link: Link, direct: Direct) -> tuple[bool, bool]:
        headers = dict(self.headers)
        headers["Content-Length"] = str(len(self.body))
        link.send(signed_request("PUT", direct.endpoint, self.key, direct.credentials, headers))
        link.send(self.body)
        status, answer_headers, rest = read_head(link)
        body = read_small_body(link, answer_headers, rest)
        if status >= 300:
            raise translate_status(status, body, answer_headers, "PUT", self.where)
        answer = Answer(self.key)
        answer.read(status, answer_headers, keep=True)
        answer.stored(self.where, direct.endpoint.url, self.options)
        return True, keep_alive(answer_headers)
