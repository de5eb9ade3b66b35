"""The blocks every benchmark row moves: the same payloads, keys and names for every client."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def payload(seed: int, i: int, size: int) -> bytes:
    import numpy as np

    return np.random.default_rng([seed, i]).bytes(size)


def offload_keys(seed: int, count: int) -> list[bytes]:
    from s3kv import make_offload_key

    return [
        make_offload_key(hashlib.sha256(f"{seed}:{i}".encode()).digest(), 0) for i in range(count)
    ]


def namespace() -> Any:
    from s3kv import Namespace

    return Namespace(model_name=MODEL, tokens_per_hash=16, dtype="bfloat16")


def object_keys(spec: dict[str, Any], keys: list[bytes]) -> list[str]:
    """The object keys s3kv writes; every client uses the same names."""
    from s3kv import KeyMapper
    from s3kv.naming.location import parse_location

    location = parse_location(f"s3://{spec['bucket']}/{spec['prefix']}")
    mapper = KeyMapper(namespace(), prefix=location.prefix)
    return [mapper.key_for(k) for k in keys]


class Row(NamedTuple):
    """What a row's spec moves: its client, ``count`` blocks of ``size`` bytes, and where."""

    client: str
    count: int
    size: int
    seed: int
    concurrency: int
    bucket: str
    keys: list[bytes]  # offload keys
    names: list[str]  # their object keys


def row(spec: dict[str, Any]) -> Row:
    keys = offload_keys(spec["seed"], spec["count"])
    return Row(spec["client"], spec["count"], spec["size"], spec["seed"], spec["concurrency"],
               spec["bucket"], keys, object_keys(spec, keys))


def sample_indices(count: int, samples: int) -> list[int]:
    if count <= samples:
        return list(range(count))
    step = (count - 1) / (samples - 1)
    return sorted({round(i * step) for i in range(samples)})
