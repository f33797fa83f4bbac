"""Tool calls in a sync turn: ``with t.tool(...)``, ``t.record_tool``, ``current_turn()``,
and the explicit API's ``tools=``, written in the closing store (read back from it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sync_support import ctrl_c, new_transport, sync_memory, sync_store
from turn_support import edges, turn_record

from neotoma_agent import ToolCall
from neotoma_agent.sync import SyncStore, SyncTurn, current_turn

__all__ = ["ctrl_c", "new_transport", "sync_store"]  # fixtures


def snapshot(store: SyncStore, entity_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        snap = await store.transport.get_entity_snapshot(entity_id)
        return {"entity_type": snap.entity_type, **snap.snapshot}

    return store.call(read)


def test_tool_calls_are_written_in_the_closing_store(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    with memory.turn("Flights to Lisbon?", turn_id="t1", model="gpt-x") as t:
        with t.tool("search_flights", {"to": "LIS"}) as call:
            call.result = {"offers": 2}
        t.record_tool("book", args={"offer": 1}, result="ok", call_id="toolu_01")
        t.record_tool("book", args={"offer": 1}, result="ok", call_id="toolu_01")  # no-op
        t.reply = "Booked."
    assert [(c.name, c.status) for c in t.result.tools] == [
        ("search_flights", "ok"),
        ("book", "ok"),
    ]
    stored = [snapshot(sync_store, i) for i in t.result.tool_ids]
    assert sorted((s["entity_type"], s["tool_name"]) for s in stored) == [
        ("tool_invocation", "book"),
        ("tool_invocation", "search_flights"),
    ]
    record = sync_store.call(turn_record, sync_store.transport, "chat-1", "t1")
    refers_to = sync_store.call(edges, sync_store.transport, record["id"], "REFERS_TO")
    assert set(t.result.tool_ids) <= {e.target_entity_id for e in refers_to}


def test_ctrl_c_inside_a_tool_ends_it_cancelled_and_the_turn_abandoned(
    sync_store: SyncStore, ctrl_c: Callable[[float], Any]
) -> None:
    memory = sync_memory(sync_store)
    turn = memory.turn("Slow search", turn_id="t1")
    try:
        with turn as t, t.tool("search", {"q": "slow"}):
            t.reply = "Searching"
            ctrl_c(0.05)
            time.sleep(5)  # the tool blocks until Ctrl-C
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("no KeyboardInterrupt")
    assert turn.result.stored_status == "abandoned"
    assert turn.result.error_class == "KeyboardInterrupt"
    ((name, status),) = [(c.name, c.status) for c in turn.result.tools]
    assert (name, status) == ("search", "cancelled")
    (tool_id,) = turn.result.tool_ids
    assert snapshot(sync_store, tool_id)["result_status"] == "cancelled"


def test_current_turn_is_the_sync_turn_whose_body_runs_in_this_thread(
    sync_store: SyncStore,
) -> None:
    memory = sync_memory(sync_store)
    seen: dict[str, SyncTurn | None] = {}
    assert current_turn() is None

    def other_thread() -> None:
        seen["other"] = current_turn()  # not started in the body's context

    with memory.turn("hi") as t:
        assert current_turn() is t
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        with memory.turn("nested") as inner:
            assert current_turn() is inner
            inner.reply = "in"
        assert current_turn() is t
        t.reply = "out"
    assert current_turn() is None
    assert seen == {"other": None}


def test_the_explicit_api_closes_a_turn_with_calls_made_elsewhere(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    opened = memory.open_turn("Book it", turn_id="t1")
    here = opened.record_tool("book", args={"room": 1}, result="ok")
    elsewhere = ToolCall.from_json(ToolCall.create("search", args={"q": "x"}).to_json())
    result = memory.close_turn(opened, "Booked.", tools=[elsewhere, here])
    assert {c.name for c in result.tools} == {"search", "book"}
    assert {snapshot(sync_store, i)["tool_name"] for i in result.tool_ids} == {"search", "book"}
