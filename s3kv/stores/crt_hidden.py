"""What awscrt hides from s3kv, asked through boto3 (the same endpoint, CA bundle, proxy
and credentials): why a TLS connection failed, and how long a throttling store asks
every request to wait.

* awscrt holds a failed TLS handshake 10-30 s (s2n's blinding delay), past the request's
  timeouts, so an unknown CA shows only as silence, and plain HTTP on the port as a closed
  socket. The first request over TLS that got no answer is diagnosed by one HEAD of the
  same key through boto3, once per store (a HEAD for its failure only, which the policies
  that allowed the request allow).
* awscrt retries a 500 or a 503 itself and reports it without its answer, so the store's
  ``Retry-After`` is lost. One HEAD through boto3, once per throttling episode, on a thread
  of its own, asks the store: its ``Retry-After`` extends the pause every request of the
  store keeps (:class:`s3kv.retry.Pacer`).
"""

from __future__ import annotations

import threading
from typing import Any

from botocore.exceptions import ClientError, ProxyConnectionError, SSLError

from s3kv.retry import unpaced
from s3kv.stores.errors import short
from s3kv.stores.rules import retry_after


class Hidden:
    """The questions one awscrt store asks boto3 (:class:`s3kv.stores.crt.CrtS3Store`)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._tls: list[BaseException | None] = []
        self._asked = 0  # the throttling episode whose Retry-After was asked

    def tls_problem(self, method: str, where: str, key: str) -> BaseException | None:
        """Why a first request over TLS got no answer, if TLS is why; None otherwise."""
        store = self.store
        with self._lock:
            if not self._tls:
                try:
                    store.client.head_object(Bucket=store.bucket, Key=key)
                    found: BaseException | None = None
                except SSLError as exc:
                    found = store.network.tls_failed(method, where, short(exc))
                except ProxyConnectionError as exc:  # an https:// proxy it cannot trust
                    found = store.network.unreachable(method, where, short(exc))
                except Exception:
                    found = None
                self._tls.append(found)
            return self._tls[0]

    def ask_pace(self, key: str) -> None:
        """Ask the store how long to wait, once for the current throttling episode."""
        store = self.store
        with self._lock:
            if self._asked == store.pacer.pauses:
                return
            self._asked = store.pacer.pauses

        def ask() -> None:
            try:
                with unpaced():  # the pause it asks about does not hold the question
                    store.client.head_object(Bucket=store.bucket, Key=key)
            except ClientError as exc:
                headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders") or {}
                asked = retry_after(headers.items())
                if asked is not None:
                    store.pacer.throttled(asked)
            except Exception:
                pass

        threading.Thread(target=ask, name="s3kv-pace", daemon=True).start()
