"""vLLM's storage namespace: the run config that names a cache folder.

A :class:`Namespace` holds the same fields vLLM 0.33.0's ``FileMapper`` hashes, and
hashes them the same way: ``sha256(json.dumps(fields, sort_keys=True,
separators=(",", ":")))[:12]``. One field hashed differently and a whole cache silently
misses, so every field is validated strictly (no ``"16"`` for ``16``, no ``True`` for
``1``): vLLM would hash the value it was given, not the one we might coerce it to.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from s3kv.errors import InvalidNamespaceError, ManifestError, describe_value
from s3kv.naming.manifest import PROVENANCE_FIELD, parse_manifest, split_provenance

DIGEST_LENGTH = 12
"""Hex characters of the sha256 that name a namespace folder (vLLM's _BASE_PATH_HASH_LEN)."""

CONFIG_FILENAME = "config.json"

# Fields vLLM 0.33.0 always hashes, and the optional ones it adds only when they differ
# from the historical default (so that existing digests never change).
_BASE_FIELDS = (
    "model_name",
    "tokens_per_hash",
    "blocks_per_file",
    "tp_size",
    "pp_size",
    "pcp_size",
    "dcp_size",
    "dtype",
    "kv_cache_groups",
    "inference_engine",
)
_OPTIONAL_FIELDS = (
    "parallel_agnostic",
    "replicated_layout",
    "canonical_format",
    "storage_format",
)
_KNOWN_FIELDS = frozenset(_BASE_FIELDS + _OPTIONAL_FIELDS)


class KVCacheGroup(BaseModel):
    """One KV-cache group of the run config: its block size and the layers it covers."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    tokens_per_block: int = Field(gt=0)
    layer_names: tuple[str, ...]

    def as_field(self) -> dict[str, Any]:
        return {"tokens_per_block": self.tokens_per_block, "layer_names": list(self.layer_names)}


class Namespace(BaseModel):
    """An immutable, validated vLLM run config: the identity of one cache folder.

    Constructed with the same keywords as vLLM's ``FileMapper`` (without ``root_dir``)::

        ns = Namespace(model_name="meta-llama/Llama-3.1-8B", tokens_per_hash=16,
                       dtype="bfloat16")
        ns.digest   # 12 hex characters
        ns.folder   # "meta-llama_Llama-3.1-8B_<digest>"
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    model_name: str = Field(min_length=1)
    tokens_per_hash: int = Field(gt=0)
    dtype: str = Field(min_length=1)
    blocks_per_file: int = Field(default=1, gt=0)
    tp_size: int = Field(default=1, gt=0)
    pp_size: int = Field(default=1, gt=0)
    pcp_size: int = Field(default=1, gt=0)
    dcp_size: int = Field(default=1, gt=0)
    rank: int = Field(default=0, ge=0)
    """The rank in block keys; 0 when parallel-agnostic (rank is not hashed)."""
    kv_cache_groups: tuple[KVCacheGroup, ...] = ()
    inference_engine: str = Field(default="vllm", min_length=1)
    parallel_agnostic: bool = False
    replicated_layout: bool = False
    canonical_format: str | None = Field(default=None, min_length=1)
    storage_format: str | None = Field(default=None, min_length=1)
    """vLLM's development branch hashes ``offloading_spec.storage_format`` (when not None)."""
    extra_fields: Mapping[str, Any] = Field(default_factory=dict)
    """Hashed fields unknown to vLLM 0.33.0, kept from a newer vLLM's manifest."""

    _fields: dict[str, Any] = PrivateAttr()
    _fields_json: str = PrivateAttr()
    _digest: str = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        if "dtype" in data and data["dtype"] is not None and not isinstance(data["dtype"], str):
            data["dtype"] = str(data["dtype"])  # vLLM hashes str(dtype), whatever it is
        if data.get("kv_cache_groups") is None:
            data.pop("kv_cache_groups", None)
        else:
            data["kv_cache_groups"] = _groups_from(data["kv_cache_groups"])
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidNamespaceError(_explain(exc)) from None

    def model_post_init(self, context: Any, /) -> None:
        if self.parallel_agnostic:
            # As vLLM: parallel layouts collapse into one folder, written as rank 0.
            for name in ("tp_size", "pp_size", "pcp_size", "dcp_size"):
                self.__dict__[name] = 1
            self.__dict__["rank"] = 0
        if self.model_name.replace("/", "_") in ("", ".", ".."):
            raise InvalidNamespaceError(
                f"model_name {self.model_name!r} cannot name a folder; use the model's id"
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in self.model_name):
            raise InvalidNamespaceError(
                f"model_name {describe_value(self.model_name)} contains control characters"
            )
        clash = _KNOWN_FIELDS.intersection(self.extra_fields)
        if clash:
            raise InvalidNamespaceError(
                f"extra_fields may only hold fields unknown to vLLM 0.33.0; got {sorted(clash)}"
            )
        if PROVENANCE_FIELD in self.extra_fields:
            raise InvalidNamespaceError(
                f"extra_fields cannot hold {PROVENANCE_FIELD!r}: s3kv's own record in the "
                "manifests it writes, never hashed"
            )
        fields = self._hashed_fields()
        self._fields = fields
        try:
            self._fields_json = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise InvalidNamespaceError(f"extra_fields must be JSON values: {exc}") from None
        digest = hashlib.sha256(self._fields_json.encode("utf-8")).hexdigest()
        self._digest = digest[:DIGEST_LENGTH]

    def _hashed_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "model_name": self.model_name,
            "tokens_per_hash": self.tokens_per_hash,
            "blocks_per_file": self.blocks_per_file,
            "tp_size": self.tp_size,
            "pp_size": self.pp_size,
            "pcp_size": self.pcp_size,
            "dcp_size": self.dcp_size,
            "dtype": self.dtype,
            "kv_cache_groups": [group.as_field() for group in self.kv_cache_groups],
            "inference_engine": self.inference_engine,
        }
        if not self.parallel_agnostic:
            fields["parallel_agnostic"] = False
        # Only present when set, as in vLLM, so existing deployments' digests are unchanged.
        if self.replicated_layout:
            fields["replicated_layout"] = True
        if self.canonical_format is not None:
            fields["canonical_format"] = self.canonical_format
        if self.storage_format is not None:
            fields["storage_format"] = self.storage_format
        fields.update(self.extra_fields)
        return fields

    # -- identity ---------------------------------------------------------------------

    @property
    def fields(self) -> dict[str, Any]:
        """The hashed run config, equal to vLLM's ``FileMapper.get_run_config()``."""
        return json.loads(self._fields_json)  # type: ignore[no-any-return]

    @property
    def digest(self) -> str:
        """The first 12 hex characters of the sha256 of the canonical fields."""
        return self._digest

    @property
    def safe_model_name(self) -> str:
        return self.model_name.replace("/", "_")

    @property
    def folder(self) -> str:
        """``<model with "/" -> "_">_<digest>``: the namespace folder name."""
        return f"{self.safe_model_name}_{self._digest}"

    def for_rank(self, rank: int) -> Namespace:
        """The same namespace seen from another rank (rank is not hashed)."""
        return self.model_copy_validated(rank=rank)

    def model_copy_validated(self, **changes: Any) -> Namespace:
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data.update(changes)
        return Namespace(**data)

    # -- manifest ---------------------------------------------------------------------

    def manifest_bytes(self) -> bytes:
        """Exactly the ``config.json`` vLLM's filesystem tier writes (no trailing newline)."""
        return json.dumps(self._fields, indent=2, sort_keys=True).encode("utf-8")

    @classmethod
    def from_manifest(cls, data: bytes | str | Mapping[str, Any], *, rank: int = 0) -> Namespace:
        """Rebuild a namespace from a ``config.json`` (bytes, text or parsed dict).

        Parsed strictly and bounded (:mod:`s3kv.naming.manifest`): anything unacceptable raises
        :class:`s3kv.ManifestError`.

        Fields unknown to vLLM 0.33.0 (from a newer vLLM) are kept in ``extra_fields`` and
        hashed, so the digest matches the folder the newer vLLM wrote. The record s3kv adds
        (:data:`s3kv.naming.manifest.PROVENANCE_FIELD`) is not hashed: vLLM never sees it.
        """
        fields, _ = split_provenance(parse_manifest(data))
        missing = [name for name in _BASE_FIELDS if name not in fields]
        if missing:
            raise ManifestError(
                f"manifest lacks required field(s) {missing}; it was not written by vLLM's "
                "FileMapper or s3kv"
            )
        agnostic = fields.get("parallel_agnostic", True)
        if agnostic is not False:
            if "parallel_agnostic" in fields:
                raise ManifestError(
                    "manifest has parallel_agnostic="
                    f"{describe_value(fields['parallel_agnostic'])}; vLLM writes it only as false"
                )
            agnostic = True
        replicated = fields.get("replicated_layout", False)
        if "replicated_layout" in fields and replicated is not True:
            raise ManifestError("manifest has replicated_layout other than true")
        kwargs: dict[str, Any] = {name: fields[name] for name in _BASE_FIELDS}
        kwargs.update(
            rank=rank,
            parallel_agnostic=agnostic,
            replicated_layout=replicated,
            canonical_format=fields.get("canonical_format"),
            storage_format=fields.get("storage_format"),
            extra_fields={k: v for k, v in fields.items() if k not in _KNOWN_FIELDS},
        )
        try:
            namespace = cls(**kwargs)
        except InvalidNamespaceError as exc:
            raise ManifestError(f"manifest holds an invalid field: {exc}") from None
        if namespace.fields != fields:
            # Parallel-agnostic manifests must carry sizes of 1; anything else would
            # hash differently from what vLLM wrote.
            raise ManifestError(
                "manifest fields are inconsistent (a parallel-agnostic manifest must have "
                "tp/pp/pcp/dcp sizes of 1)"
            )
        return namespace

    @classmethod
    def from_vllm_config(
        cls,
        config: Any,
        *,
        blocks_per_file: int = 1,
        parallel_agnostic: bool = False,
        storage_format: str | None = None,
    ) -> Namespace:
        """From vLLM's normalised ``OffloadingConfig``, as ``FileMapper.from_offloading_spec``.

        Duck-typed: reads ``model.name``, ``model.dtype``, ``cache.tokens_per_hash``,
        ``groups[i].tokens_per_block``/``layer_names``, ``parallel.*``,
        ``replicated_layout``, ``canonical_layout`` and ``kv_cache_layout``. ``config`` may
        also be the ``OffloadingSpec`` holding it (``spec.config``): its
        ``storage_format``, when it has one and ``storage_format`` is not given, is hashed
        as vLLM's development branch does (only when not None).
        """
        if hasattr(config, "config") and not hasattr(config, "model"):
            if storage_format is None:
                storage_format = getattr(config, "storage_format", None)
            config = config.config
        try:
            parallel = config.parallel
            groups = [
                {"tokens_per_block": g.tokens_per_block, "layer_names": list(g.layer_names)}
                for g in config.groups
            ]
            canonical_format = None
            if config.canonical_layout:
                layout = config.kv_cache_layout
                if layout is None:
                    raise InvalidNamespaceError(
                        "config.canonical_layout is set but config.kv_cache_layout is None"
                    )
                canonical_format = canonical_format_id(layout)
            replicated = bool(config.replicated_layout)
            return cls(
                model_name=config.model.name,
                tokens_per_hash=config.cache.tokens_per_hash,
                blocks_per_file=blocks_per_file,
                tp_size=parallel.tp_size,
                pp_size=parallel.pp_size,
                pcp_size=parallel.pcp_size,
                dcp_size=parallel.dcp_size,
                rank=parallel.rank,
                dtype=config.model.dtype,
                kv_cache_groups=groups,
                parallel_agnostic=parallel_agnostic
                and bool(parallel.is_parallelism_agnostic or replicated),
                replicated_layout=parallel_agnostic and replicated,
                canonical_format=canonical_format,
                storage_format=storage_format,
            )
        except AttributeError as exc:
            raise InvalidNamespaceError(
                f"not a vLLM OffloadingConfig: {exc}; pass vllm's normalised offloading "
                "config (spec.config)"
            ) from None

    def __repr__(self) -> str:
        return f"Namespace(folder={self.folder!r}, rank={self.rank})"


