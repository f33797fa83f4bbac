"""with_memory: sync, async and streaming agents, each turned into one stored turn."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest
from turn_support import db_path, memory, messages, seed, store, targets, turn_record

from neotoma_agent import Turn, TurnState
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.wrap import AgentReply, StoppedEarly, with_memory

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio


async def test_a_sync_agent_is_stored_and_sees_the_retrieved_entities(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")

    def agent(message: str, turn: Turn) -> str:
        return f"{message} -> {[e.name for e in turn.retrieved]}"

    wrapped = with_memory(agent, transport=store, conversation_id="chat-1")
    answer = await wrapped("Tell me about Acme Corp", turn_id="t1")
    assert isinstance(answer, AgentReply)
    assert answer.reply == "Tell me about Acme Corp -> ['Acme Corp']"
    assert answer.result.completed
    stored = await messages(store, answer.result.conversation_entity_id or "")
    assert stored["chat-1:t1:assistant"]["content"] == answer.reply
    assert await targets(store, answer.result.assistant_message_id or "", "REFERS_TO") == {acme}


async def test_a_sync_agent_runs_off_the_event_loop(store: EmbeddedStore) -> None:
    loop_ran = threading.Event()

    def slow_agent(message: str) -> str:
        # A blocking LLM client: it returns once the event loop has run ten ticks while it
        # blocks, which only an agent off the loop can see (on the loop it waits 30 s).
        return "done" if loop_ran.wait(timeout=30) else "the event loop was blocked"

    async def ticker() -> None:
        for _ in range(10):
            await anyio.sleep(0.01)
        loop_ran.set()

    wrapped = with_memory(slow_agent, memory=memory(store))
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        answer = await wrapped("hello")
        tg.cancel_scope.cancel()
    assert answer.reply == "done"


async def test_an_async_agent_may_return_or_write_the_reply(store: EmbeddedStore) -> None:
    async def returns(message: str) -> str:
        await anyio.lowlevel.checkpoint()
        return message.upper()

    async def writes(message: str, turn: Turn) -> None:
        turn.reply = "written"
        turn.cite(*turn.retrieved)

    assert (await with_memory(returns, memory=memory(store))("hi")).reply == "HI"
    assert (await with_memory(writes, memory=memory(store))("hi")).reply == "written"


async def test_an_async_generator_agent_streams_and_stores_the_concatenation(
    store: EmbeddedStore,
) -> None:
    async def agent(message: str) -> AsyncIterator[str]:
        for word in ("Hello", ", ", "world", "!"):
            await anyio.lowlevel.checkpoint()
            yield word

    wrapped = with_memory(agent, memory=memory(store))
    seen: list[str] = []
    answer = await wrapped("hi", turn_id="t1", on_chunk=seen.append)
    assert seen == ["Hello", ", ", "world", "!"]
    assert answer.reply == "Hello, world!"

    received: list[str] = []
    async with wrapped.stream("hi again", turn_id="t2") as s:
        async for chunk in s:
            received.append(chunk)
    assert "".join(received) == s.reply == "Hello, world!"
    assert s.result.completed
    stored = await messages(store, s.result.conversation_entity_id or "")
    assert stored["chat-1:t2:assistant"]["content"] == "Hello, world!"


async def test_leaving_a_stream_early_abandons_with_the_partial_reply(store: EmbeddedStore) -> None:
    closed = False

    async def agent(message: str) -> AsyncIterator[str]:
        nonlocal closed
        try:
            for i in range(100):
                yield f"{i} "
        finally:
            closed = True

    wrapped = with_memory(agent, memory=memory(store))
    async with wrapped.stream("count", turn_id="t1") as s:
        async for chunk in s:
            if chunk == "2 ":
                break
    assert closed
    assert s.result.status is TurnState.ABANDONED
    assert s.result.error_class is not None
    assert s.result.error_class.endswith(StoppedEarly.__qualname__)
    stored = await messages(store, s.result.conversation_entity_id or "")
    assert stored["chat-1:t1:assistant"]["content"] == "0 1 2 "


async def test_an_agent_error_propagates_after_the_turn_is_abandoned(store: EmbeddedStore) -> None:
    async def agent(message: str) -> AsyncIterator[str]:
        yield "partial "
        raise RuntimeError("model overloaded")

    wrapped = with_memory(agent, memory=memory(store))
    with pytest.raises(RuntimeError, match="overloaded"):
        await wrapped("hi", turn_id="t1")
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"


async def test_a_sync_agent_returning_a_non_str_abandons_the_turn(store: EmbeddedStore) -> None:
    wrapped = with_memory(lambda message: 42, memory=memory(store))
    with pytest.raises(TypeError, match="str"):
        await wrapped("hi", turn_id="t1")
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_agent_returning_none_without_a_reply_abandons_the_turn(
    store: EmbeddedStore, kind: str
) -> None:
    async def forgot_async(message: str) -> None:
        await anyio.lowlevel.checkpoint()

    def forgot_sync(message: str) -> None:
        pass

    agent = forgot_sync if kind == "sync" else forgot_async
    wrapped = with_memory(agent, memory=memory(store))
    with pytest.raises(TypeError, match="returned None and wrote no reply"):
        await wrapped("hi", turn_id="t1")
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"


def test_with_memory_needs_a_memory_or_a_transport_and_conversation_id() -> None:
    store = EmbeddedStore.open(":memory:")
    try:
        with pytest.raises(ValueError, match="memory="):
            with_memory(lambda m: m)
        with pytest.raises(ValueError, match="not both"):
            with_memory(lambda m: m, memory=memory(store), transport=store)
        wrapped = with_memory(lambda m: m, transport=store, conversation_id="c", platform="x")
        assert wrapped.memory.platform == "x"
        assert wrapped.kind == "sync"
    finally:
        anyio.run(store.aclose)


async def test_a_non_streaming_agent_streams_its_reply_as_one_chunk(store: EmbeddedStore) -> None:
    wrapped = with_memory(lambda message: f"echo: {message}", memory=memory(store))
    async with wrapped.stream("hello") as stream:
        chunks = [chunk async for chunk in stream]
    assert chunks == ["echo: hello"]
    assert stream.result.status is TurnState.COMPLETED
    stored = await messages(store, stream.result.conversation_entity_id or "")
    [assistant] = [m for m in stored.values() if m["role"] == "assistant"]
    assert assistant["content"] == "echo: hello"
