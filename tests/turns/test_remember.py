"""Entities a reply produces: written in the closing store, REFERS_TO from the reply, their
ids known at once; extended when retrieval found them, never duplicated."""

from __future__ import annotations

import math
from typing import Any

import pytest
from turn_support import db_path, memory, messages, seed, store, targets, turn_record

from neotoma_agent import TurnState, ValidationError
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


async def test_remembered_entity_rides_on_the_closing_store_and_is_cited(
    store: Transport,
) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    async with m.turn("Book me a table", turn_id="t1") as t:
        booking = t.remember("booking", name="Table for two at Luigi's", party=2)
        t.reply = f"Booked ({booking})."
    assert len(recorder.calls_to("store")) == 2  # the user store and the closing store
    assert t.result.produced_ids == (booking,)
    snap = await store.get_entity_snapshot(booking)
    assert snap.entity_type == "booking"
    assert snap.snapshot["party"] == 2
    assistant = (await messages(store, t.conversation_entity_id))["chat-1:t1:assistant"]
    assert booking in await targets(store, assistant["id"], "REFERS_TO")


async def test_an_entity_retrieval_found_is_extended_not_duplicated(store: Transport) -> None:
    [acme] = await seed(store, "Acme Corp")
    m = memory(store)
    async with m.turn("What about Acme Corp?", turn_id="t1") as t:
        assert t.retrieved_ids == (acme,)
        same = t.remember("company", name="Acme Corp", type="customer")
        t.cite(same)
        t.reply = "Acme Corp is a customer now."
    assert same == acme
    assert t.result.produced_ids == (acme,)
    snap = await store.get_entity_snapshot(acme)
    assert snap.snapshot["type"] == "customer"
    assert len((await store.list_observations(acme)).observations) == 2
    found = await store.query_entities(entity_type="company", limit=10)
    assert [e.entity_id for e in found.entities] == [acme]
    assistant = (await messages(store, t.conversation_entity_id))["chat-1:t1:assistant"]
    edges = list((await store.retrieve_related_entities(assistant["id"])).relationships)
    assert sum(1 for e in edges if e.target_entity_id == acme) == 1


async def test_remembering_one_id_twice_merges_the_fields(store: Transport) -> None:
    m = memory(store)
    async with m.turn("note this", turn_id="t1") as t:
        first = t.remember("note", title="Groceries", tags=["milk"])
        second = t.remember("note", title="Groceries", summary="")
        t.reply = "noted"
    assert first == second
    assert t.produced_ids == (first,)
    snap = await store.get_entity_snapshot(first)
    assert snap.snapshot["tags"] == ["milk"]
    assert snap.snapshot["summary"] == ""


async def test_an_abandoned_turn_keeps_what_it_produced(store: Transport) -> None:
    m = memory(store)
    t = m.turn("run the tool", turn_id="t1")

    async def use() -> None:
        async with t:
            t.remember("tool_result", name="weather in Oslo", celsius=-3)
            raise RuntimeError("the model failed after the tool ran")

    with pytest.raises(RuntimeError):
        await use()
    assert t.result.status is TurnState.ABANDONED
    [produced] = t.result.produced_ids
    assert (await store.get_entity_snapshot(produced)).snapshot["celsius"] == -3
    record = await turn_record(store, "chat-1", "t1")
    assert record["status"] == "abandoned"
    # No partial reply: the turn record names what was produced.
    assert produced in await targets(store, record["id"], "REFERS_TO")


async def test_a_rerun_turn_with_the_same_products_replays(store: Transport) -> None:
    m = memory(store)
    for _ in range(2):
        async with m.turn("note this", turn_id="t1") as t:
            t.remember("note", title="Groceries")
            t.reply = "noted"
    assert t.result.replayed
    [note] = t.result.produced_ids
    assert len((await store.list_observations(note)).observations) == 1


