"""LangGraph human-in-the-loop across processes: the tool calls a run made before it stopped
at ``interrupt()`` are kept in the thread's checkpoint (``ToolCall.to_json()`` records in its
metadata), so the resumed run writes them with the turn wherever it runs: another process,
a new memory and graph, a new checkpointer object over the same storage. A resume that
never comes leaves the turn open, which is what ``audit`` finds.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain", reason="the [langchain] extra is not installed")

from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from langgraph_resume_child import BOTH, CONVERSATION, THREAD, agent
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, NeotomaMemory, ToolCall, TurnState
from neotoma_agent.integrations.langgraph import META_KEY, ainvoke_turn
from neotoma_agent.qa import FindingKind, audit

pytestmark = pytest.mark.anyio

CHILD = TESTS / "integrations" / "langgraph_resume_child.py"
KEPT = "neotoma_tool_calls"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as embedded:
        yield embedded


def new_memory(store: EmbeddedStore) -> NeotomaMemory:
    return NeotomaMemory(store, conversation_id=CONVERSATION, platform="tests", close_timeout=5.0)


def same_storage(saver: InMemorySaver) -> InMemorySaver:
    """Another checkpointer object over ``saver``'s storage: what a restart sees."""
    other = InMemorySaver()
    other.storage, other.writes, other.blobs = saver.storage, saver.writes, saver.blobs
    return other


async def stored_calls(store: EmbeddedStore) -> list[tuple[str, str]]:
    found = await store.query_entities(entity_type="tool_invocation", limit=100)
    return sorted(
        (str(e.snapshot["tool_name"]), str(e.snapshot["result_status"])) for e in found.entities
    )


async def findings(store: EmbeddedStore) -> list[tuple[FindingKind, str | None]]:
    return [(f.kind, f.turn_id) for f in (await audit(store, min_age=0)).findings]


async def test_the_calls_before_an_interrupt_are_kept_in_the_checkpoint(
    store: EmbeddedStore,
) -> None:
    graph = agent(InMemorySaver(), [BOTH])
    run = await ainvoke_turn(graph, "Mail Acme", memory=new_memory(store), config=THREAD)
    assert run.result.status is TurnState.SUSPENDED
    saved = await graph.aget_state(THREAD)
    assert saved.metadata[META_KEY] == run.result.turn_id
    kept = [ToolCall.from_json(data) for data in json.loads(saved.metadata[KEPT])]
    assert kept == list(run.result.tools)
    assert [(c.name, c.call_id, c.result) for c in kept] == [
        ("lookup", "call-1", "Acme is a customer")
    ]
    assert await stored_calls(store) == []  # nothing stored while the turn waits


async def test_a_new_memory_graph_and_checkpointer_write_the_calls_on_resume(
    store: EmbeddedStore,
) -> None:
    saver = InMemorySaver()
    first = await ainvoke_turn(
        agent(saver, [BOTH]), "Mail Acme", memory=new_memory(store), config=THREAD
    )
    assert [c.name for c in first.result.tools] == ["lookup"]
    resumed = await ainvoke_turn(
        agent(same_storage(saver), [AIMessage("Mailed.")]),
        Command(resume="yes"),
        memory=new_memory(store),
        config=THREAD,
    )
    assert resumed.reply == "Mailed."
    assert resumed.result.turn_id == first.result.turn_id
    assert sorted(c.call_id or "" for c in resumed.result.tools) == ["call-1", "call-2"]
    [lookup] = [c for c in resumed.result.tools if c.name == "lookup"]
    assert lookup == first.result.tools[0]  # the same record, every field
    assert await stored_calls(store) == [("approve", "ok"), ("lookup", "ok")]


