"""What a batch transfer did, block by block."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from s3kv.errors import TransferError


@dataclass(frozen=True, slots=True, repr=False)
class TransferReport:
    """The outcome of one batch. Keys are vLLM OffloadKeys (``bytes``).

    A key is in exactly one of ``done``, ``already_present``, ``missing`` or ``failed``.
    A block that failed never shows as done. ``unverified_keys`` is no fifth outcome but
    a property of some done ones: blocks loaded from S3 that carried no recorded checksum
    (vLLM's object-store tier writes none), so only their size was checked. A directory
    records no checksum by design: blocks loaded from one are not counted.
    """

    operation: Literal["upload", "download"]
    done: tuple[builtins.bytes, ...] = ()
    """Stored (upload) or loaded and verified (download)."""
    already_present: tuple[builtins.bytes, ...] = ()
    """Upload: the object existed already (create-only), so it was left alone."""
    missing: tuple[builtins.bytes, ...] = ()
    """Download: no such object."""
    failed: Mapping[builtins.bytes, str] = field(default_factory=dict)
    """Why each failed key failed."""
    bytes: int = 0
    """Payload bytes moved."""
    seconds: float = 0.0
    unverified: int = 0
    """Download: how many done blocks came from S3 without a recorded checksum
    (size-checked only)."""
    unverified_keys: tuple[builtins.bytes, ...] = ()
    """Download: those blocks (a subset of ``done``)."""
    data: Mapping[builtins.bytes, builtins.bytes] = field(default_factory=dict)
    """Download without ``into``: the blocks' bytes."""

    @property
    def stored(self) -> tuple[builtins.bytes, ...]:
        return self.done

    @property
    def loaded(self) -> tuple[builtins.bytes, ...]:
        return self.done

    @property
    def ok(self) -> bool:
        """True when every key is done or already present."""
        return not self.failed and not self.missing

    @property
    def count(self) -> int:
        return len(self.done) + len(self.already_present) + len(self.missing) + len(self.failed)

    def summary(self) -> str:
        rate = self.bytes / self.seconds / 2**20 if self.seconds > 0 else 0.0
        verb = "stored" if self.operation == "upload" else "loaded"
        parts = [f"{len(self.done)} {verb}"]
        if self.operation == "upload":
            parts.append(f"{len(self.already_present)} already present")
        else:
            parts.append(f"{len(self.missing)} missing")
        parts.append(f"{len(self.failed)} failed")
        if self.unverified:
            parts.append(f"{self.unverified} unverified (no recorded checksum; size checked)")
        mib = self.bytes / 2**20
        return f"{', '.join(parts)}; {mib:.1f} MiB in {self.seconds:.2f}s ({rate:.1f} MiB/s)"

    def __str__(self) -> str:
        """``print(report)`` gives :meth:`summary`, not thousands of raw keys."""
        return self.summary()

    def __repr__(self) -> str:
        """Counts, the first failures and the timing: bounded whatever the batch size."""
        failed = [f"{k.hex()[:16]}...: {why[:80]}" for k, why in list(self.failed.items())[:3]]
        rest = len(self.failed) - len(failed)
        more = f" (+{rest} more)" if rest else ""
        return (
            f"TransferReport(operation={self.operation!r}, done={len(self.done)}, "
            f"already_present={len(self.already_present)}, missing={len(self.missing)}, "
            f"failed={len(self.failed)}{': ' + '; '.join(failed) + more if failed else ''}, "
            f"bytes={self.bytes}, seconds={self.seconds:.3f}, unverified={self.unverified})"
        )

    def raise_for_failures(self) -> None:
        """Raise :class:`TransferError` naming the first failures, if any key failed."""
        if self.failed:
            first = "; ".join(f"{k.hex()}: {why}" for k, why in list(self.failed.items())[:3])
            raise TransferError(f"{len(self.failed)} of {self.count} blocks failed: {first}")
