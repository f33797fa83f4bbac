"""The OpenAI Agents SDK with Neotoma memory: every ``Runner`` run is one stored turn.

    pip install 'neotoma-agent[openai-agents]'
    python examples/openai_agents_sdk.py [PATH]

``run_streamed(agent, text, memory=memory)`` opens the turn (the user message stored) before
the SDK starts its run, appends what memory knows (``turn.context()``) to the agent's
instructions, sends the conversation's earlier turns, records every tool call, and stores
the exact final output once (or the turn as abandoned, with what was shown, if the run fails,
is cancelled or is stopped with ``stream.cancel()``). A tool reaches the turn with
``current_turn()``.

Offline by default: the SDK's own ``agents.testing.ScriptedModel`` plays the model. With
``OPENAI_API_KEY`` set, the same script talks to ``OPENAI_MODEL`` (default ``gpt-5-mini``).
Tracing is off unless ``OPENAI_AGENTS_TRACING=1``. The store is in memory unless PATH names a
file (then read it back with ``neotoma-agent show openai-agents-example --db PATH``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio

try:
    from agents import Agent, RunConfig, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call
except ImportError:
    sys.exit("this example needs the OpenAI Agents SDK: pip install 'neotoma-agent[openai-agents]'")

from neotoma_agent import EmbeddedStore, NeotomaMemory, TurnResult, current_turn
from neotoma_agent.integrations.openai_agents import run_streamed

QUESTIONS = (
    "What do we know about Acme Corp?",
    "Please note a task: call Acme Corp back on Monday.",
)


@function_tool
def note_task(title: str) -> str:
    """Record a follow-up task; returns its id."""
    turn = current_turn()  # the turn of this run: the task is stored with the reply
    if turn is None:
        return "no turn is open"
    return turn.remember("task", title=title, status="open")


def offline_model() -> ScriptedModel:
    """A stand-in for an LLM: the replies the two questions get, in order."""
    return ScriptedModel(
        [
            [assistant_message("Acme Corp is in memory: a company, website acme.com.")],
            [function_call("note_task", {"title": "Call Acme Corp back on Monday"}, call_id="c1")],
            [assistant_message("Noted: I will remind you to call Acme Corp back on Monday.")],
        ]
    )


def build_agent() -> Agent[Any]:
    model: Any = (
        os.environ.get("OPENAI_MODEL", "gpt-5-mini")
        if os.environ.get("OPENAI_API_KEY")
        else offline_model()
    )
    return Agent(
        name="assistant",
        instructions="You are a concise assistant with a long-term memory.",
        model=model,
        tools=[note_task],
    )


async def main(path: str | Path = ":memory:", *, out: TextIO = sys.stdout) -> list[TurnResult]:
    """Ask the questions; return what each turn stored."""
    results = []
    config = RunConfig(tracing_disabled=os.environ.get("OPENAI_AGENTS_TRACING") != "1")
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="openai-agents-example")
        await memory.remember("company", name="Acme Corp", website="acme.com")
        agent = build_agent()
        for question in QUESTIONS:
            out.write(f"user:  {question}\nagent: ")
            async with run_streamed(agent, question, memory=memory, run_config=config) as stream:
                async for delta in stream.text():
                    out.write(delta)
            result = stream.turn.result
            out.write(
                f"\n       stored: {result.status}, reply {result.assistant_message_id}, "
                f"{len(result.tools)} tool call(s), {len(result.produced_ids)} produced\n"
            )
            results.append(result)
    return results


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else ":memory:")
