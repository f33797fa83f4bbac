"""LangGraph human-in-the-loop: a run stopped at ``interrupt()`` leaves its turn open, and
the resumed run (``Command(resume=...)`` on the same thread) finishes that same turn.

``create_agent`` with a tool-calling fake model and ``InMemorySaver``; the store is a real
EmbeddedStore file, read back after each step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain", reason="the [langchain] extra is not installed")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from langgraph_support import ToolFake, tool_call
from turn_support import turn_record

from neotoma_agent import EmbeddedStore, NeotomaMemory, TurnState
from neotoma_agent.integrations.langgraph import (
    META_KEY,
    NeotomaMiddleware,
    ainvoke_turn,
    astream_turn,
)
from neotoma_agent.qa import FindingKind, audit

pytestmark = pytest.mark.anyio


class Refused(Exception):
    """The tool's own failure after the approval."""


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
def send_email(to: str) -> str:
    """Send an email once a person approves it."""
    answer = interrupt({"question": f"send to {to}?"})
    if answer == "refuse":
        raise Refused("not approved")
    return f"sent to {to}"


ASK = tool_call("send_email", {"to": "bob"}, "call-1")


def approval_agent(*, checkpointer: Any = None, responses: Any = None) -> Any:
    model = ToolFake(responses=responses or [ASK, AIMessage("Email sent.")])
    return create_agent(
        model,
        [send_email],
        middleware=[NeotomaMiddleware()],
        checkpointer=InMemorySaver() if checkpointer is None else checkpointer,
    )


THREAD = {"configurable": {"thread_id": "thread-1"}}


async def stored(memory: NeotomaMemory) -> list[tuple[str, str, str | None, str | None]]:
    return [(h.turn_id, h.status, h.user, h.reply) for h in await memory.history(limit=None)]


async def test_an_interrupted_run_leaves_the_turn_open(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    graph = approval_agent()
    async with astream_turn(
        graph, "Send the email", memory=memory, config=THREAD, turn_id="t1"
    ) as s:
        deltas = [d async for d in s.text()]
    assert deltas == []
    assert s.interrupted
    assert s.interrupts[0].value == {"question": "send to bob?"}
    assert s.result.status is TurnState.SUSPENDED
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "open"
    assert await stored(memory) == [("t1", "open", "Send the email", None)]
    saved = await graph.aget_state(THREAD)
    assert saved.metadata[META_KEY] == "t1"


async def test_the_resumed_run_closes_the_same_turn(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    graph = approval_agent()
    first = await ainvoke_turn(graph, "Send the email", memory=memory, config=THREAD)
    assert first.result.status is TurnState.SUSPENDED
    async with astream_turn(graph, Command(resume="yes"), memory=memory, config=THREAD) as s:
        text = "".join([d async for d in s.text()])
    assert text == "Email sent."
    assert s.result.completed
    assert s.result.turn_id == first.result.turn_id
    assert s.result.user_message_id == first.result.user_message_id
    assert await stored(memory) == [
        (first.result.turn_id, "completed", "Send the email", "Email sent.")
    ]


async def test_a_resumed_run_that_fails_abandons_the_turn(memory: NeotomaMemory) -> None:
    graph = approval_agent()
    await ainvoke_turn(graph, "Send the email", memory=memory, config=THREAD, turn_id="t1")
    with pytest.raises(Refused):
        await ainvoke_turn(graph, Command(resume="refuse"), memory=memory, config=THREAD)
    assert await stored(memory) == [("t1", "abandoned", "Send the email", None)]


async def test_a_resume_that_never_comes_is_what_audit_finds(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    await ainvoke_turn(
        approval_agent(), "Send the email", memory=memory, config=THREAD, turn_id="t1"
    )
    report = await audit(store, min_age=0)
    assert [(f.kind, f.turn_id) for f in report.findings] == [(FindingKind.ORPHAN_TURN, "t1")]


async def test_resuming_a_thread_with_no_open_turn_is_refused(memory: NeotomaMemory) -> None:
    graph = approval_agent()
    with pytest.raises(ValueError, match="no open Neotoma turn"):
        async with astream_turn(graph, Command(resume="yes"), memory=memory, config=THREAD):
            pass
    assert await stored(memory) == []


async def test_a_resume_from_another_process_continues_the_turn(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    # The turn id lives in the checkpoint, so a second memory object (a new process on the
    # same store and checkpointer) finishes it.
    saver = InMemorySaver()
    await ainvoke_turn(
        approval_agent(checkpointer=saver), "Send the email", memory=memory, config=THREAD
    )
    other = NeotomaMemory(store, conversation_id="chat-1", platform="tests")
    resumed = approval_agent(checkpointer=saver, responses=[AIMessage("Email sent.")])
    run = await ainvoke_turn(resumed, Command(resume="yes"), memory=other, config=THREAD)
    assert run.reply == "Email sent."
    [(_, status, user, reply)] = await stored(memory)
    assert (status, user, reply) == ("completed", "Send the email", "Email sent.")


async def test_a_thread_of_another_conversation_is_refused(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    graph = approval_agent()
    await ainvoke_turn(graph, "Send the email", memory=memory, config=THREAD)
    other = NeotomaMemory(store, conversation_id="chat-2", platform="tests")
    with pytest.raises(ValueError, match="another conversation"):
        await ainvoke_turn(graph, Command(resume="yes"), memory=other, config=THREAD)
