"""A multi-step tool loop with the explicit ``open_turn`` / ``close_turn`` API.

    pip install openai && export OPENAI_API_KEY=...
    python examples/tool_loop.py ["your question"]

When the reply is produced across several model calls and tool runs, an ``async with``
block may not fit your loop. ``open_turn`` stores the user message (and retrieves what it
names) before the first tool runs; ``close_turn`` stores the final reply, wired to every
entity the tools touched; ``abandon_turn`` records the turn honestly if the loop fails.
The tools write to the same store under idempotency keys derived from the turn id, so a
retried turn does not store its facts twice. The model client is a parameter: the test
suite passes a fake one shaped like ``openai.AsyncOpenAI`` (tool calling, no streaming).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio

from neotoma_agent import EmbeddedStore, NeotomaMemory, Transport, TurnResult

MODEL = "gpt-4o-mini"
MAX_STEPS = 6

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find entities in memory by name, email or id.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "remember",
            "description": "Store a fact about a company or a person.",
            "parameters": {
                "type": "object",
                "properties": {
                    "entity_type": {"type": "string", "enum": ["company", "person"]},
                    "name": {"type": "string"},
                    "facts": {"type": "object"},
                },
                "required": ["entity_type", "name"],
            },
        },
    },
]


async def run_tool(
    store: Transport, name: str, args: dict[str, Any], *, key: str
) -> tuple[Any, list[str]]:
    """Run one tool call; return its result for the model and the entity ids it touched."""
    if name == "lookup":
        found = await store.retrieve_entity_by_identifier(str(args["name"]), limit=5)
        entities = [
            {"id": e.id, "type": e.entity_type, "name": e.name, "fields": dict(e.snapshot)}
            for e in found.entities
        ]
        return entities, [e.id for e in found.entities]
    if name == "remember":
        fields = {"entity_type": args["entity_type"], "name": args["name"]}
        fields.update(args.get("facts") or {})
        stored = await store.store([fields], idempotency_key=key)
        return {"stored": stored.entity_id(0)}, [stored.entity_id(0)]
    return {"error": f"unknown tool {name!r}"}, []


async def main(
    client: Any = None,
    *,
    question: str = "Acme Corp just told us they moved to Lisbon. What do we know about them?",
    path: str | Path = ":memory:",
    model: str = MODEL,
    out: TextIO = sys.stdout,
) -> TurnResult:
    """Answer ``question`` with tools; ``client`` defaults to ``openai.AsyncOpenAI()``."""
    if client is None:
        import openai  # type: ignore[import-not-found, unused-ignore]

        client = openai.AsyncOpenAI()
    async with EmbeddedStore.open(path) as store:
        await store.store(
            [{"entity_type": "company", "name": "Acme Corp", "website": "acme.com"}],
            idempotency_key="tool-loop-example-acme",
        )
        memory = NeotomaMemory(store, conversation_id="tool-loop-example", platform="openai")
        turn = await memory.open_turn(question)  # the user message is durable from here on
        touched: list[str] = []
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "Use the tools to read and update memory."},
            {"role": "user", "content": question},
        ]
        try:
            for step in range(MAX_STEPS):
                response = await client.chat.completions.create(
                    model=model, messages=messages, tools=TOOLS
                )
                message = response.choices[0].message
                if not message.tool_calls:
                    reply = message.content or ""
                    break
                messages.append(
                    {
                        "role": "assistant",
                        "content": message.content,
                        "tool_calls": [
                            {
                                "id": call.id,
                                "type": "function",
                                "function": {
                                    "name": call.function.name,
                                    "arguments": call.function.arguments,
                                },
                            }
                            for call in message.tool_calls
                        ],
                    }
                )
                for n, call in enumerate(message.tool_calls):
                    key = f"tool-loop-{turn.turn_id}-{step}-{n}"
                    args = json.loads(call.function.arguments or "{}")
                    result, ids = await run_tool(store, call.function.name, args, key=key)
                    touched.extend(ids)
                    out.write(f"  tool {call.function.name}({args}) -> {result}\n")
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                    )
            else:
                raise RuntimeError(f"no answer after {MAX_STEPS} model calls")
        except BaseException as exc:
            # Anything (an API error, Ctrl-C): record the turn as abandoned, then re-raise.
            await memory.abandon_turn(turn, error=exc, refers_to=touched)
            raise
        result = await memory.close_turn(turn, reply, refers_to=touched)
    out.write(f"assistant: {reply}\n")
    out.write(f"stored: {result.stored_status}, REFERS_TO {len(result.cited_ids)} cited entities\n")
    return result


if __name__ == "__main__":
    ask = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        anyio.run(functools.partial(main, question=ask) if ask else main)
    except ModuleNotFoundError as exc:
        if exc.name != "openai":
            raise
        sys.exit("this example needs the OpenAI SDK: pip install openai")
    except Exception as exc:
        # The SDK failed mid-turn (no network, no API key): the turn is already stored as
        # abandoned, so one line says what happened instead of the SDK's traceback.
        sys.exit(f"stopped: {type(exc).__name__}: {exc} (the turn is stored as abandoned)")
