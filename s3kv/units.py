"""Durations (``7d``, ``30m``) and sizes (``500GiB``, ``1.5TB``): read from flags, written out."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import TypeVar

from s3kv.errors import InvalidInputError

T = TypeVar("T")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_duration(text: str) -> float:
    """Seconds in ``30s``, ``30m``, ``12h``, ``7d``, ``2w`` (a bare number is seconds)."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidInputError(
            f"{text!r} is not a duration; use a number and a unit: 30s, 30m, 12h, 7d, 2w"
        )
    seconds = float(match[1]) * _SECONDS[(match[2] or "s").lower()]
    if not math.isfinite(seconds):
        raise InvalidInputError(f"{text!r} is too long a duration; use e.g. 30d or 2w")
    return seconds


def parse_size(text: str) -> int:
    """Bytes in ``500GiB`` (binary), ``1.5TB``/``10G`` (decimal) or a bare byte count."""
    match = _SIZE.match(text)
    if not match or (match[3] and not match[2]):
        raise InvalidInputError(
            f"{text!r} is not a size; use a number and a unit: 500GiB, 10G, 1.5TB, 4096"
        )
    base = 1024 if match[3] else 1000
    size = float(match[1]) * base ** _POWERS[match[2].lower()]
    if not math.isfinite(size):
        raise InvalidInputError(f"{text!r} is too large a size; use e.g. 500GiB or 10T")
    return int(size)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_age(seconds: float) -> str:
    """A duration in the units the flags take: ``45s``, ``12m``, ``5h``, ``3d``, ``6w``."""
    seconds = max(seconds, 0.0)  # a clock ahead of the store's is not a negative age
    for unit, limit in (("s", 90), ("m", 90 * 60), ("h", 48 * 3600), ("d", 14 * 86400)):
        if seconds < limit:
            return f"{seconds / _SECONDS[unit]:.0f}{unit}"
    return f"{seconds / _SECONDS['w']:.0f}w"


def elide_middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by replacing its middle with ``...``."""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    tail = (width - 3) // 2
    return text[: width - 3 - tail] + "..." + text[len(text) - tail :]


def flag_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type=`` that reports our message (argparse keeps only its own)."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except InvalidInputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert
