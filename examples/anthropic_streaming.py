"""Stream a reply from the Anthropic SDK through an async-generator agent and ``with_memory``.

    pip install anthropic && export ANTHROPIC_API_KEY=...
    python examples/anthropic_streaming.py ["your question"] [PATH]

The agent is an async generator ``(user_message, turn) -> chunks``; ``with_memory`` opens
the turn (user message stored, entities retrieved, earlier turns read), appends every chunk
it yields to the reply, and stores the reply when the stream ends, or the partial reply if
it breaks off. Claude is grounded in ``turn.context()`` (with a PATH, each run is the next
turn of the same conversation and sees the ones before); the reply ends by recording a
follow-up task with ``turn.remember``, stored with the reply, which cites its id and
REFERS_TO it. The model client is a parameter: the test suite passes a fake one shaped like
``anthropic.AsyncAnthropic``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TextIO

import anyio

from neotoma_agent import EmbeddedStore, NeotomaMemory, Turn, TurnResult, with_memory

MODEL = "claude-sonnet-4-5"


def system_prompt(turn: Turn) -> str:
    """Ground the model in what memory holds for this turn (and only that)."""
    context = turn.context(max_chars=4000)  # retrieved entities, then earlier turns
    if not context:
        return "You are a helpful assistant. Nothing relevant is in memory."
    return f"You are a helpful assistant. From memory:\n{context}"


def claude_agent(client: Any, model: str = MODEL) -> Callable[[str, Turn], AsyncIterator[str]]:
    """An agent that streams Claude's reply, grounded in the turn's retrieved entities."""

    async def agent(user_message: str, turn: Turn) -> AsyncIterator[str]:
        async with client.messages.stream(
            model=model,
            max_tokens=1024,
            system=system_prompt(turn),
            messages=[{"role": "user", "content": user_message}],
        ) as stream:
            async for text in stream.text_stream:
                yield text
        # What the reply produced: its id at once, the entity stored with the reply.
        task = turn.remember("task", title=f"Follow up: {user_message}", status="open")
        yield f" (follow-up: {task})"

    return agent


async def main(
    client: Any = None,
    *,
    question: str = "What do we know about Acme Corp?",
    path: str | Path = ":memory:",
    model: str = MODEL,
    out: TextIO = sys.stdout,
) -> TurnResult:
    """One streamed turn; ``client`` defaults to ``anthropic.AsyncAnthropic()``."""
    if client is None:
        import anthropic  # type: ignore[import-not-found, unused-ignore]

        client = anthropic.AsyncAnthropic()
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(
            store, conversation_id="anthropic-example", platform="anthropic", history_turns=5
        )
        await memory.remember("company", name="Acme Corp", website="acme.com")
        agent = with_memory(claude_agent(client, model), memory=memory)
        out.write("assistant: ")
        async with agent.stream(question) as reply:
            async for chunk in reply:
                out.write(chunk)
                out.flush()
        out.write("\n")
    out.write(f"stored: {reply.result.status}, reply {reply.result.assistant_message_id}\n")
    return reply.result


if __name__ == "__main__":
    ask = sys.argv[1] if len(sys.argv) > 1 else "What do we know about Acme Corp?"
    where = sys.argv[2] if len(sys.argv) > 2 else ":memory:"
    try:
        anyio.run(functools.partial(main, question=ask, path=where))
    except ModuleNotFoundError as exc:
        if exc.name != "anthropic":
            raise
        sys.exit("this example needs the Anthropic SDK: pip install anthropic")
    except Exception as exc:
        # The SDK failed mid-turn (no network, no API key): the turn is already stored as
        # abandoned, so one line says what happened instead of the SDK's traceback.
        sys.exit(f"stopped: {type(exc).__name__}: {exc} (the turn is stored as abandoned)")
