"""``t.context()``: a deterministic text block of what a turn knows, within its budget."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from turn_support import db_path, memory, store

from neotoma_agent._recall.context import render_context
from neotoma_agent._recall.history import HistoryTurn
from neotoma_agent.transport._base import Entity, Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


def entity(n: int, **fields: Any) -> Entity:
    return Entity(
        id=f"ent_{n:024x}",
        entity_type="company",
        canonical_name=None,
        snapshot={"name": f"Company {n}", **fields},
        raw={},
    )


def turn(n: int, reply: str | None = "fine", status: Any = "completed") -> HistoryTurn:
    return HistoryTurn(f"t{n}", n, f"question {n}", reply, status)


async def test_context_lists_retrieved_entities_in_rank_order(store: Transport) -> None:
    m = memory(store)
    # A company's snapshot holds declared fields only; a type without a schema holds any.
    acme = await m.remember("company", name="Acme Corp", website="acme.com", industry="tools")
    globex = await m.remember("vendor", name="Globex", tags=["energy", "b2b"], staff=12)
    async with m.turn('Compare "Globex" and "Acme Corp"', turn_id="t1") as t:
        text = t.context()
        t.reply = "ok"
    assert t.retrieved_ids == (globex, acme)
    assert text == (
        "Known entities (best match first):\n"
        f'- vendor "Globex" [{globex}]: tags=["energy","b2b"]; staff=12\n'
        f'- company "Acme Corp" [{acme}]: website=acme.com; industry=tools'
    )
    assert t.context() == text  # deterministic


async def test_context_without_history_leaves_the_earlier_turns_out(store: Transport) -> None:
    m = memory(store)
    acme = await m.remember("company", name="Acme Corp")
    async with m.turn("Hello there", turn_id="t1") as t:
        t.reply = "Hi."
    async with m.turn("What about Acme Corp?", turn_id="t2") as t:
        full = t.context()
        entities_only = t.context(history=False)
        t.reply = "ok"
    assert "Hello there" in full
    assert entities_only == f'Known entities (best match first):\n- company "Acme Corp" [{acme}]'
    assert full.startswith(entities_only)


def test_the_format_of_history_and_what_was_left_out() -> None:
    text = render_context(
        [entity(1, city="Oslo")],
        [turn(1), turn(2, reply=None, status="abandoned"), turn(3)],
        max_chars=10_000,
    )
    assert text == (
        "Known entities (best match first):\n"
        f'- company "Company 1" [{entity(1).id}]: city=Oslo\n'
        "Earlier in this conversation (oldest first):\n"
        "[turn 1 · completed] user: question 1\n"
        "[turn 1 · completed] assistant: fine\n"
        "[turn 2 · abandoned] user: question 2\n"
        "[turn 3 · completed] user: question 3\n"
        "[turn 3 · completed] assistant: fine"
    )


def test_the_budget_keeps_entities_in_rank_order_and_the_newest_turns() -> None:
    entities = [entity(i) for i in range(5)]
    history = [turn(i) for i in range(10)]
    full = render_context(entities, history, max_chars=100_000)
    small = render_context(entities, history, max_chars=500)
    assert len(small) <= 500
    lines = small.splitlines()
    assert lines[1].startswith('- company "Company 0"')
    kept_turns = [line for line in lines if line.startswith("[turn")]
    # What is kept of the history is its newest end, shown oldest first.
    assert kept_turns
    assert kept_turns == full.splitlines()[-len(kept_turns) :]
    assert lines[-1].startswith("(context cut to 500 chars:")


def test_long_values_and_messages_are_cut_with_a_marker() -> None:
    text = render_context(
        [entity(1, notes="x" * 500)], [turn(1, reply="y" * 1000)], max_chars=100_000
    )
    assert f"notes={'x' * 160}…[+340 chars]" in text
    assert f"assistant: {'y' * 600}…[+400 chars]" in text


def test_newlines_in_stored_text_stay_on_their_line() -> None:
    text = render_context([], [turn(1, reply="a\nb\r\nc")], max_chars=1000)
    assert "assistant: a\\nb\\r\\nc" in text
    assert len(text.splitlines()) == 3


@given(
    max_chars=st.integers(min_value=0, max_value=3000),
    n_entities=st.integers(0, 8),
    n_turns=st.integers(0, 12),
)
def test_the_block_never_exceeds_its_budget(max_chars: int, n_entities: int, n_turns: int) -> None:
    entities = [entity(i, note="n" * (i * 37)) for i in range(n_entities)]
    history = [turn(i, reply="r" * (i * 53)) for i in range(n_turns)]
    text = render_context(entities, history, max_chars=max_chars)
    assert len(text) <= max_chars
    assert text == render_context(entities, history, max_chars=max_chars)


def test_a_bad_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        render_context([], [], max_chars=-1)


def test_only_the_field_shown_as_the_name_is_left_out() -> None:
    contact = entity(1, title="Head of Sales", email="ana@example.com")
    text = render_context([contact], [], max_chars=1000)
    assert text.splitlines()[1] == (
        f'- company "Company 1" [{contact.id}]: title=Head of Sales; email=ana@example.com'
    )
    untitled = Entity(
        id=contact.id, entity_type="person", canonical_name="person:ana",
        snapshot={"email": "ana@example.com", "role": "CFO"}, raw={},
    )  # fmt: skip
    assert f'"ana@example.com" [{contact.id}]: role=CFO' in render_context(
        [untitled], [], max_chars=1000
    )


async def test_an_open_turn_renders_the_same_context_as_a_turn(store: Transport) -> None:
    # The explicit API (a turn spread over processes, e.g. coding-agent hooks) gets the
    # same block as `async with memory.turn(...)` for the same stored state.
    m = memory(store)
    acme = await m.remember("company", name="Acme Corp", website="acme.com")
    async with m.turn("Hello there", turn_id="t1") as t:
        t.reply = "Hi."
    async with m.turn('What about "Acme Corp"?', turn_id="t2") as t:
        expected = t.context(max_chars=300)
        t.reply = "A customer."
    opened = await memory(store).open_turn('What about "Acme Corp"?', turn_id="t2")
    assert acme in opened.retrieved_ids
    assert opened.context(max_chars=300) == expected
    assert "· completed] assistant: Hi." in expected
    assert opened.context(max_chars=0) == ""
    with pytest.raises(ValueError, match="max_chars"):
        opened.context(max_chars=-1)
