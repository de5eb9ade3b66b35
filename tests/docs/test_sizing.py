"""docs/sizing.md: every table is what the formula gives for the configs and prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import sizing

pytestmark = pytest.mark.unit

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "sizing.md").read_text()


def test_the_formula_is_the_one_the_field_knows() -> None:
    # Llama-3.1-8B: 128 KiB per token, 2 MiB per block of 16 (docs/reference field notes)
    assert sizing.per_token(*sizing.MODELS["meta-llama/Llama-3.1-8B"]) == 128 * 1024
    assert sizing.blocks_per_prompt(8192, 16) == 512 and sizing.blocks_per_prompt(8200, 16) == 512


@pytest.mark.parametrize("row", sizing.model_rows() + sizing.cost_rows())
def test_each_row_is_in_the_page_as_computed(row: str) -> None:
    assert row in PAGE


def test_the_prices_used_are_the_prices_stated() -> None:
    assert f"${sizing.STORAGE_PER_GB_MONTH} per GB-month" in PAGE
    assert f"${sizing.PUT_PER_1000} per 1,000 PUT" in PAGE
    assert f"${sizing.GET_PER_1000} per 1,000 GET" in PAGE
    assert "as of 2026-12-01" in PAGE
    assert "61 x (512 + 64) x 2 = 70,272 B per token" in PAGE and 61 * 576 * 2 == 70_272
