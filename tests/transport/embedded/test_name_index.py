"""The name index's choice of trigrams: whichever it reads, a lookup finds what a scan does.

The names are built so that the two rarest trigrams of a needle overlap ("123" and "234"
in "1234"), the case where the index prefers a trigram three chars apart instead.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.embedded._name_index import _rarest_pair, _trigram_match

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

# Many names share "1234", fewer share "5" with it three chars on: the rarest pair overlaps.
NAMES = [f"Part {n:07d} Unit" for n in random.Random(3).sample(range(10**7), 120)]
NAMES += [f"Part {p}1234{q} Unit" for p in ("0", "05", "905") for q in ("", "5", "56", "567")]
NAMES += ["Part 1234 Unit", "PART 123 4", "part 234", "12341234", "x1234x"]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "store.db") as s:
        await s.store(
            [{"entity_type": "company", "name": n} for n in NAMES], idempotency_key="parts"
        )
        yield s


def scan(needle: str) -> list[str]:
    """The names a whole-table scan finds, in the lookup's order (canonical name, then id:
    the names are distinct)."""
    return sorted(n for n in NAMES if needle.lower() in n.lower())


NEEDLES = [
    "1234",
    "12345",
    "01234",
    "0123456",
    "512345",
    "part 0512345",
    "Part 0512345 Unit",
    "1234 unit",
    "234 unit",
    "41234",
    "12341234",
    "x1234x",
    "123 4",
    "part 234",
    *NAMES[:40],
]


async def test_the_trigram_choice_finds_what_a_scan_finds(store: EmbeddedStore) -> None:
    for needle in NEEDLES:
        found = await store.retrieve_entity_by_identifier(needle, limit=1000)
        assert [e.canonical_name for e in found.entities] == scan(needle), needle


async def test_the_second_trigram_is_three_chars_apart_when_one_is(
    store: EmbeddedStore, tmp_path: Path
) -> None:
    with sqlite3.connect(tmp_path / "store.db") as conn:
        match = _trigram_match(conn, "part 0512345 unit")
        assert match is not None
        first, second = (g.strip('"') for g in match.split(" AND "))
        needle = "part 0512345 unit"
        assert abs(needle.index(first) - needle.index(second)) >= 3


def test_the_pair_apart_with_the_shortest_posting_lists_is_taken_unless_much_longer() -> None:
    # "abcdef": "abc" at 0 and "def" at 3 are apart; "bcd" overlaps "abc".
    grams = ["abc", "bcd", "cde", "def"]
    assert _rarest_pair("abcdef", grams, [10, 20, 30, 40]) == ["abc", "def"]  # 50 <= 4 * 30
    assert _rarest_pair("abcdef", grams, [10, 20, 30, 200]) == ["abc", "bcd"]  # 210 > 4 * 30
    assert _rarest_pair("abcd", ["abc", "bcd"], [10, 20]) == ["abc", "bcd"]  # none apart
    assert _rarest_pair("abcdef", grams, [3, 20, 30, 40]) == ["abc"]  # few texts: one list
    # The rarest ("cde") has no trigram apart from it: the best pair apart leaves it out.
    grams = ["abc", "bcd", "cde", "def", "efg"]
    assert _rarest_pair("abcdefg", grams, [50, 50, 10, 50, 12]) == ["efg", "abc"]
    # "880" and "806" are apart in "0880806" but chain by two chars ("8806"); "088" and
    # "806" by one ("08806").
    grams = ["080", "088", "806", "808", "880"]
    assert _rarest_pair("0880806", grams, [90, 30, 10, 90, 10]) == ["806", "088"]
    assert _rarest_pair("0880806", grams, [900, 800, 10, 900, 10]) == ["806", "880"]  # 4x
