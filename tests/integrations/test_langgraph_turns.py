"""LangGraph / LangChain: the three rules of a turn on astream_turn and ainvoke_turn.

Real graphs (``create_agent`` and a hand-built ``StateGraph``) on langchain-core's fake chat
models, a real EmbeddedStore file; every assertion reads the store back. LangGraph runs on
asyncio only, so these tests do too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langchain", reason="the [langchain] extra is not installed")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from langgraph_support import BLOCK, ScriptedStream, Seen, words
from turn_support import seed, turn_record

from neotoma_agent import EmbeddedStore, NeotomaMemory, TurnState
from neotoma_agent.integrations.langgraph import NeotomaMiddleware, ainvoke_turn, astream_turn

pytestmark = pytest.mark.anyio


class Boom(Exception):
    """The model's own failure."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LangGraph needs a running asyncio loop


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as embedded:
        yield embedded


@pytest.fixture
def memory(store: EmbeddedStore) -> NeotomaMemory:
    return NeotomaMemory(store, conversation_id="chat-1", platform="tests", close_timeout=5.0)


async def stored(memory: NeotomaMemory) -> list[tuple[str, str | None, str | None]]:
    return [(h.status, h.user, h.reply) for h in await memory.history(limit=None)]


async def error_class(store: EmbeddedStore, turn_id: str) -> str:
    record = await turn_record(store, "chat-1", turn_id)
    observations = (await store.list_observations(record["id"])).observations
    return next(str(o.fields["error_class"]) for o in observations if "error_class" in o.fields)


def agent(model: Any, **kw: Any) -> Any:
    return create_agent(model, [], middleware=[NeotomaMiddleware()], **kw)


# ------------------------------------------------------------------ completed


async def test_a_completed_run_streams_the_reply_and_stores_it_once(
    memory: NeotomaMemory,
) -> None:
    graph = agent(GenericFakeChatModel(messages=words("Acme is a customer.")))
    async with astream_turn(graph, "What about Acme Corp?", memory=memory) as s:
        deltas = [d async for d in s.text()]
    assert "".join(deltas) == "Acme is a customer."
    assert len(deltas) > 1  # streamed, not one block
    assert s.reply == "Acme is a customer."
    assert s.result.status is TurnState.COMPLETED
    assert s.final_state["messages"][-1].text == "Acme is a customer."
    assert await stored(memory) == [("completed", "What about Acme Corp?", "Acme is a customer.")]


async def test_ainvoke_turn_stores_the_reply(memory: NeotomaMemory) -> None:
    graph = agent(GenericFakeChatModel(messages=words("Hello there.")))
    run = await ainvoke_turn(graph, "hi", memory=memory)
    assert run.reply == "Hello there."
    assert run.result.completed
    assert await stored(memory) == [("completed", "hi", "Hello there.")]


async def test_a_stream_not_read_runs_to_its_end(memory: NeotomaMemory) -> None:
    graph = agent(GenericFakeChatModel(messages=words("All done.")))
    async with astream_turn(graph, "go", memory=memory) as s:
        pass
    assert s.result.completed
    assert await stored(memory) == [("completed", "go", "All done.")]


async def test_parts_are_the_raw_v2_stream(memory: NeotomaMemory) -> None:
    graph = agent(GenericFakeChatModel(messages=words("Hi.")))
    async with astream_turn(graph, "hi", memory=memory) as s:
        kinds = {part["type"] async for part in s.parts()}
    assert {"messages", "updates", "values"} <= kinds
    assert s.result.completed


async def test_the_user_message_is_stored_before_the_model_runs(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    seen_status: list[str] = []

    async def before() -> None:
        turns = await memory.history(limit=None)
        seen_status.extend(f"{h.status}:{h.user}" for h in turns)

    graph = agent(ScriptedStream(script=["ok"], before=before))
    async with astream_turn(graph, "store me first", memory=memory):
        pass
    assert seen_status == ["open:store me first"]


async def test_any_compiled_graph_not_only_create_agent(memory: NeotomaMemory) -> None:
    model = GenericFakeChatModel(messages=words("From a plain graph."))

    async def call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call)
    builder.add_edge(START, "agent")
    graph = builder.compile()
    async with astream_turn(graph, "hello", memory=memory) as s:
        text = "".join([d async for d in s.text()])
    assert text == "From a plain graph."
    assert await stored(memory) == [("completed", "hello", "From a plain graph.")]


# ------------------------------------------------------------------ raised, cancelled


