"""A namespace's ``config.json``: the one strict parser (bounded in bytes, depth and
digits), and the record s3kv adds to the manifests it writes (:class:`Provenance`).

A manifest comes from a bucket or a directory anyone may have written to, so it is
parsed as hostile input. vLLM's FileMapper writes a few hundred bytes to a few dozen KiB
(one ``layer_names`` entry per attention layer); everything here is far above that and
far below what could hurt a process:

* at most :data:`MAX_MANIFEST_BYTES` bytes (readers fetch one byte more than that and
  stop, so a 100 MB object never reaches memory);
* UTF-8 JSON, one object, no duplicate names, no ``NaN``/``Infinity``;
* nested at most :data:`MAX_MANIFEST_DEPTH` levels (vLLM's is 4);
* numbers of at most :data:`MAX_NUMBER_CHARS` characters.

Anything else raises :class:`s3kv.ManifestError`, never a ``RecursionError`` or a
``ValueError`` from the JSON decoder.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from s3kv.errors import ManifestError

MAX_MANIFEST_BYTES = 1024 * 1024
"""The largest ``config.json`` s3kv reads (1 MiB)."""
MAX_MANIFEST_DEPTH = 32
"""Nesting levels of arrays and objects allowed in a manifest."""
MAX_NUMBER_CHARS = 100
"""Characters allowed in one JSON number (Python refuses ints past 4,300 digits)."""


def parse_manifest(
    data: bytes | bytearray | memoryview | str | Mapping[str, Any],
) -> dict[str, Any]:
    """The fields of a manifest, parsed strictly; :class:`ManifestError` if unacceptable."""
    if isinstance(data, Mapping):
        fields = dict(data)
    else:
        if isinstance(data, str):
            if len(data) > MAX_MANIFEST_BYTES:
                raise too_large()
            raw = data.encode("utf-8", "surrogatepass")
        else:
            raw = bytes(data)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise too_large()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(
                f"manifest is not valid JSON: not UTF-8 ({exc.reason} at byte {exc.start})"
            ) from None
        loaded = _loads(text)
        if not isinstance(loaded, dict):
            raise ManifestError(f"manifest must be a JSON object; got {_json_type(loaded)}")
        fields = loaded
    _check_shape(fields)
    return fields


def too_large() -> ManifestError:
    return ManifestError(
        f"manifest is larger than {MAX_MANIFEST_BYTES} bytes (the most s3kv reads); vLLM "
        "writes a few KiB: this one was not written by vLLM's FileMapper or s3kv"
    )


def _loads(text: str) -> Any:
    try:
        return json.loads(
            text,
            object_pairs_hook=_object,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
        )
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest is not valid JSON: {exc}") from None
    except RecursionError:
        # The C decoder recurses per level; fail as "too deep" before the stack does.
        raise ManifestError(_too_deep()) from None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise ManifestError(f"manifest names {name[:80]!r} twice in one object")
        out[name] = value
    return out


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ManifestError(
            f"manifest holds a number of {len(text)} digits (most: {MAX_NUMBER_CHARS})"
        )
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ManifestError(
            f"manifest holds a number of {len(text)} characters (most: {MAX_NUMBER_CHARS})"
        )
    value = float(text)
    if not math.isfinite(value):
        raise ManifestError(f"manifest holds {text[:40]!r}, which is not a finite number")
    return value


def _constant(text: str) -> Any:
    raise ManifestError(f"manifest holds {text}, which is not JSON")


def _check_shape(fields: dict[str, Any]) -> None:
    """Depth, names and numbers of an already-parsed value, without recursion."""
    stack: list[tuple[Any, int]] = [(fields, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_MANIFEST_DEPTH:
                raise ManifestError(_too_deep())
            if isinstance(value, dict):
                for name in value:
                    if not isinstance(name, str):
                        raise ManifestError(f"manifest field name {name!r} is not a string")
                children: list[Any] = list(value.values())
            else:
                children = list(value)
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        elif isinstance(value, int):
            if value.bit_length() > MAX_NUMBER_CHARS * 3.33:
                raise ManifestError(
                    f"manifest holds an integer of more than {MAX_NUMBER_CHARS} digits"
                )
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ManifestError(f"manifest holds {value}, which is not a finite number")
        else:
            raise ManifestError(f"manifest holds a {type(value).__name__}, which is not JSON")


def _too_deep() -> str:
    return f"manifest is nested deeper than {MAX_MANIFEST_DEPTH} levels (vLLM's has 4)"


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# -- s3kv's record of who wrote a manifest ------------------------------------------------

PROVENANCE_FIELD = "s3kv"
"""The one field s3kv adds to the manifests it writes: ``{"created", "s3kv_version",
"vllm_version"}``. vLLM never reads ``config.json`` back (its FileMapper hashes the run
config it was built with), and s3kv leaves this field out of the namespace's fields, so
the folder's digest is the same with it or without it."""
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Provenance:
    """When s3kv created a manifest, and with which s3kv and vLLM (None: not recorded,
    or not written by s3kv's vLLM tier)."""

    created: datetime | None
    s3kv_version: str | None
    vllm_version: str | None = None

    @classmethod
    def now(cls, *, vllm_version: str | None = None) -> Provenance:
        from s3kv import __version__

        created = datetime.now(timezone.utc).replace(microsecond=0)
        return cls(created, __version__, vllm_version)

    def as_field(self) -> dict[str, str | None]:
        created = self.created.strftime("%Y-%m-%dT%H:%M:%SZ") if self.created else None
        return {
            "created": created,
            "s3kv_version": self.s3kv_version,
            "vllm_version": self.vllm_version,
        }


def with_provenance(run_config: Mapping[str, Any], provenance: Provenance) -> bytes:
    """A manifest as s3kv writes it: vLLM's ``config.json`` layout (indent 2, sorted keys,
    no trailing newline) holding the run config and :data:`PROVENANCE_FIELD`."""
    if PROVENANCE_FIELD in run_config:
        raise ManifestError(f"a run config cannot hold the field {PROVENANCE_FIELD!r}")
    fields = {**run_config, PROVENANCE_FIELD: provenance.as_field()}
    return json.dumps(fields, indent=2, sort_keys=True).encode("utf-8")


def split_provenance(fields: Mapping[str, Any]) -> tuple[dict[str, Any], Provenance | None]:
    """The run config (what is hashed) and s3kv's record, if it holds a usable one.

    The record is read leniently, as it names no key: a value that is not what s3kv
    writes (a version that is no version, a time that is no RFC 3339 time) reads as not
    recorded; nothing from it reaches a terminal but version-like words and a time.
    """
    run_config = {k: v for k, v in fields.items() if k != PROVENANCE_FIELD}
    record = fields.get(PROVENANCE_FIELD)
    if not isinstance(record, Mapping):
        return run_config, None
    return run_config, Provenance(
        created=_time(record.get("created")),
        s3kv_version=_version(record.get("s3kv_version")),
        vllm_version=_version(record.get("vllm_version")),
    )


def read_provenance(data: bytes) -> Provenance | None:
    """s3kv's record in a stored manifest; None if it holds none (vLLM wrote it, or an
    older s3kv) or cannot be parsed (the manifest's own check reports that)."""
    try:
        return split_provenance(parse_manifest(data))[1]
    except ManifestError:
        return None


def _version(value: Any) -> str | None:
    return value if isinstance(value, str) and _VERSION.match(value) else None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
