"""``t.context()``'s history under a budget: short stable tags, the oldest kept turn cut
rather than dropped, and a token budget counted by the caller's function (issue 31 §1)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from turn_support import db_path, memory, store

from neotoma_agent._recall.context import MIN_CUT_CHARS, render_context, turn_tag
from neotoma_agent._recall.history import HistoryTurn
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio

TURN_ID = "0193a6f0-6d8e-7c1a-9b2e-5f4d3c2b1a09"


def long_turn(n: int, chars: int = 700, number: int | None = None) -> HistoryTurn:
    return HistoryTurn(
        f"turn-{n}", number, f"q{n} " + "u" * chars, f"a{n} " + "r" * chars, "completed"
    )


def words(text: str) -> int:
    return len(text.split())


def test_a_turn_without_a_number_gets_a_short_stable_tag() -> None:
    turn = HistoryTurn(TURN_ID, None, "hello", "hi", "completed")
    tag = turn_tag(turn)
    assert re.fullmatch(r"#[0-9a-f]{6}", tag)
    assert tag == turn_tag(HistoryTurn(TURN_ID, None, "other", None, "abandoned"))
    assert tag != turn_tag(HistoryTurn(TURN_ID[:-1] + "8", None, "hello", "hi", "completed"))
    block = render_context((), [turn], max_chars=400)
    assert f"[{tag} · completed] user: hello" in block
    assert TURN_ID not in block
    assert turn_tag(HistoryTurn(TURN_ID, 7, "x", None, "completed")) == "turn 7"


def test_the_oldest_kept_turn_is_cut_to_use_the_budget() -> None:
    history = [long_turn(1), long_turn(2), long_turn(3)]
    block = render_context((), history, max_chars=1000)
    assert len(block) <= 1000
    assert len(block) > 900  # the budget is used, not left 660 chars empty
    # The newest turn, cut with the marker entities get; the older two counted as left out.
    assert "q3 " in block
    assert "a3 " in block
    assert "q1 " not in block
    assert "q2 " not in block
    assert re.search(r"…\[\+\d+ chars\]", block)
    assert block.endswith("(context cut to 1000 chars: 2 turns left out)")


def test_whole_newer_turns_stay_whole_and_only_the_oldest_kept_is_cut() -> None:
    history = [long_turn(1, 300), long_turn(2, 100), long_turn(3, 100)]
    block = render_context((), history, max_chars=900)
    lines = block.splitlines()
    cut = [line for line in lines if "…[+" in line]
    assert cut
    assert all(("q1 " in line or "a1 " in line) for line in cut)
    assert "u" * 100 in block  # turn 2 and 3 whole
    assert "left out" not in block  # nothing left out: turn 1 is there, cut


def test_a_turn_is_left_out_rather_than_cut_to_nothing() -> None:
    block = render_context((), [long_turn(1)], max_chars=60 + MIN_CUT_CHARS // 2)
    assert "q1" not in block


def test_a_token_budget_beside_the_character_one() -> None:
    history = [HistoryTurn(f"t{n}", n, "word " * 50, "reply " * 50, "completed") for n in range(5)]
    chars_only = render_context((), history, max_chars=100_000)
    assert words(chars_only) > 400
    block = render_context((), history, max_chars=100_000, max_tokens=150, count_tokens=words)
    assert words(block) <= 150
    assert words(block) > 120  # the oldest kept turn is cut to fill it
    assert "150 tokens" in block.splitlines()[-1]
    with pytest.raises(ValueError, match="count_tokens"):
        render_context((), history, max_chars=100, max_tokens=10)
    with pytest.raises(ValueError, match="max_tokens"):
        render_context((), history, max_chars=100, count_tokens=words)
    with pytest.raises(ValueError, match="max_tokens"):
        render_context((), history, max_chars=100, max_tokens=-1, count_tokens=words)


@given(
    st.integers(0, 3000),
    st.integers(0, 400),
    st.lists(st.integers(0, 900), max_size=6),
)
def test_both_budgets_always_hold(max_chars: int, max_tokens: int, sizes: list[int]) -> None:
    history = [
        HistoryTurn(f"t{i}", None, "w " * size, "r\n" * (size // 2), "completed")
        for i, size in enumerate(sizes)
    ]
    block = render_context(
        (), history, max_chars=max_chars, max_tokens=max_tokens, count_tokens=words
    )
    assert len(block) <= max_chars
    assert words(block) <= max_tokens


async def test_turn_context_takes_the_token_budget(store: Transport) -> None:
    m = memory(store)
    for n in range(3):
        async with m.turn("tell me " * 40, turn_id=f"t{n}") as t:
            t.reply = "sure " * 40
    async with m.turn("and now?", turn_id="t9") as t:
        block = t.context(max_tokens=60, count_tokens=words)
        assert 40 < words(block) <= 60
        assert "#" in block  # no turn_number given: short tags
        t.reply = "ok"
