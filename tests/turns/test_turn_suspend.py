"""``t.suspend()``: a turn left open on a normal exit, finished later under the same id."""

from __future__ import annotations

import anyio
import pytest
from turn_support import capture_logs, db_path, memory, messages, seed, store, turn_record

from neotoma_agent import TurnState, TurnStateError
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio


class Boom(Exception):
    """The agent's own failure."""


async def test_a_suspended_turn_stores_nothing_on_exit_and_stays_open(
    store: EmbeddedStore,
) -> None:
    await seed(store, "Acme Corp")
    async with memory(store).turn("Email Acme Corp", turn_id="t1") as t:
        t.reply = "Waiting for your approval"
        t.suspend()
    assert t.state is TurnState.SUSPENDED
    assert t.result.status is TurnState.SUSPENDED
    assert t.result.stored_status == "open"
    assert not t.result.completed
    assert t.result.assistant_message_id is None
    assert len(t.result.retrieved_ids) == 1
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "open"
    stored = await messages(store, t.result.conversation_entity_id or "")
    assert list(stored) == ["chat-1:t1"]  # the user message only: no partial was stored


async def test_the_turn_that_resumes_it_completes_it_once(store: EmbeddedStore) -> None:
    mem = memory(store)
    async with mem.turn("Email Acme Corp", turn_id="t1") as first:
        first.suspend()
    async with mem.turn("Email Acme Corp", turn_id="t1") as resumed:
        resumed.reply = "Sent."
    assert resumed.result.completed
    assert resumed.result.user_message_id == first.result.user_message_id
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "completed"
    history = await mem.history()
    assert [(h.turn_id, h.status, h.user, h.reply) for h in history] == [
        ("t1", "completed", "Email Acme Corp", "Sent.")
    ]


async def test_a_body_that_fails_after_suspend_is_abandoned(store: EmbeddedStore) -> None:
    with pytest.raises(Boom):  # noqa: PT012
        async with memory(store).turn("Email Acme Corp", turn_id="t1") as t:
            t.reply = "partial"
            t.suspend()
            raise Boom
    assert t.state is TurnState.ABANDONED
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"


async def test_a_body_cancelled_after_suspend_is_abandoned(store: EmbeddedStore) -> None:
    with anyio.CancelScope() as scope:
        async with memory(store).turn("Email Acme Corp", turn_id="t1") as t:
            t.suspend()
            scope.cancel()
            await anyio.sleep(5)
    assert t.state is TurnState.ABANDONED


async def test_suspend_needs_an_open_turn(store: EmbeddedStore) -> None:
    t = memory(store).turn("hello")
    with pytest.raises(TurnStateError):
        t.suspend()
    async with t:
        pass
    with pytest.raises(TurnStateError):
        t.suspend()


async def test_what_a_suspended_exit_drops_is_counted_in_a_warning(store: EmbeddedStore) -> None:
    await seed(store, "Acme Corp")
    with capture_logs() as logs:
        async with memory(store).turn("Email Acme Corp", turn_id="t1") as t:
            t.reply = "shown"
            t.remember("task", title="Email Acme")
            t.suspend()
    [event] = [e for e in logs if e["event"] == "turn.suspended"]
    assert event["log_level"] == "warning"
    assert (event["reply_chars"], event["produced"], event["cited"]) == (5, 1, 0)
    assert "shown" not in str(event)


async def test_tool_calls_the_caller_keeps_are_not_counted_as_dropped(
    store: EmbeddedStore,
) -> None:
    with capture_logs() as logs:
        async with memory(store).turn("Email Acme Corp", turn_id="t1") as kept:
            kept.record_tool("lookup", args={"name": "Acme"}, call_id="c1")
            kept.suspend(tools_kept=True)
        async with memory(store).turn("Email Acme Corp", turn_id="t2") as dropped:
            dropped.record_tool("lookup", args={"name": "Acme"}, call_id="c1")
            dropped.suspend()
    events = [e for e in logs if e["event"] == "turn.suspended"]
    assert [(e["turn_id"], e["log_level"]) for e in events] == [("t1", "info"), ("t2", "warning")]
    assert events[1]["tools"] == 1
    # Kept or not, they are on the result, for the turn that finishes it.
    assert [c.call_id for c in kept.result.tools] == [c.call_id for c in dropped.result.tools]
