"""The exit guarantees of a turn: whatever the body does, both halves or an abandoned record."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from turn_support import capture_logs, db_path, memory, messages, seed, store, turn_record

from neotoma_agent import TurnState
from neotoma_agent.exceptions import ConnectionLost, TurnCloseError
from neotoma_agent.testing import FaultyTransport, RecordingTransport, key_phase
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio


class Boom(Exception):
    """The agent's own failure."""


def closing_store(method: str, args: tuple[Any, ...], kwargs: Any) -> bool:
    return key_phase(str(kwargs["idempotency_key"])) != "user"


def user_store(method: str, args: tuple[Any, ...], kwargs: Any) -> bool:
    return key_phase(str(kwargs["idempotency_key"])) == "user"


async def chunks(*parts: str, pause: float = 0.0) -> AsyncIterator[str]:
    for part in parts:
        await anyio.sleep(pause)
        yield part


async def assert_no_orphan(store: EmbeddedStore, turn_id: str) -> dict[str, Any]:
    """The user message is stored, and the turn is either completed or abandoned."""
    record = await turn_record(store, "chat-1", turn_id)
    assert record["status"] in ("completed", "abandoned")
    related = await store.retrieve_entity_by_identifier(f"chat-1:{turn_id}", limit=100)
    names = {e.canonical_name for e in related.entities}
    assert f"conversation_message:chat-1:{turn_id}" in names
    if record["status"] == "completed":
        assert f"conversation_message:chat-1:{turn_id}:assistant" in names
    return record


async def error_class_of(store: EmbeddedStore, record_id: str) -> str:
    # The error class is an undeclared field: kept on the observation, not in the snapshot.
    observations = (await store.list_observations(record_id)).observations
    return next(str(o.fields["error_class"]) for o in observations if "error_class" in o.fields)


async def test_body_exception_propagates_unchanged_and_abandons_the_turn(
    store: EmbeddedStore,
) -> None:
    error = Boom("the model failed")
    with pytest.raises(Boom) as caught:
        async with memory(store).turn("hello", turn_id="t1") as t:
            raise error
    assert caught.value is error
    assert t.state is TurnState.ABANDONED
    record = await assert_no_orphan(store, "t1")
    assert record["status"] == "abandoned"
    assert (await error_class_of(store, record["id"])).endswith("test_turn.Boom")
    assert t.result.error_class is not None
    assert t.result.assistant_message_id is None  # nothing was shown, nothing is stored
    assert list(await messages(store, t.conversation_entity_id)) == ["chat-1:t1"]


async def test_cancelled_before_the_first_chunk_is_abandoned_without_a_reply(
    store: EmbeddedStore,
) -> None:
    seen: list[type[BaseException]] = []
    with anyio.CancelScope() as scope:
        async with memory(store).turn("hello", turn_id="t1") as t:
            scope.cancel()
            try:
                await anyio.sleep(10)
            except anyio.get_cancelled_exc_class() as exc:
                seen.append(type(exc))
                raise
    assert scope.cancelled_caught
    assert seen == [anyio.get_cancelled_exc_class()]
    record = await assert_no_orphan(store, "t1")
    assert record["status"] == "abandoned"
    assert await error_class_of(store, record["id"]) == t.result.error_class
    assert list(await messages(store, t.conversation_entity_id)) == ["chat-1:t1"]


async def test_cancelled_mid_stream_keeps_the_partial_reply(store: EmbeddedStore) -> None:
    with anyio.CancelScope() as scope:
        # aclosing: a stream left early is closed now, not by the garbage collector.
        async with (
            memory(store).turn("tell me a story", turn_id="t1") as t,
            aclosing(t.stream(chunks("Once ", "upon ", "a ", "time", "..."))) as s,
        ):
            async for chunk in s:
                if chunk == "a ":
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert t.state is TurnState.ABANDONED
    assert (await assert_no_orphan(store, "t1"))["status"] == "abandoned"
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == "Once upon a "


async def test_cancelled_after_the_last_chunk_keeps_the_whole_reply(store: EmbeddedStore) -> None:
    with anyio.CancelScope() as scope:
        async with memory(store).turn("tell me a story", turn_id="t1") as t:
            async for _ in t.stream(chunks("The ", "end.")):
                pass
            scope.cancel()
            await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert (await assert_no_orphan(store, "t1"))["status"] == "abandoned"
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == "The end."


async def test_a_deadline_that_expires_mid_stream_still_closes_the_turn(
    store: EmbeddedStore,
) -> None:
    with anyio.CancelScope() as scope:
        async with (
            memory(store).turn("slow", turn_id="t1") as t,
            aclosing(t.stream(chunks(*["x"] * 1000, pause=0.01))) as s,
        ):
            # The deadline counts from the body's start: an enter slowed by a loaded
            # machine must not use it up before the stream begins.
            scope.deadline = anyio.current_time() + 0.2
            async for _ in s:
                pass
    assert scope.cancelled_caught
    await assert_no_orphan(store, "t1")
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == t.reply
    assert 0 < len(t.reply) < 1000


async def test_a_hung_closing_store_ends_at_close_timeout(store: EmbeddedStore) -> None:
    faulty = FaultyTransport(store).hang("store", when=closing_store)
    started = time.perf_counter()
    with pytest.raises(TurnCloseError, match="close_timeout") as caught:
        async with memory(faulty, close_timeout=0.2).turn("hello") as t:
            t.reply = "hi"
    assert time.perf_counter() - started < 3
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert t.state is TurnState.FAILED
    assert t.result.stored_status is None


