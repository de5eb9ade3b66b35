"""What an answer echoes of its request: how s3kv knows an answer is its own request's.

On a kept-alive connection that lost its framing (a desynchronised connection, a proxy
that replays or fakes answers) an answer can be another request's. Each request carries
something its answer must give back: a GET its token (:func:`request_token`, sent as
``response-cache-control``, echoed as ``Cache-Control``); a PUT its checksum (echoed by
AWS and MinIO), its ETag (remembered per store, so a replayed answer is told) and, on
stores whose ETags are the MD5 of what they stored, that MD5. :class:`Echoes` learns
per store what it echoes and refuses what does not fit (:mod:`.rules` says what a
refusal means: a transient error, retried on a fresh connection).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

import s3kv.integrity as integrity
from s3kv.errors import TransientStoreError
from s3kv.integrity import Buffer
from s3kv.settings import display_url
from s3kv.stores.base import PutOptions
from s3kv.stores.rules import not_s3, stale_answer


class Echoes:
    """What a store echoes back, learnt from its answers (one per store).

    A PUT that sends ``x-amz-checksum-crc32c`` is answered with that checksum by AWS and
    MinIO: an answer with another value is damage on the way, and, once the store has
    echoed it, an answer without it is not the store's answer to this write (a stale
    answer on a desynchronised connection, or a middlebox that fakes answers). A GET
    sends a token of its own (``response-cache-control``, which S3, Ceph RGW and MinIO
    echo as ``Cache-Control``): an answer without our token is some other request's, and
    its bytes never count as this block's. On every store, a PUT answered with the ETag
    an earlier write of other bytes got is a replayed answer (a single-part object's ETag
    is its bytes' MD5). Until a store has echoed, only the framing of its answers (kept by
    the HTTP client) and the ETag memory vouch for them.
    """

    __slots__ = (
        "_etags", "_lock", "_md5_misses", "_unechoed", "bodies", "checksum", "keys_named",
        "md5", "on_foreign", "token",
    )  # fmt: skip

    def __init__(self, on_foreign: Callable[[object], None] | None = None) -> None:
        self.checksum = False
        self.token: bool | None = None
        """The store echoes a GET's token: None until it showed either way. While None,
        an answer without our token is not taken as ours (it could be a stale answer to
        a PUT or a HEAD, which carry none): it is retried on a fresh connection, and after
        :data:`_TOKEN_TRIES` such answers in a row the store is known to echo none."""
        self._unechoed = 0
        self.keys_named = False
        """The store's 404s name the key asked (AWS, MinIO, moto; Ceph RGW names none)."""
        self.bodies = False
        """The store's 404s to a GET carry an error body (every S3 store's do)."""
        self.md5: bool | None = None
        """The store's ETags are its bodies' MD5 (S3, Ceph RGW, MinIO and moto without
        KMS encryption); None until an answer showed it, False once it seems not so."""
        self._md5_misses = 0
        self.on_foreign = on_foreign
        """Called when an answer was another request's: the client retires connections.
        Its argument is what carried the request (the ``carrier`` the check was given),
        so a client retires that one and not a fresh one that replaced it."""
        self._etags: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def foreign(self, error: TransientStoreError, carrier: object = None) -> TransientStoreError:
        """``error``, after the client was told to retire its kept-alive connections (those
        of ``carrier``, what carried the request, when the client knows it)."""
        if self.on_foreign is not None:
            self.on_foreign(carrier)
        return error

    def check_stored(
        self,
        where: str,
        endpoint: str,
        *,
        etag: str | None,
        options: PutOptions,
        echoed: str | None,
        carrier: object = None,
        body: Buffer | None = None,
        md5: str | None = None,
    ) -> None:
        """A PUT's answer must say the object was written: an ETag, and the checksum
        sent where the store echoes one (Ceph RGW 16 and moto echo none).

        Call it as soon as the answer's headers are in, before the connection can carry
        another request: the ETag is remembered here, and a replayed copy of this answer
        on the next request must find it. A write without a checksum (a manifest, a
        lease) is known by its ``body``'s CRC32C: a replay of its answer is refused too.
        ``md5`` is the body's, when :meth:`md5_of` took it before the request went out."""
        if not etag:
            raise not_s3("PUT", where, endpoint, "200 without an ETag")
        if md5 is not None and not self.checksum:
            self._check_md5(where, endpoint, etag, md5, carrier)
        ours = options.checksum
        if ours is None and body is not None and len(memoryview(body)) <= _UNCHECKED_MAX:
            ours = integrity.compute("crc32c", body)
        if ours is None:
            return
        with self._lock:
            other = self._etags.get(etag)
        if other is not None and other != ours.value:  # another write's answer, replayed
            raise self.foreign(TransientStoreError(
                f"PUT {where}: {display_url(endpoint)} answered with the ETag of another "
                "write (a stale answer on the connection, or a proxy replaying answers); "
                "retried"
            ), carrier)
        if options.checksum is None:
            pass  # nothing was sent to echo
        elif echoed:
            self.checksum = True
            if echoed != ours.value:
                # S3 refuses a body whose checksum is not the one sent (BadDigest), so
                # this answer is not the store's to this write: retried, and the retry's
                # 412 is settled by the object's write token (s3kv.transfers.writes).
                raise self.foreign(TransientStoreError(
                    f"PUT {where}: the answer names {ours.algorithm} {echoed}, not the "
                    f"{ours.value} sent: not the store's answer to this write (a stale "
                    "answer, or a proxy that answers for the store); retried"
                ), carrier)
        elif self.checksum:
            raise self.foreign(TransientStoreError(
                f"PUT {where}: {display_url(endpoint)} answered without the checksum it "
                "echoes to every write: not the answer to this write (a stale answer, or a "
                "proxy that answers for the store); retried"
            ), carrier)
        with self._lock:
            self._etags[etag] = ours.value
            if len(self._etags) > _ETAGS_KEPT:
                self._etags.popitem(last=False)

    def md5_of(self, body: Buffer) -> str | None:
        """The MD5 a PUT of ``body`` is checked by (:meth:`check_stored`), or None where it
        needs none (the store echoes checksums, or its ETags are not MD5s). Taken by the
        caller before the request goes out, never on the client's event loop; hashlib lets
        go of the GIL. It costs about 1.8 s of one core per GiB (bench/evidence/
        md5-vs-crc32c.json), on stores that echo no checksum."""
        if self.checksum or self.md5 is False:
            return None
        return hashlib.md5(body, usedforsecurity=False).hexdigest()

    def _check_md5(self, where: str, endpoint: str, etag: str, ours: str, carrier: object) -> None:
        """On a store that echoes no checksum, a PUT's answer says nothing of the request
        but its ETag, the MD5 of the bytes stored: once the store's ETags have shown to be
        that, an ETag of other bytes is another write's answer, even one its own request
        never saw (left over on a desynchronised connection)."""
        if etag.strip('"').lower() == ours:
            self.md5 = True
            return
        if self.md5:
            raise self.foreign(TransientStoreError(
                f"PUT {where}: {display_url(endpoint)} answered with the ETag of other bytes "
                "(its ETags are the MD5 of what it stored): not the answer to this write (a "
                "stale answer on the connection, or a proxy replaying answers); retried"
            ), carrier)
        with self._lock:
            self._md5_misses += 1
            if self._md5_misses >= _MD5_TRIES:
                self.md5 = False  # KMS-encrypted, or another scheme: the ETag tells nothing

    def check_token(self, operation: str, where: str, endpoint: str, token: str,
                    cache_control: str | None, carrier: object = None, *,
                    ranged: bool = False) -> None:
        """A GET's answer must carry the token its request sent (see :attr:`token`).

        ``ranged``: the answer was found to be exactly the range its request asked
        (``Content-Range``). Only such an answer without a token can show that the store
        echoes none: a stale answer to a PUT, a HEAD or a whole-object GET cannot pass
        for one, so stale answers never teach that."""
        if cache_control == token:
            with self._lock:
                self.token, self._unechoed = True, 0
            return
        if not (cache_control or "").startswith(TOKEN_PREFIX):
            with self._lock:
                if self.token is None and ranged:
                    self._unechoed += 1
                    if self._unechoed >= _TOKEN_TRIES:
                        self.token = False  # it echoes none: the framing vouches alone
                echoes = self.token is not False
            if not echoes:
                return
        raise self.foreign(TransientStoreError(
            f"{operation} {where}: the answer is not this request's (its token is "
            f"{cache_control or 'missing'}): a stale answer on the connection, or a "
            "proxy that answers for the store; retried on a fresh connection"
        ), carrier)

    def check_missing(self, operation: str, where: str, key: str, named: str | None,
                      carrier: object = None) -> bool:
        """Whether a 404 to a GET of ``key`` is bound to its request: it names ``key``.

        ``named`` is the key its error body names ("" for none, None for no body at all).
        A 404 naming another key, or, from a store whose 404s name theirs (or carry a
        body), one naming none, is another request's answer: the foreign
        :class:`TransientStoreError`, raised. False when the store's 404s name no key
        (Ceph RGW): nothing in the answer tells, and a caller that acts on the absence
        confirms it (:meth:`s3kv.stores.S3Store.head` lists exactly that key)."""
        if named:
            if named == key:
                self.keys_named = self.bodies = True
                return True
            problem = f"answered 404 for another key ({named})"
        elif named is None:
            if not self.bodies:
                return False
            problem = "answered 404 without the error body its 404s carry"
        elif not self.keys_named:
            self.bodies = True
            return False
        else:
            problem = "answered 404 without naming the key, as its 404s do"
        raise self.foreign(stale_answer(operation, where, f"the store {problem}"), carrier)


_TOKEN_TRIES = 3
"""Answers without a token, before any with one, that show a store echoes none."""

_MD5_TRIES = 8
"""Answers whose ETag is not their body's MD5 before s3kv stops comparing them."""

_UNCHECKED_MAX = 1024 * 1024
"""The largest write without a checksum whose CRC32C is taken to know its answer by."""

_ETAGS_KEPT = 4096
"""PUT answers' ETags remembered per store, to tell a replayed answer."""

TOKEN_PARAMETER = "response-cache-control"
TOKEN_PREFIX = "s3kv-"
_tokens = itertools.count(1)
_process = os.urandom(4).hex()


def request_token() -> str:
    """A token unique to one request of this process (echoed as ``Cache-Control``)."""
    return f"{TOKEN_PREFIX}{_process}-{next(_tokens):x}"