@pytest.mark.parametrize(
    ("entity_type", "fields", "error"),
    [
        ("conversation_message", {"content": "x"}, ValueError),
        ("conversation", {"conversation_id": "x"}, ValueError),
        ("turn_activity", {"name": "x"}, ValueError),
        ("", {"name": "x"}, ValueError),
        (" note", {"name": "x"}, ValueError),
        (3, {"name": "x"}, TypeError),
        ("note", {}, ValueError),
        ("note", {"name": "x", "target_id": "ent_" + "0" * 24}, ValueError),
        ("note", {"name": "x", "when": object()}, TypeError),
        ("note", {"name": "x", "score": math.nan}, ValueError),
        ("note", {"name": "x", "nested": {1: "a"}}, TypeError),
        ("note", {"name": "x\udfff"}, ValidationError),
        ("note", {"count": 3}, ValueError),  # nothing names it
    ],
)
async def test_bad_products_are_refused_before_any_io(
    store: Transport, entity_type: Any, fields: dict[str, Any], error: type[Exception]
) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    with pytest.raises(error):
        await m.remember(entity_type, **fields)
    assert recorder.calls == []
    async with m.turn("hello", turn_id="t1") as t:
        with pytest.raises(error):
            t.remember(entity_type, **fields)
        t.reply = "fine"
    assert t.result.completed
    assert t.result.produced_ids == ()


async def test_memory_remember_is_one_idempotent_store(store: Transport) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    first = await m.remember("company", name="Globex", industry="energy")
    again = await m.remember("company", name="Globex", industry="energy")
    assert first == again
    assert len(recorder.calls_to("store")) == 2
    assert len((await store.list_observations(first)).observations) == 1
    # Remembered facts are what retrieval then finds.
    async with m.turn("Tell me about Globex", turn_id="t1") as t:
        assert t.retrieved_ids == (first,)
        t.reply = "energy"


async def test_the_explicit_api_writes_produced_entities_in_the_closing_store(
    store: Transport,
) -> None:
    [acme] = await seed(store, "Acme Corp")
    recorder = RecordingTransport(store)
    m = memory(recorder)
    opened = await m.open_turn("Book a table and note Acme Corp", turn_id="t1")
    booking = opened.produce("booking", name="Table for two", party=2)
    first = opened.produce("company", name="Acme Corp", type="prospect")
    again = opened.produce("company", name="Acme Corp", type="customer")  # later wins
    assert first.entity_id == again.entity_id == acme  # retrieval found it: extended
    result = await m.close_turn(
        opened, f"Booked ({booking.entity_id}).", produced=[booking, first, again]
    )
    assert len(recorder.calls_to("store")) == 2  # the user store and the closing store
    assert result.produced_ids == (booking.entity_id, acme)
    assert (await store.get_entity_snapshot(acme)).snapshot["type"] == "customer"
    assert (await store.get_entity_snapshot(booking.entity_id)).snapshot["party"] == 2
    assistant = (await messages(store, result.conversation_entity_id))["chat-1:t1:assistant"]
    assert booking.entity_id in await targets(store, assistant["id"], "REFERS_TO")


async def test_an_explicitly_abandoned_turn_keeps_what_it_produced(store: Transport) -> None:
    m = memory(store)
    opened = await m.open_turn("draft a plan", turn_id="t1")
    plan = opened.produce("plan", title="Offsite plan")
    result = await m.abandon_turn(opened, error="Stopped", partial_reply="Day one", produced=[plan])
    assert result.status is TurnState.ABANDONED
    assert result.produced_ids == (plan.entity_id,)
    assert (await store.get_entity_snapshot(plan.entity_id)).entity_type == "plan"


async def test_produced_takes_only_produce_records(store: Transport) -> None:
    m = memory(store)
    opened = await m.open_turn("hello", turn_id="t1")
    with pytest.raises(TypeError, match=r"OpenTurn\.produce"):
        await m.close_turn(opened, "hi", produced=[{"entity_type": "note"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="protocol's own"):
        opened.produce("conversation_message", name="x")  # bookkeeping: the protocol's own
    result = await m.close_turn(opened, "hi")  # nothing was stored by the refusals
    assert result.status is TurnState.COMPLETED
