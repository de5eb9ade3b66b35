"""The messages between EngineCore's tier and its data path: an order per job, a reply per job.

An order names its blocks by OffloadKey and chunk (the row of the primary tier), and the
tenant whose prefix they belong to; the data path maps them to object keys and rows
itself. A reply comes once every request that touched the job's rows has ended, and
carries what EngineCore's side acts on: the job's report, every request the data path
sent since the last reply (the tier's one request hook counts them, renews what loads
found and feeds the store's health), and :class:`Note` s of what its loads and writes
met. Everything here pickles into a few hundred bytes per block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from s3kv.naming.keys import KeyStyle
from s3kv.naming.namespace import Namespace
from s3kv.report import TransferReport
from s3kv.settings import S3Settings
from s3kv.stores.base import RequestEvent
from s3kv.transfers.uploader import MANIFEST_RECHECK_SECONDS

NoteKind = Literal["damaged", "unverified", "unverified_refused", "write_refused"]


@dataclass(frozen=True, slots=True)
class PathConfig:
    """What a data path is made of: the tier's location, namespace and settings."""

    url: str
    namespace: Namespace
    settings: S3Settings
    """The tier's, resolved in EngineCore (the worker reads no tier entry of its own)."""
    style: KeyStyle
    concurrency: int
    """Loads in flight per job; a store job keeps twice as many."""
    wait_seconds: float
    """How long a load may retry (the request's wait budget)."""
    row_bytes: int
    require_checksum: bool = False
    vllm_version: str | None = None
    manifest_recheck_seconds: float = MANIFEST_RECHECK_SECONDS
    """How often a store looks for the manifest again (EngineCore's uploader's)."""


@dataclass(frozen=True, slots=True)
class Order:
    """One vLLM job: load objects into rows, or store rows as objects."""

    job_id: int
    kind: Literal["load", "store"]
    keys: tuple[bytes, ...]
    chunks: tuple[int, ...]
    """The row of each key (vLLM's chunk id)."""
    tenant: str | None = None
    deadline: float | None = None
    """``time.monotonic()`` (one clock for every process of the host) at which a load
    still running is cancelled: its request's wait budget."""
    parents: Mapping[bytes, bytes] = field(default_factory=dict)
    """A store's keys to their parents' (written with the blocks)."""
    replace: Mapping[bytes, str] = field(default_factory=dict)
    """A store's keys whose stored copy is known damaged, to that copy's ETag: the
    write replaces exactly it (``If-Match``)."""
    manifest: bytes | None = None
    """A store's: the manifest EngineCore's side found or wrote under the tenant's prefix
    (the data path then writes none before the blocks; it re-checks it as usual)."""


@dataclass(frozen=True, slots=True)
class Note:
    """Something a job's requests met that the tier acts on (counts, remembers, logs)."""

    kind: NoteKind
    object_key: str = ""
    detail: str = ""
    """``damaged``: the bad copy's ETag; ``write_refused``: why."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A job ended: every request that touched its rows has ended."""

    job_id: int
    report: TransferReport | None
    """None: the job never started (``error`` says why)."""
    error: str = ""
    expired: bool = False
    """Cancelled when its deadline passed."""
    notes: tuple[Note, ...] = ()
    events: tuple[RequestEvent, ...] = ()
    """The data path's requests that ended since its last reply, in order."""


@dataclass(frozen=True, slots=True)
class Hello:
    """The worker's first message: what to map and what to run."""

    config: PathConfig
    region: object
    """A :class:`s3kv.worker.region.RegionPlan`."""
    log_level: int


@dataclass(frozen=True, slots=True)
class Ready:
    """The worker's first answer: it maps the rows and runs (``error`` empty), or why not."""

    pid: int
    error: str = ""


CANCEL_ALL = "cancel_all"
"""Cancel every running job (the store's breaker opened)."""
SHUTDOWN = "shutdown"
"""``(SHUTDOWN, timeout)``: cancel, wait for every request to end, exit."""
PING, PONG = "ping", "pong"
"""``(PING, t)`` while the engine waits on jobs and hears nothing: ``(PONG, t)`` says the
process still runs."""