async def test_a_model_error_abandons_the_turn_with_the_partial_and_propagates(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    error = Boom("model failed")
    graph = agent(ScriptedStream(script=["half ", error]))
    shown: list[str] = []
    with pytest.raises(Boom) as caught:  # noqa: PT012
        async with astream_turn(graph, "Error turn", memory=memory, turn_id="t1") as s:
            async for delta in s.text():
                shown.append(delta)
    assert caught.value is error
    assert shown == ["half "]
    assert s.result.status is TurnState.ABANDONED
    assert await stored(memory) == [("abandoned", "Error turn", "half ")]
    assert (await error_class(store, "t1")).endswith("Boom")


async def test_ainvoke_turn_error_propagates_unchanged(memory: NeotomaMemory) -> None:
    error = Boom("model failed")
    graph = agent(ScriptedStream(script=["half ", error]))
    with pytest.raises(Boom) as caught:
        await ainvoke_turn(graph, "Error turn", memory=memory)
    assert caught.value is error
    assert await stored(memory) == [("abandoned", "Error turn", "half ")]


async def test_task_cancel_mid_reply_abandons_with_what_was_shown(memory: NeotomaMemory) -> None:
    graph = agent(ScriptedStream(script=["shown ", "to user ", BLOCK]))
    shown: list[str] = []
    first = asyncio.Event()

    async def consume() -> None:
        async with astream_turn(graph, "Cancel turn", memory=memory) as s:
            async for delta in s.text():
                shown.append(delta)
                if len(shown) == 2:
                    first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await stored(memory) == [("abandoned", "Cancel turn", "shown to user ")]


async def test_asyncio_timeout_abandons_and_raises_timeout_error(memory: NeotomaMemory) -> None:
    deadline = asyncio.timeout(30)

    async def start_the_deadline() -> None:
        # counts from the model's call: a loaded machine's slow enter must not use it up
        deadline.reschedule(asyncio.get_running_loop().time() + 0.5)

    graph = agent(ScriptedStream(script=["partial ", BLOCK], before=start_the_deadline))
    with pytest.raises(TimeoutError):
        async with deadline:
            await ainvoke_turn(graph, "Timeout turn", memory=memory)
    assert await stored(memory) == [("abandoned", "Timeout turn", "partial ")]


async def test_leaving_the_text_loop_early_abandons_with_what_was_read(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    graph = agent(GenericFakeChatModel(messages=words("one two three four")))
    async with astream_turn(graph, "Stop early", memory=memory, turn_id="t1") as s:
        async for delta in s.text():
            if delta == "two":
                break
    assert s.result.status is TurnState.ABANDONED
    assert await stored(memory) == [("abandoned", "Stop early", "one two")]
    assert await error_class(store, "t1") == "neotoma_agent.StoppedEarly"


async def test_a_caller_error_in_the_block_propagates_unchanged(memory: NeotomaMemory) -> None:
    graph = agent(GenericFakeChatModel(messages=words("never shown")))
    error = KeyError("caller")
    with pytest.raises(KeyError) as caught:
        async with astream_turn(graph, "Caller fails", memory=memory):
            raise error
    assert caught.value is error
    assert await stored(memory) == [("abandoned", "Caller fails", None)]


# ------------------------------------------------------------------ no final reply


def _silent_graph() -> Any:
    """A graph whose one node answers nothing."""

    def no_answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": []}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", no_answer)
    builder.add_edge(START, "agent")
    return builder.compile()


async def test_a_run_without_a_final_ai_message_is_abandoned_quietly(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    async with astream_turn(_silent_graph(), "Anyone?", memory=memory, turn_id="t1") as s:
        pass
    assert s.result.status is TurnState.ABANDONED
    assert s.reply is None
    assert await stored(memory) == [("abandoned", "Anyone?", None)]
    assert await error_class(store, "t1") == "neotoma_agent.integrations.NoFinalReply"


async def test_an_earlier_turns_ai_message_is_not_taken_as_this_runs_reply(
    memory: NeotomaMemory,
) -> None:
    old = {"messages": [HumanMessage("before"), AIMessage("old answer"), HumanMessage("now?")]}
    async with astream_turn(_silent_graph(), old, memory=memory, history=False) as s:
        pass
    assert s.result.status is TurnState.ABANDONED


async def test_ainvoke_turn_without_a_final_reply_is_abandoned_quietly(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    run = await ainvoke_turn(_silent_graph(), "Anyone?", memory=memory, turn_id="t1")
    assert run.result.status is TurnState.ABANDONED
    assert await stored(memory) == [("abandoned", "Anyone?", None)]
    assert await error_class(store, "t1") == "neotoma_agent.integrations.NoFinalReply"


async def test_an_interrupt_without_a_checkpointer_is_no_final_reply(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    # Without a checkpointer nothing can resume the run: the turn is not left open.
    def ask(state: MessagesState) -> dict[str, Any]:
        interrupt({"question": "go on?"})
        return {"messages": [AIMessage("never")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", ask)
    builder.add_edge(START, "agent")
    async with astream_turn(builder.compile(), "Ask me", memory=memory, turn_id="t1") as s:
        pass
    assert s.interrupted
    assert s.result.status is TurnState.ABANDONED
    assert await stored(memory) == [("abandoned", "Ask me", None)]
    assert await error_class(store, "t1") == "neotoma_agent.integrations.NoFinalReply"


# ------------------------------------------------------------------ which text is the reply


async def test_a_subgraphs_model_text_is_not_the_reply(memory: NeotomaMemory) -> None:
    # A node that runs a subgraph whose own model node talks, then the top-level model
    # answers: only the answer is streamed as the reply, with or without subgraph parts.
    inner_model = GenericFakeChatModel(messages=itertools.repeat("inner chatter"))
    outer_model = GenericFakeChatModel(messages=itertools.repeat("The answer."))

    async def inner_call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await inner_model.ainvoke(state["messages"])]}

    inner = StateGraph(MessagesState)
    inner.add_node("model", inner_call)
    inner.add_edge(START, "model")
    research = inner.compile()

    async def outer_call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await outer_model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("research", research)
    builder.add_node("model", outer_call)
    builder.add_edge(START, "research")
    builder.add_edge("research", "model")
    graph = builder.compile()
    for subgraphs in (False, True):
        async with astream_turn(graph, "Look it up", memory=memory, subgraphs=subgraphs) as s:
            text = "".join([d async for d in s.text()])
        assert text == "The answer."
        assert s.reply == "The answer."
    assert [r for _, _, r in await stored(memory)] == ["The answer.", "The answer."]


async def test_a_structured_response_is_stored_as_its_json(memory: NeotomaMemory) -> None:
    from typing_extensions import TypedDict

    class State(TypedDict):
        messages: Annotated[list[Any], add_messages]
        structured_response: dict[str, Any]

    def answer(state: State) -> dict[str, Any]:
        return {
            "messages": [AIMessage('{"name": "Acme Corp"}')],
            "structured_response": {"name": "Acme Corp", "customer": True},
        }

    builder = StateGraph(State)
    builder.add_node("model", answer)
    builder.add_edge(START, "model")
    run = await ainvoke_turn(builder.compile(), "Who?", memory=memory)
    assert run.reply == '{"name": "Acme Corp", "customer": true}'
    assert await stored(memory) == [("completed", "Who?", run.reply)]


# ------------------------------------------------------------------ context and history


async def test_the_middleware_adds_the_turn_context_to_the_system_message(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    await seed(store, "Acme Corp")
    seen = Seen()
    graph = agent(ScriptedStream(script=["ok"], seen=seen), system_prompt="You help.")
    async with astream_turn(graph, "What about Acme Corp?", memory=memory):
        pass
    [system] = seen.systems
    assert system.startswith("You help.\n\n")
    assert 'company "Acme Corp"' in system


async def test_context_can_be_turned_off_or_budgeted(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    await seed(store, "Acme Corp")
    seen = Seen()
    graph = agent(ScriptedStream(script=["ok"], seen=seen), system_prompt="You help.")
    async with astream_turn(graph, "What about Acme Corp?", memory=memory, context=False):
        pass
    async with astream_turn(graph, "What about Acme Corp?", memory=memory, context_chars=30):
        pass
    assert seen.systems[0] == "You help."
    assert len(seen.systems[1]) <= len("You help.\n\n") + 30


async def test_the_middleware_does_nothing_outside_a_turn(memory: NeotomaMemory) -> None:
    seen = Seen()
    graph = agent(ScriptedStream(script=["ok"], seen=seen), system_prompt="You help.")
    await graph.ainvoke({"messages": [HumanMessage("What about Acme Corp?")]})
    assert seen.systems == ["You help."]
    assert await stored(memory) == []


async def test_the_middleware_serves_a_run_inside_a_plain_memory_turn(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    # Under memory.turn() (not astream_turn) the middleware finds the turn by current_turn():
    # the context reaches the model and the rules are the hand-written block's to keep.
    await seed(store, "Acme Corp")
    seen = Seen()
    graph = agent(ScriptedStream(script=["ok"], seen=seen), system_prompt="You help.")
    async with memory.turn("What about Acme Corp?") as t:
        state = await graph.ainvoke({"messages": [HumanMessage(t.user_message)]})
        t.reply = state["messages"][-1].text
    [system] = seen.systems
    assert system.startswith("You help.\n\n")
    assert 'company "Acme Corp"' in system
    assert await stored(memory) == [("completed", "What about Acme Corp?", "ok")]


async def test_without_a_checkpointer_earlier_turns_are_given_to_the_model(
    memory: NeotomaMemory,
) -> None:
    seen = Seen()
    graph = agent(ScriptedStream(script=["answer"], seen=seen))
    async with astream_turn(graph, "first", memory=memory):
        pass
    async with astream_turn(graph, "second", memory=memory):
        pass
    roles = [(type(m).__name__, m.text) for m in seen.messages[1] if m.type != "system"]
    assert roles == [
        ("HumanMessage", "first"),
        ("AIMessage", "answer"),
        ("HumanMessage", "second"),
    ]


async def test_the_context_block_shows_earlier_turns_only_when_the_messages_carry_none(
    memory: NeotomaMemory,
) -> None:
    seen = Seen()
    graph = agent(ScriptedStream(script=["answer"], seen=seen), system_prompt="You help.")
    async with astream_turn(graph, "first", memory=memory):
        pass
    async with astream_turn(graph, "second", memory=memory):  # first goes in as messages
        pass
    async with astream_turn(graph, "third", memory=memory, history=False):
        pass
    assert "user: first" not in seen.systems[1]
    assert "user: first" in seen.systems[2]
    assert "user: second" in seen.systems[2]
    checkpointed = agent(
        ScriptedStream(script=["answer"], seen=seen),
        system_prompt="You help.",
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "th-ctx"}}
    async with astream_turn(checkpointed, "fourth", memory=memory, config=config):
        pass  # the thread carries what it holds: the block shows no earlier turn
    assert "user: third" not in seen.systems[3]


async def test_with_a_checkpointer_history_is_not_fed_twice(memory: NeotomaMemory) -> None:
    seen = Seen()
    graph = agent(ScriptedStream(script=["answer"], seen=seen), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "th-1"}}
    async with astream_turn(graph, "first", memory=memory, config=config):
        pass
    async with astream_turn(graph, "second", memory=memory, config=config) as s:
        pass
    roles = [(type(m).__name__, m.text) for m in seen.messages[1] if m.type != "system"]
    assert roles == [
        ("HumanMessage", "first"),
        ("AIMessage", "answer"),
        ("HumanMessage", "second"),
    ]
    assert s.reply == "answer"
    assert [r for _, _, r in await stored(memory)] == ["answer", "answer"]


# ------------------------------------------------------------------ non-text input, output


async def test_a_message_of_parts_is_stored_as_its_text_with_placeholders(
    memory: NeotomaMemory,
) -> None:
    graph = agent(GenericFakeChatModel(messages=words("A cat.")))
    content = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image", "url": "https://example.invalid/cat.png"},
    ]
    async with astream_turn(graph, {"messages": [HumanMessage(content)]}, memory=memory):
        pass
    assert await stored(memory) == [("completed", "What is in this picture?\n[image]", "A cat.")]


async def test_a_state_without_messages_needs_user_message_and_reply(
    memory: NeotomaMemory,
) -> None:
    from typing_extensions import TypedDict

    class State(TypedDict):
        question: str
        answer: str

    def node(state: State) -> dict[str, Any]:
        return {"answer": state["question"].upper()}

    builder = StateGraph(State)
    builder.add_node("answer", node)
    builder.add_edge(START, "answer")
    graph = builder.compile()
    with pytest.raises(ValueError, match="user_message"):
        async with astream_turn(graph, {"question": "hi"}, memory=memory):
            pass
    async with astream_turn(
        graph,
        {"question": "hi"},
        memory=memory,
        user_message="hi",
        reply=lambda state: state["answer"],
    ) as s:
        pass
    assert s.reply == "HI"
    assert await stored(memory) == [("completed", "hi", "HI")]


async def test_bad_arguments_are_refused_before_anything_is_stored(
    memory: NeotomaMemory,
) -> None:
    graph = agent(GenericFakeChatModel(messages=words("x")))
    with pytest.raises(ValueError, match="history"):
        astream_turn(graph, "hi", memory=memory, history="sometimes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stream_mode"):
        astream_turn(graph, "hi", memory=memory, stream_mode="values")
    with pytest.raises(TypeError, match="NeotomaMemory"):
        astream_turn(graph, "hi", memory="memory")  # type: ignore[arg-type]
    assert await stored(memory) == []