async def test_a_hung_closing_store_after_a_failed_body_reraises_the_body_error(
    store: EmbeddedStore,
) -> None:
    faulty = FaultyTransport(store).hang("store", when=closing_store)
    with capture_logs() as logs, pytest.raises(Boom):
        async with memory(faulty, close_timeout=0.2).turn("hello"):
            raise Boom
    failed = [e for e in logs if e["event"] == "turn.close_failed"]
    assert failed
    assert failed[0]["log_level"] == "error"
    assert failed[0]["close_error_class"] == "TimeoutError"


async def test_a_failing_closing_store_raises_turn_close_error_chained(
    store: EmbeddedStore,
) -> None:
    cause = ConnectionLost("connection reset")
    faulty = FaultyTransport(store).fail("store", cause, when=closing_store)
    with pytest.raises(TurnCloseError) as caught:
        async with memory(faulty).turn("hello") as t:
            t.reply = "hi"
    assert caught.value.__cause__ is cause
    assert t.result.close_error is cause
    assert t.result.status is TurnState.FAILED


async def test_a_failing_user_store_does_not_open_the_turn(store: EmbeddedStore) -> None:
    cause = ConnectionLost("refused")
    faulty = FaultyTransport(store).fail("store", cause, when=user_store)
    ran = False
    t = memory(faulty).turn("hello")
    with pytest.raises(ConnectionLost) as caught:
        async with t:
            ran = True
    assert caught.value is cause
    assert not ran
    assert t.state is TurnState.FAILED


async def test_cancelled_while_entering_after_the_user_store_is_abandoned(
    store: EmbeddedStore,
) -> None:
    await seed(store, "Acme Corp")
    faulty = FaultyTransport(store).hang("retrieve_entity_by_identifier")
    recorder = RecordingTransport(faulty)
    mem = memory(recorder, retrieval_timeout=30)
    body_ran = False
    t = mem.turn("Tell me about Acme Corp", turn_id="t1")

    async def cancel_once_the_user_store_ended(scope: anyio.CancelScope) -> None:
        # the enter waits for the hung retrieval after its user store: cancel there, on any
        # machine's speed (a fixed deadline could fire before the store on a loaded one).
        # Polls the recorder, which has no event to await.
        with anyio.fail_after(30):
            while not any(c.ended is not None for c in recorder.calls_to("store")):  # noqa: ASYNC110
                await anyio.sleep(0.005)
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_once_the_user_store_ended, tg.cancel_scope)
        async with t:
            body_ran = True
    assert not body_ran
    assert t.state is TurnState.ABANDONED
    assert t.result.stored_status == "abandoned"
    assert (await assert_no_orphan(store, "t1"))["status"] == "abandoned"
    assert len(recorder.calls_to("store")) == 2


async def test_an_empty_reply_is_still_a_reply(store: EmbeddedStore) -> None:
    async with memory(store).turn("ok", turn_id="t1") as t:
        pass
    assert (await assert_no_orphan(store, "t1"))["status"] == "completed"
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == ""


async def test_ten_thousand_appended_chunks_are_stored_as_their_concatenation(
    store: EmbeddedStore,
) -> None:
    parts = [f"{i}:é🙂\n" if i % 7 else f"<{i}>" for i in range(10_000)]
    async with memory(store).turn("stream please") as t:
        for i, part in enumerate(parts):
            if i % 2:
                t.append(part)
            else:
                t.reply += part
    stored = await messages(store, t.conversation_entity_id)
    assert stored[f"{t.turn_key}:assistant"]["content"] == "".join(parts)
    assert t.result.reply_chars == len("".join(parts))


async def test_stream_reyields_every_chunk_in_order(store: EmbeddedStore) -> None:
    parts = [str(i) for i in range(10_000)]
    received: list[str] = []
    async with memory(store).turn("stream please") as t:
        async for chunk in t.stream(chunks(*parts)):
            received.append(chunk)
    assert received == parts
    stored = await messages(store, t.conversation_entity_id)
    assert stored[f"{t.turn_key}:assistant"]["content"] == "".join(parts)


async def test_non_str_chunks_are_refused_and_abandon_the_turn(store: EmbeddedStore) -> None:
    t = memory(store).turn("hello", turn_id="t1")

    async def body() -> None:
        async with t:
            t.append("fine ")
            t.append(b"bytes")  # type: ignore[arg-type]

    with pytest.raises(TypeError, match="str"):
        await body()
    assert (await assert_no_orphan(store, "t1"))["status"] == "abandoned"
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == "fine "


async def test_a_turn_abandoned_twice_differently_records_both(store: EmbeddedStore) -> None:
    mem = memory(store)
    for partial in ("First try", "Second, longer try"):
        t = mem.turn("hello", turn_id="t1")

        async def body(t: Any = t, partial: str = partial) -> None:
            async with t:
                t.reply = partial
                raise Boom

        with pytest.raises(Boom):
            await body()
        assert t.result.stored_status == "abandoned"
    assert (await assert_no_orphan(store, "t1"))["status"] == "abandoned"
    stored = await messages(store, t.conversation_entity_id)
    assistant = stored["chat-1:t1:assistant"]
    assert assistant["content"] == "Second, longer try"
    observed = (await store.list_observations(assistant["id"])).observations
    assert {o.fields["content"] for o in observed} == {"First try", "Second, longer try"}
