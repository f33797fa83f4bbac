"""``neotoma_agent.forget``: a tool that holds a transport and no conversation forgets and
restores by public names, on the embedded store and on the dev server over HTTP.

What matters: a plan reads and writes nothing; applying it deletes exactly what it names
(a turn stored after the plan stays); its record restores the conversation; one entity is
forgotten and restored by its id; a malformed id is refused before any I/O.
"""

from __future__ import annotations

from typing import Any

import pytest
from turn_support import db_path, memory, store

from neotoma_agent import Forgotten, InvalidEntityIdError, NotFoundError
from neotoma_agent.forget import (
    check_entity_id,
    forget_entity,
    forget_planned,
    plan_forget,
    restore_conversation,
    restore_entity,
)
from neotoma_agent.reads import list_conversations, message_entity_id, read_conversation
from neotoma_agent.testing import RecordingTransport

__all__ = ["db_path", "store"]  # fixtures

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


async def _turn_ids(store: Any, conversation_id: str) -> list[str]:
    return [t.turn_id for t in (await read_conversation(store, conversation_id)).turns]


async def test_a_kept_plan_deletes_exactly_what_it_names_and_restores(store: Any) -> None:
    chat = memory(store, "forget-me")
    async with chat.turn("Acme Corp renewed", turn_id="t1") as t:
        t.reply = "Noted."
    recorder = RecordingTransport(store)

    plan = await plan_forget(recorder, "forget-me")

    assert [c.method for c in recorder.calls if c.method in ("store", "delete_entity")] == []
    kept = Forgotten.from_json(plan.to_json())  # what a tool keeps before deleting
    assert kept == plan
    assert plan.conversation_id == "forget-me"
    assert len(plan.entities) >= 4  # the conversation, two messages, the turn record
    async with chat.turn("and Globex?", turn_id="t2") as t:  # after the plan
        t.reply = "Globex too."

    await forget_planned(store, kept)

    assert await _turn_ids(store, "forget-me") == []  # the conversation is gone
    with pytest.raises(NotFoundError):
        await store.get_entity_snapshot(message_entity_id("forget-me", "t1", "user"))
    # a message stored after the plan is not in it, so it stays
    later = await store.get_entity_snapshot(message_entity_id("forget-me", "t2", "user"))
    assert later.snapshot["content"] == "and Globex?"
    await restore_conversation(store, kept)
    assert await _turn_ids(store, "forget-me") == ["t1", "t2"]
    listed = await list_conversations(store)
    assert [c.conversation_id for c in listed.conversations] == ["forget-me"]


async def test_one_entity_is_forgotten_and_restored_by_its_id(store: Any) -> None:
    acme = await memory(store).remember("company", name="Acme Corp")

    await forget_entity(store, acme)

    with pytest.raises(NotFoundError):
        await store.get_entity_snapshot(acme)
    with pytest.raises(NotFoundError):
        await forget_entity(store, acme)  # already deleted
    await restore_entity(store, acme)
    assert (await store.get_entity_snapshot(acme)).snapshot["name"] == "Acme Corp"


async def test_a_malformed_id_is_refused_before_any_io(store: Any) -> None:
    recorder = RecordingTransport(store)
    for bad in ("", "Maria Gomez", "ent_" + "0" * 23 + "\x07"):
        with pytest.raises(InvalidEntityIdError, match="not an entity id") as info:
            check_entity_id(bad)
        assert bad not in str(info.value) or not bad
        with pytest.raises(InvalidEntityIdError):
            await forget_entity(recorder, bad)
    assert recorder.calls == []
    assert check_entity_id("ent_" + "a" * 24) == "ent_" + "a" * 24
