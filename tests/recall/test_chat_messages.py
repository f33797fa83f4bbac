"""``chat_messages``: a chat API's message list from stored history, by its stated rule."""

from __future__ import annotations

import pytest
from turn_support import db_path, memory, store

from neotoma_agent import HistoryTurn, chat_messages
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


async def test_the_list_from_stored_turns_of_every_ending(store: Transport) -> None:
    m = memory(store, history_turns=10)
    async with m.turn("What is Acme?", turn_id="t1") as t:
        t.reply = "A customer."

    async def stopped() -> None:
        async with m.turn("And Globex?", turn_id="t2") as t:
            t.reply = "Globex is"  # the user pressed stop here
            raise KeyError("stopped")

    with pytest.raises(KeyError):
        await stopped()
    opened = await m.open_turn("Still thinking?", turn_id="t3")  # left open
    async with m.turn("Stopped before a word?", turn_id="t4") as t:
        pass  # completed with an empty reply is not stored as a reply: left out
    async with m.turn("Thanks", turn_id="t5") as t:
        statuses = [h.status for h in t.history]
        assert "abandoned" in statuses
        assert "open" in statuses
        got = chat_messages(t.history, user=t.user_message, system="You help.")
        t.reply = "You're welcome."
    assert got == [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "What is Acme?"},
        {"role": "assistant", "content": "A customer."},
        {"role": "user", "content": "Thanks"},
    ]
    partial = chat_messages(await m.history(limit=None), abandoned="partial")
    assert {"role": "assistant", "content": "Globex is"} in partial
    roles = [message["role"] for message in partial]
    assert roles == ["user", "assistant"] * (len(roles) // 2)  # strictly alternating
    assert all(message["content"] for message in partial)  # never empty
    await m.close_turn(opened, "done")


def test_empty_messages_and_bad_rules() -> None:
    history = [
        HistoryTurn("a", None, "hi", "", "completed"),
        HistoryTurn("b", None, "", "orphan reply", "completed"),
        HistoryTurn("c", None, "ok?", None, "abandoned"),
    ]
    assert chat_messages(history) == []
    assert chat_messages(history, abandoned="partial") == []
    assert chat_messages([], user="") == []
    with pytest.raises(ValueError, match="abandoned"):
        chat_messages(history, abandoned="keep")  # type: ignore[arg-type]
