"""Stream a reply from the OpenAI SDK inside ``memory.turn()``.

    pip install openai && export OPENAI_API_KEY=...
    python examples/openai_streaming.py ["your question"] [PATH]

The user message is stored before the model is called, and the model is grounded in
``t.context()``: the entities retrieval found and the conversation's earlier turns (with a
PATH, each run is the next turn of the same conversation and sees the ones before). Every
streamed chunk is appended to the turn, so if the stream breaks (or the user presses
Ctrl-C) the turn is recorded as abandoned with exactly the partial reply that was shown.
The reply then records a follow-up task with ``t.remember`` (stored in the same closing
store; the reply cites its id and REFERS_TO it). The model client is a parameter: the test
suite passes a fake one shaped like ``openai.AsyncOpenAI``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio

from neotoma_agent import EmbeddedStore, NeotomaMemory, Turn, TurnResult

MODEL = "gpt-4o-mini"


def system_prompt(turn: Turn) -> str:
    """Ground the model in what memory holds for this turn (and only that)."""
    context = turn.context(max_chars=4000)  # retrieved entities, then earlier turns
    if not context:
        return "You are a helpful assistant. Nothing relevant is in memory."
    return f"You are a helpful assistant. From memory:\n{context}"


async def main(
    client: Any = None,
    *,
    question: str = "What do we know about Acme Corp?",
    path: str | Path = ":memory:",
    model: str = MODEL,
    out: TextIO = sys.stdout,
) -> TurnResult:
    """One streamed turn; ``client`` defaults to ``openai.AsyncOpenAI()``."""
    if client is None:
        import openai  # type: ignore[import-not-found, unused-ignore]

        client = openai.AsyncOpenAI()
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(
            store, conversation_id="openai-example", platform="openai", history_turns=5
        )
        await memory.remember("company", name="Acme Corp", website="acme.com")
        async with memory.turn(question) as t:
            stream = await client.chat.completions.create(
                model=model,
                stream=True,
                messages=[
                    {"role": "system", "content": system_prompt(t)},
                    {"role": "user", "content": t.user_message},
                ],
            )
            out.write("assistant: ")
            async for chunk in stream:
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    t.append(delta)  # appended before it is shown
                    out.write(delta)
                    out.flush()
            # What the reply produced: its id at once, the entity stored with the reply.
            task = t.remember("task", title=f"Follow up: {question}", status="open")
            t.append(f" (follow-up: {task})")
            out.write(f" (follow-up: {task})\n")
    out.write(f"stored: {t.result.status}, reply {t.result.assistant_message_id}\n")
    return t.result


if __name__ == "__main__":
    ask = sys.argv[1] if len(sys.argv) > 1 else "What do we know about Acme Corp?"
    where = sys.argv[2] if len(sys.argv) > 2 else ":memory:"
    try:
        anyio.run(functools.partial(main, question=ask, path=where))
    except ModuleNotFoundError as exc:
        if exc.name != "openai":
            raise
        sys.exit("this example needs the OpenAI SDK: pip install openai")
    except Exception as exc:
        # The SDK failed mid-turn (no network, no API key): the turn is already stored as
        # abandoned, so one line says what happened instead of the SDK's traceback.
        sys.exit(f"stopped: {type(exc).__name__}: {exc} (the turn is stored as abandoned)")
