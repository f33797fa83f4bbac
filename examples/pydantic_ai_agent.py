"""Pydantic AI with Neotoma memory: every run of the agent is one stored turn.

    pip install 'neotoma-agent[pydantic-ai]'          # Python >= 3.11
    python examples/pydantic_ai_agent.py [PATH]

``NeotomaCapability(memory)`` on the agent stores the user message before the model runs,
gives the model what memory knows (``turn.context()``) as instructions, records every tool
call, and stores the exact reply once (or the turn as abandoned, with what was shown, if the
run fails or is cancelled). A tool reaches the turn with ``current_turn()``.

Offline by default: Pydantic AI's own ``FunctionModel`` plays the model (it answers from
the instructions it was given, and calls the ``note_task`` tool when asked to). With
``PYDANTIC_AI_MODEL`` set (e.g. ``openai:gpt-5-mini``, with that provider's package and API
key installed), the same script talks to that model. The store is in memory unless PATH
names a file (then read it back with ``neotoma-agent show pydantic-ai-example --db PATH``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import anyio

try:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
except ImportError:
    sys.exit("this example needs Pydantic AI: pip install 'neotoma-agent[pydantic-ai]'")

from neotoma_agent import EmbeddedStore, NeotomaMemory, Turn, TurnResult, current_turn
from neotoma_agent.integrations.pydantic_ai import NeotomaCapability

QUESTIONS = (
    "What do we know about Acme Corp?",
    "Please note a task: call Acme Corp back on Monday.",
)


async def offline_model(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """A stand-in for an LLM: streams an answer built from the instructions it was given."""
    last = messages[-1]
    returned = [p for p in getattr(last, "parts", ()) if isinstance(p, ToolReturnPart)]
    if returned:
        yield f"Noted: {returned[0].content}."
        return
    prompt = last.parts[-1].content if isinstance(last, ModelRequest) else ""
    if isinstance(prompt, str) and prompt.startswith("Please note a task"):
        title = prompt.removeprefix("Please note a task:").strip().rstrip(".")
        args = json.dumps({"title": title.capitalize()})
        yield {0: DeltaToolCall(name="note_task", json_args=args, tool_call_id="call-1")}
        return
    known = [line for line in (info.instructions or "").splitlines() if line.startswith("- ")]
    yield "From memory: "
    yield "; ".join(line[2:] for line in known) or "nothing yet"
    yield "."


def build_agent(memory: NeotomaMemory, ended: list[Turn]) -> Agent[None, str]:
    model: Any = os.environ.get("PYDANTIC_AI_MODEL") or FunctionModel(stream_function=offline_model)
    agent = Agent(
        model,
        instructions="You are a concise assistant with a long-term memory.",
        capabilities=[NeotomaCapability(memory, on_turn_end=ended.append)],
    )

    @agent.tool_plain
    def note_task(title: str) -> str:
        """Record a follow-up task; returns its id."""
        turn = current_turn()  # the turn of this run: the task is stored with the reply
        if turn is None:
            return "no turn is open"
        return turn.remember("task", title=title, status="open")

    return agent


async def main(path: str | Path = ":memory:", *, out: TextIO = sys.stdout) -> list[TurnResult]:
    """Ask the questions; return what each turn stored."""
    ended: list[Turn] = []
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="pydantic-ai-example")
        await memory.remember("company", name="Acme Corp", website="acme.com")
        agent = build_agent(memory, ended)
        for question in QUESTIONS:
            out.write(f"user:  {question}\nagent: ")
            async with agent.run_stream(question) as streamed:
                async for delta in streamed.stream_text(delta=True):
                    out.write(delta)
            result = ended[-1].result
            out.write(
                f"\n       stored: {result.status}, reply {result.assistant_message_id}, "
                f"{len(result.tools)} tool call(s), {len(result.produced_ids)} produced\n"
            )
    return [turn.result for turn in ended]


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else ":memory:")