async def test_a_second_interrupt_keeps_the_calls_of_both_runs(store: EmbeddedStore) -> None:
    again = AIMessage("", tool_calls=[{"name": "approve", "args": {"what": "fax"}, "id": "call-3"}])
    saver = InMemorySaver()
    await ainvoke_turn(agent(saver, [BOTH]), "Mail Acme", memory=new_memory(store), config=THREAD)
    second = await ainvoke_turn(
        agent(same_storage(saver), [again]),
        Command(resume="yes"),
        memory=new_memory(store),
        config=THREAD,
    )
    assert second.result.status is TurnState.SUSPENDED
    assert sorted(c.call_id or "" for c in second.result.tools) == ["call-1", "call-2"]
    third = await ainvoke_turn(
        agent(same_storage(saver), [AIMessage("Mailed and faxed.")]),
        Command(resume="yes"),
        memory=new_memory(store),
        config=THREAD,
    )
    assert third.reply == "Mailed and faxed."
    assert sorted(c.call_id or "" for c in third.result.tools) == ["call-1", "call-2", "call-3"]


async def test_kept_calls_that_do_not_read_back_are_left_to_the_stream_saying_so(
    store: EmbeddedStore, caplog: pytest.LogCaptureFixture
) -> None:
    saver = InMemorySaver()
    graph = agent(saver, [BOTH, AIMessage("Mailed.")])
    await ainvoke_turn(graph, "Mail Acme", memory=new_memory(store), config=THREAD)
    saved = await saver.aget_tuple(THREAD)
    assert saved is not None
    assert saved.parent_config is not None
    spoiled = {**saved.metadata, KEPT: json.dumps([{"name": "lookup", "secret": "x"}])}
    await saver.aput(saved.parent_config, saved.checkpoint, spoiled, {})
    with caplog.at_level(logging.WARNING, logger="neotoma_agent"):
        run = await ainvoke_turn(
            graph, Command(resume="yes"), memory=new_memory(store), config=THREAD
        )
    assert run.reply == "Mailed."
    # What the resumed stream still shows of call-1 (its ToolMessage) is all it has: the
    # result, not the arguments the model gave.
    calls = {c.call_id: c for c in run.result.tools}
    assert sorted(calls) == ["call-1", "call-2"]
    assert (calls["call-1"].result, calls["call-1"].args) == ("Acme is a customer", None)
    [record] = [r for r in caplog.records if "tool.not_carried" in r.getMessage()]
    assert "secret" not in record.getMessage()


def run_first_half(db: Path, checkpoints: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(CHILD), str(db), str(checkpoints)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.slow  # a second interpreter importing LangChain: seconds, not milliseconds
async def test_a_resume_in_another_process_writes_the_calls_and_closes_the_turn(
    tmp_path: Path,
) -> None:
    sqlite_saver = pytest.importorskip(
        "langgraph.checkpoint.sqlite.aio",
        reason="langgraph-checkpoint-sqlite is not installed (nox -s integrations installs it)",
    )
    db, checkpoints = tmp_path / "memory.db", tmp_path / "checkpoints.sqlite"
    first = run_first_half(db, checkpoints)
    assert (first["status"], first["interrupted"]) == ("suspended", True)
    assert [call["call_id"] for call in first["tools"]] == ["call-1"]
    async with (
        EmbeddedStore.open(db) as store,
        sqlite_saver.AsyncSqliteSaver.from_conn_string(str(checkpoints)) as saver,
    ):
        # The first process is gone and never resumed: the audit finds its turn open.
        assert await findings(store) == [(FindingKind.ORPHAN_TURN, "t1")]
        run = await ainvoke_turn(
            agent(saver, [AIMessage("Mailed.")]),
            Command(resume="yes"),
            memory=new_memory(store),
            config=THREAD,
        )
        assert (run.reply, run.result.turn_id) == ("Mailed.", "t1")
        assert run.result.status is TurnState.COMPLETED
        assert [c.to_json() for c in run.result.tools if c.call_id == "call-1"] == first["tools"]
        assert await stored_calls(store) == [("approve", "ok"), ("lookup", "ok")]
        assert await findings(store) == []
