"""The prefix search's cost bound: at most 3 round trips, about 3 * cbrt(n) HEADs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from s3kv.transfers.lookup import ROUNDS, LookupStats, fanout_for, prefix_length


def search(
    n: int, present: Sequence[bool], *, sent: list[int] | None = None, **options: int
) -> tuple[int, LookupStats, int]:
    stats = LookupStats()
    probed = [] if sent is None else sent

    def probe(positions: Sequence[int]) -> list[bool]:
        probed.extend(positions)
        return [present[p] for p in positions]

    return prefix_length(n, probe, stats=stats, **options), stats, len(probed)


@pytest.mark.parametrize(("n", "max_heads"), [(256, 26), (2048, 38), (8192, 62)])
def test_every_boundary_is_found_in_three_rounds(n: int, max_heads: int) -> None:
    for boundary in range(n + 1) if n <= 2048 else range(0, n + 1, 7):
        found, stats, heads = search(n, [i < boundary for i in range(n)])
        assert found == boundary
        assert stats.rounds <= ROUNDS and heads <= max_heads, (boundary, stats, heads)


def test_fanout_states_its_cost() -> None:
    assert [fanout_for(n) for n in (0, 256, 2048, 8192)] == [8, 8, 12, 20]
    assert ROUNDS * fanout_for(2048) + 2 <= 64


@pytest.mark.parametrize("stored", [0, 2048])
def test_nothing_or_everything_stored_takes_one_round(stored: int) -> None:
    found, stats, heads = search(2048, [i < stored for i in range(2048)])
    assert (found, stats.rounds, heads) == (stored, 1, 14)


def test_short_chains_take_one_round() -> None:
    found, stats, heads = search(8, [True] * 5 + [False] * 3)
    assert (found, stats.rounds, heads) == (5, 1, 8)


def test_known_bounds_narrow_the_search() -> None:
    present = [i < 1500 for i in range(2048)]
    found, stats, heads = search(2048, present, present_below=1499, absent_from=1500)
    assert (found, stats.rounds, heads) == (1500, 0, 0)
    sent: list[int] = []
    found, stats, heads = search(2048, present, present_below=1000, sent=sent)
    assert found == 1500 and stats.rounds <= ROUNDS and heads <= ROUNDS * fanout_for(1047)
    assert min(sent) > 1000


def test_a_hole_yields_a_seen_boundary() -> None:
    # Block 700 is missing from an otherwise stored 1,500-block prefix.
    present = [i < 1500 and i != 700 for i in range(2048)]
    stats = LookupStats()
    seen: dict[int, bool] = {}

    def probe(positions: Sequence[int]) -> list[bool]:
        answers = [present[p] for p in positions]
        seen.update(zip(positions, answers))
        return answers

    found = prefix_length(2048, probe, stats=stats)
    assert found in (700, 1500)
    assert seen[found] is False and (found == 0 or seen[found - 1] is True)