CANONICAL_FORMAT_VERSION = 1


# vLLM keeps the pre-enum spelling of these two KVCacheLayout families so ids of KV
# persisted before the enum existed stay stable.
_LEGACY_FAMILIES = {"LBNHC": "nhd", "LBHNC": "hnd"}


def canonical_format_id(kv_cache_layout: Any) -> str:
    """vLLM 0.33.0's ``canonical_format_id``: ``v1-<family>`` for a ``KVCacheLayout`` name.

    ``LBNHC`` -> ``v1-nhd``, ``LBHNC`` -> ``v1-hnd``, others lower-cased (``v1-lhbnc``).
    """
    family = getattr(kv_cache_layout, "name", kv_cache_layout)
    if not isinstance(family, str) or not family:
        raise InvalidNamespaceError(
            f"kv_cache_layout {describe_value(kv_cache_layout)} is not a layout name "
            "such as 'LBNHC' or 'LBHNC'"
        )
    family = _LEGACY_FAMILIES.get(family.upper(), family.lower())
    return f"v{CANONICAL_FORMAT_VERSION}-{family}"


def _groups_from(groups: Any) -> tuple[KVCacheGroup, ...]:
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise InvalidNamespaceError(
            f"kv_cache_groups must be a list of {{tokens_per_block, layer_names}}; "
            f"got {describe_value(groups)}"
        )
    out = []
    for i, group in enumerate(groups):
        if isinstance(group, KVCacheGroup):
            out.append(group)
            continue
        if not isinstance(group, Mapping):
            raise InvalidNamespaceError(
                f"kv_cache_groups[{i}] must be a mapping with tokens_per_block and "
                f"layer_names; got {describe_value(group)}"
            )
        unknown = set(group) - {"tokens_per_block", "layer_names"}
        if unknown:
            raise InvalidNamespaceError(
                f"kv_cache_groups[{i}] has unknown field(s) {sorted(unknown)}; vLLM 0.33.0 "
                "hashes only tokens_per_block and layer_names"
            )
        names = group.get("layer_names")
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            raise InvalidNamespaceError(
                f"kv_cache_groups[{i}].layer_names must be a list of str; got "
                f"{describe_value(names)}"
            )
        try:
            out.append(
                KVCacheGroup(
                    tokens_per_block=group.get("tokens_per_block"),  # type: ignore[arg-type]
                    layer_names=tuple(names),
                )
            )
        except ValidationError as exc:
            raise InvalidNamespaceError(f"kv_cache_groups[{i}]: {_explain(exc)}") from None
    return tuple(out)


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "namespace"
        value = describe_value(err.get("input"))
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field {field!r}")
        else:
            parts.append(f"{field}={value}: {err['msg'].lower()}")
    return "invalid namespace: " + "; ".join(parts)
