"""LangGraph tool calls in a turn: recorded once each with the tool-call API (by
NeotomaMiddleware in ``create_agent``, from the stream for any other graph), carried across
an interrupt, and reachable from the tool through ``current_turn()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain", reason="the [langchain] extra is not installed")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt
from langgraph_support import ToolFake, tool_call

from neotoma_agent import EmbeddedStore, NeotomaMemory, TurnState, current_turn
from neotoma_agent.integrations.langgraph import NeotomaMiddleware, ainvoke_turn, astream_turn

pytestmark = pytest.mark.anyio


class Refused(Exception):
    """A tool's own failure."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as embedded:
        yield embedded


@pytest.fixture
def memory(store: EmbeddedStore) -> NeotomaMemory:
    return NeotomaMemory(store, conversation_id="chat-1", platform="tests", close_timeout=5.0)


@tool
def lookup(name: str) -> str:
    """Look a company up."""
    return f"{name} is a customer"


@tool
def failing(name: str) -> str:
    """A tool that fails."""
    raise Refused("no")


@tool
def approve(what: str) -> str:
    """Ask a person first."""
    return f"approved: {interrupt({'ask': what})}"


@tool
def note(text: str) -> str:
    """Remember a note in the current turn."""
    turn = current_turn()
    assert turn is not None
    return turn.remember("task", title=text)


started = asyncio.Event()


@tool
async def slow(name: str) -> str:
    """A tool that never ends."""
    started.set()
    await asyncio.Event().wait()
    return "never"


async def stored_calls(store: EmbeddedStore) -> list[tuple[str, str]]:
    found = await store.query_entities(entity_type="tool_invocation", limit=100)
    return sorted(
        (str(e.snapshot["tool_name"]), str(e.snapshot["result_status"])) for e in found.entities
    )


def two_step(tools: list[Any], first: AIMessage, answer: str = "Done.") -> Any:
    model = ToolFake(responses=[first, AIMessage(answer)])
    return create_agent(model, tools, middleware=[NeotomaMiddleware()])


async def test_a_tool_call_is_recorded_once_with_its_details(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    graph = two_step(
        [lookup], tool_call("lookup", {"name": "Acme"}, "call-1"), "Acme is a customer."
    )
    async with astream_turn(graph, "Who is Acme?", memory=memory) as s:
        text = "".join([d async for d in s.text()])
    assert text == "Acme is a customer."
    assert s.reply == "Acme is a customer."
    [call] = s.result.tools
    assert (call.name, call.status, call.call_id) == ("lookup", "ok", "call-1")
    assert call.args == {"name": "Acme"}
    assert call.result == "Acme is a customer"
    assert call.duration_ms is not None
    assert await stored_calls(store) == [("lookup", "ok")]


async def test_the_pre_tool_message_is_not_the_reply(memory: NeotomaMemory) -> None:
    ask = AIMessage(
        "Let me check.", tool_calls=[{"name": "lookup", "args": {"name": "A"}, "id": "c1"}]
    )
    graph = two_step([lookup], ask, "Final.")
    async with astream_turn(graph, "Who is A?", memory=memory) as s:
        deltas = [d async for d in s.text()]
    assert deltas == ["Final."]
    assert s.reply == "Final."


async def test_a_failing_tool_is_recorded_as_an_error_and_abandons_the_turn(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    graph = two_step([failing], tool_call("failing", {"name": "x"}, "call-1"))
    with pytest.raises(Refused):
        await ainvoke_turn(graph, "Try it", memory=memory)
    assert await stored_calls(store) == [("failing", "error")]
    [h] = await memory.history()
    assert h.status == "abandoned"


async def test_a_tool_cancelled_with_the_run_is_recorded_cancelled(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    started.clear()
    graph = two_step([slow], tool_call("slow", {"name": "x"}, "call-1"))
    task = asyncio.create_task(ainvoke_turn(graph, "Slow one", memory=memory))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await stored_calls(store) == [("slow", "cancelled")]


async def test_a_tool_reaches_the_turn_through_current_turn(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    graph = two_step([note], tool_call("note", {"text": "call Bob"}, "call-1"))
    run = await ainvoke_turn(graph, "Note it", memory=memory)
    [produced] = run.result.produced_ids
    snapshot = await store.get_entity_snapshot(produced)
    assert snapshot.snapshot["title"] == "call Bob"


async def test_a_plain_graph_with_a_tool_node_records_calls_from_the_stream(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    model = ToolFake(responses=[tool_call("lookup", {"name": "Acme"}, "call-1"), AIMessage("Ok.")])

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    run = await ainvoke_turn(builder.compile(), "Who is Acme?", memory=memory)
    assert run.reply == "Ok."
    [call] = run.result.tools
    assert (call.name, call.status, call.call_id, call.args) == (
        "lookup",
        "ok",
        "call-1",
        {"name": "Acme"},
    )
    assert await stored_calls(store) == [("lookup", "ok")]


async def test_calls_made_before_an_interrupt_are_kept_for_the_resumed_run(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    both = AIMessage(
        "",
        tool_calls=[
            {"name": "lookup", "args": {"name": "Acme"}, "id": "call-1"},
            {"name": "approve", "args": {"what": "mail"}, "id": "call-2"},
        ],
    )
    model = ToolFake(responses=[both, AIMessage("Mailed.")])
    graph = create_agent(
        model, [lookup, approve], middleware=[NeotomaMiddleware()], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "th"}}
    first = await ainvoke_turn(graph, "Mail Acme", memory=memory, config=config)
    assert first.result.status is TurnState.SUSPENDED
    assert [c.name for c in first.result.tools] == ["lookup"]
    assert await stored_calls(store) == []  # nothing stored while the turn waits
    resumed = await ainvoke_turn(graph, Command(resume="yes"), memory=memory, config=config)
    assert resumed.reply == "Mailed."
    assert sorted(c.call_id or "" for c in resumed.result.tools) == ["call-1", "call-2"]
    assert await stored_calls(store) == [("approve", "ok"), ("lookup", "ok")]
