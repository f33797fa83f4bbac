"""Stream a reply from the OpenAI SDK inside ``memory.turn()``.

    pip install openai && export OPENAI_API_KEY=...
    python examples/openai_streaming.py ["your question"]

The user message is stored before the model is called; every streamed chunk is appended to
the turn, so if the stream breaks (or the user presses Ctrl-C) the turn is recorded as
abandoned with exactly the partial reply that was shown. The model client is a parameter:
the test suite passes a fake one shaped like ``openai.AsyncOpenAI``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio

from neotoma_agent import EmbeddedStore, Entity, NeotomaMemory, TurnResult

MODEL = "gpt-4o-mini"


def system_prompt(entities: Sequence[Entity]) -> str:
    """Ground the model in what retrieval found (and only that)."""
    if not entities:
        return "You are a helpful assistant. Nothing relevant is in memory."
    known = "\n".join(f"- {e.name} ({e.entity_type}): {dict(e.snapshot)}" for e in entities)
    return f"You are a helpful assistant. Known entities from memory:\n{known}"


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
        await store.store(
            [{"entity_type": "company", "name": "Acme Corp", "website": "acme.com"}],
            idempotency_key="openai-example-acme",
        )
        memory = NeotomaMemory(store, conversation_id="openai-example", platform="openai")
        async with memory.turn(question) as t:
            stream = await client.chat.completions.create(
                model=model,
                stream=True,
                messages=[
                    {"role": "system", "content": system_prompt(t.retrieved)},
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
            out.write("\n")
            t.cite(*t.retrieved)
    out.write(f"stored: {t.result.stored_status}, reply {t.result.assistant_message_id}\n")
    return t.result


if __name__ == "__main__":
    ask = sys.argv[1] if len(sys.argv) > 1 else "What do we know about Acme Corp?"
    try:
        anyio.run(functools.partial(main, question=ask))
    except ModuleNotFoundError as exc:
        if exc.name != "openai":
            raise
        sys.exit("this example needs the OpenAI SDK: pip install openai")
    except Exception as exc:
        # The SDK failed mid-turn (no network, no API key): the turn is already stored as
        # abandoned, so one line says what happened instead of the SDK's traceback.
        sys.exit(f"stopped: {type(exc).__name__}: {exc} (the turn is stored as abandoned)")
