"""``reads.summarize_payload`` and ``reads.IdentityError``: a tool shows a call's payload as
the library stores its summary, and catches the id no conversation can have by a public name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.reads import (
    IdentityError,
    conversation_entity_id,
    read_conversation,
    summarize_payload,
)


def test_a_short_payload_is_its_compact_json() -> None:
    assert summarize_payload({"city": "Paris", "days": 3}) == '{"city":"Paris","days":3}'
    assert summarize_payload("plain text") == '"plain text"'


def test_a_long_payload_is_cut_and_says_how_much_was_left_out() -> None:
    text = summarize_payload({"q": "x" * 200}, max_chars=20)
    whole = json.dumps({"q": "x" * 200}, separators=(",", ":"))
    assert text == f"{whole[:20]}…[+{len(whole) - 20} chars]"
    assert summarize_payload(text) == text  # a summary is not encoded again


@given(st.recursive(st.none() | st.integers() | st.text(), lambda c: st.lists(c, max_size=4)))
def test_a_summary_is_one_line_and_never_longer_than_asked(value: object) -> None:
    text = summarize_payload(value, max_chars=30)
    assert "\n" not in text
    head, _, rest = text.partition("…[+")
    assert len(head) <= 30
    assert not rest or rest.endswith(" chars]")


@pytest.mark.anyio
async def test_it_is_the_form_a_summary_store_keeps(tmp_path: Path) -> None:
    args = {"query": "rotate the certificates " * 20}
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="c", tool_payloads="summary")
        async with memory.turn("search it", turn_id="t1") as t:
            async with t.tool("search", args) as call:
                call.result = "found"
            t.reply = "done"
        stored = await read_conversation(store, "c", tool_details=True)
        [stored_call] = stored.turns[0].tools
        assert stored_call.args == summarize_payload(args)


@pytest.mark.anyio
@pytest.mark.parametrize("conversation_id", ["", "   "])
async def test_an_id_no_conversation_can_have_raises_the_public_error(
    tmp_path: Path, conversation_id: str
) -> None:
    with pytest.raises(IdentityError):
        conversation_entity_id(conversation_id)
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        with pytest.raises(IdentityError):
            await read_conversation(store, conversation_id)
