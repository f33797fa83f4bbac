"""A child process for the LangGraph resume tests: the first half of a human-in-the-loop turn.

    python tests/integrations/langgraph_resume_child.py DB CHECKPOINTS

On the embedded store ``DB`` and a SQLite checkpointer file ``CHECKPOINTS``, it runs one
``create_agent`` turn whose model asks for two tools at once: ``lookup`` answers, ``approve``
stops at ``interrupt()``. It prints the turn's status and the tool calls it recorded as JSON,
then exits: whatever it held in memory goes with it, so the resume (in the test's process)
has only the store and the checkpoint file to go on. The test imports :func:`agent` from
here to build the same graph.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.types import interrupt
from langgraph_support import ToolFake

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.integrations.langgraph import NeotomaMiddleware, ainvoke_turn

CONVERSATION = "chat-resume"
THREAD = {"configurable": {"thread_id": "thread-resume"}}
BOTH = AIMessage(
    "",
    tool_calls=[
        {"name": "lookup", "args": {"name": "Acme"}, "id": "call-1"},
        {"name": "approve", "args": {"what": "mail"}, "id": "call-2"},
    ],
)


@tool
def lookup(name: str) -> str:
    """Look a company up."""
    return f"{name} is a customer"


@tool
def approve(what: str) -> str:
    """Ask a person first."""
    return f"approved: {interrupt({'ask': what})}"


def agent(checkpointer: Any, responses: list[AIMessage]) -> Any:
    """The graph both halves run: the two tools, the middleware, ``checkpointer``."""
    return create_agent(
        ToolFake(responses=responses),
        [lookup, approve],
        middleware=[NeotomaMiddleware()],
        checkpointer=checkpointer,
    )


async def first_half(db: Path, checkpoints: Path) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with (
        EmbeddedStore.open(db) as store,
        AsyncSqliteSaver.from_conn_string(str(checkpoints)) as saver,
    ):
        memory = NeotomaMemory(store, conversation_id=CONVERSATION, platform="tests")
        graph = agent(saver, [BOTH, AIMessage("never: the run stops first")])
        run = await ainvoke_turn(graph, "Mail Acme", memory=memory, config=THREAD, turn_id="t1")
        return {
            "status": run.result.status.value,
            "interrupted": run.interrupted,
            "tools": [call.to_json() for call in run.result.tools],
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(first_half(Path(sys.argv[1]), Path(sys.argv[2])))))
