"""docs/sizing.md's numbers, computed from the models' configs and S3's list prices.

The configs are the fields of each model's ``config.json`` on Hugging Face that size its
KV cache (``head_dim``, or ``hidden_size / num_attention_heads`` where a config has no
``head_dim``); the prices are the ones docs/sizing.md states with their date. The test
(tests/docs/test_sizing.py) renders the tables and finds them in the page as written.
"""

from __future__ import annotations

import math

# model: (num_hidden_layers, num_key_value_heads, head_dim); all bfloat16 (2 bytes)
MODELS: dict[str, tuple[int, int, int]] = {
    "Qwen/Qwen3-0.6B": (28, 8, 128),
    "meta-llama/Llama-3.2-1B": (16, 8, 64),
    "meta-llama/Llama-3.1-8B": (32, 8, 128),
    "mistralai/Mistral-7B-Instruct-v0.3": (32, 8, 128),
    "Qwen/Qwen3-8B": (36, 8, 128),
    "Qwen/Qwen3-32B": (64, 8, 128),
    "meta-llama/Llama-3.1-70B": (80, 8, 128),
    "Qwen/Qwen2.5-72B-Instruct": (80, 8, 128),
    "meta-llama/Llama-3.1-405B": (126, 8, 128),
}
DTYPE_BYTES = 2
BLOCK_TOKENS = (16, 64, 256)
PROMPT_TOKENS = 8192
# S3 Standard, US East (N. Virginia), list prices as docs/sizing.md states them
STORAGE_PER_GB_MONTH = 0.023  # first 50 TB; a billing GB is 2**30 bytes
PUT_PER_1000 = 0.005
GET_PER_1000 = 0.0004


def per_token(layers: int, kv_heads: int, head_dim: int) -> int:
    """K and V of every layer for one token."""
    return layers * kv_heads * head_dim * 2 * DTYPE_BYTES


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if n == int(n) else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


def money(x: float) -> str:
    return f"${x:,.2f}" if x >= 0.1 else f"${x:.4f}".rstrip("0")


def model_rows() -> list[str]:
    rows = []
    for model, (layers, heads, dim) in MODELS.items():
        b = per_token(layers, heads, dim)
        blocks = " / ".join(size(b * t) for t in BLOCK_TOKENS)
        rows.append(
            f"| `{model}` | {layers} | {heads} | {dim} | {b:,} B ({size(b)}) | {blocks} | "
            f"{size(b * PROMPT_TOKENS)} |"
        )
    return rows


def cost_rows(model: str = "meta-llama/Llama-3.1-8B", prompts: int = 1000) -> list[str]:
    b = per_token(*MODELS[model])
    rows = []
    for tokens in BLOCK_TOKENS:
        blocks = PROMPT_TOKENS // tokens  # vLLM stores full blocks only
        stored = prompts * blocks * tokens * b
        rows.append(
            f"| {tokens} | {size(tokens * b)} | {blocks:,} | {size(stored)} | "
            f"{money(stored / 2**30 * STORAGE_PER_GB_MONTH)} | "
            f"{money(prompts * blocks * PUT_PER_1000 / 1000)} | "
            f"{money(prompts * blocks * GET_PER_1000 / 1000)} |"
        )
    return rows


def blocks_per_prompt(tokens: int, block_tokens: int) -> int:
    return math.floor(tokens / block_tokens)
