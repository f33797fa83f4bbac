"""A multi-step tool loop inside one turn: tools read memory, and what they produce is stored.

    pip install openai && export OPENAI_API_KEY=...
    python examples/tool_loop.py ["your question"] [PATH]

The whole loop (model calls and tool runs) is the body of one ``memory.turn()``: the user
message is stored (and what it names retrieved) before the first model call, and the final
reply is stored once the loop ends, or the turn is recorded as abandoned if it fails. The
model sees the conversation so far (``t.history``, as chat messages) and what retrieval
found (``t.context()``). The ``lookup`` tool reads the store and the reply cites what it
found (``t.cite``); the ``remember`` tool's result is recorded with ``t.remember``: its id
goes back to the model at once, the entity is written in the turn's closing store (no
extra store call, and a retried turn does not store it twice) and the reply REFERS_TO it.
An entity retrieval found (same type and name) is extended, not duplicated. The model
client is a parameter: the test suite passes a fake one shaped like ``openai.AsyncOpenAI``
(tool calling, no streaming).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio

from neotoma_agent import EmbeddedStore, NeotomaMemory, Turn, TurnResult, ValidationError

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


async def run_tool(memory: NeotomaMemory, turn: Turn, name: str, args: dict[str, Any]) -> Any:
    """Run one tool call; return its result for the model."""
    if name == "lookup":
        found = await memory.transport.retrieve_entity_by_identifier(str(args["name"]), limit=5)
        turn.cite(*found.entities)  # the reply REFERS_TO what the tool found
        return [
            {"id": e.id, "type": e.entity_type, "name": e.name, "fields": dict(e.snapshot)}
            for e in found.entities
        ]
    if name == "remember":
        facts = dict(args.get("facts") or {})
        try:
            entity_id = turn.remember(str(args["entity_type"]), name=args["name"], **facts)
        except (TypeError, ValueError, ValidationError) as exc:  # refused before any I/O
            return {"error": str(exc)}
        return {"stored": entity_id}  # stored with the reply, which REFERS_TO it
    return {"error": f"unknown tool {name!r}"}


def chat_messages(turn: Turn) -> list[dict[str, Any]]:
    """The prompt: memory's context, the conversation so far, then the question."""
    system = "Use the tools to read and update memory."
    context = turn.context(max_chars=2000)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"{system}\n{context}" if context else system}
    ]
    for earlier in turn.history:  # oldest first
        messages.append({"role": "user", "content": earlier.user})
        if earlier.reply is not None:
            messages.append({"role": "assistant", "content": earlier.reply})
    messages.append({"role": "user", "content": turn.user_message})
    return messages


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
        memory = NeotomaMemory(
            store, conversation_id="tool-loop-example", platform="openai", history_turns=5
        )
        await memory.remember("company", name="Acme Corp", website="acme.com")
        # Anything that escapes the block (an API error, Ctrl-C) records it as abandoned.
        async with memory.turn(question) as t:
            messages = chat_messages(t)
            for _ in range(MAX_STEPS):
                response = await client.chat.completions.create(
                    model=model, messages=messages, tools=TOOLS
                )
                message = response.choices[0].message
                if not message.tool_calls:
                    t.reply = message.content or ""
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
                for call in message.tool_calls:
                    args = json.loads(call.function.arguments or "{}")
                    result = await run_tool(memory, t, call.function.name, args)
                    out.write(f"  tool {call.function.name}({args}) -> {result}\n")
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                    )
            else:
                raise RuntimeError(f"no answer after {MAX_STEPS} model calls")
    result = t.result
    out.write(f"assistant: {t.reply}\n")
    out.write(
        f"stored: {result.stored_status}, REFERS_TO {len(result.cited_ids)} cited and "
        f"{len(result.produced_ids)} produced entities\n"
    )
    return result


if __name__ == "__main__":
    ask = {"question": sys.argv[1]} if len(sys.argv) > 1 else {}
    where = sys.argv[2] if len(sys.argv) > 2 else ":memory:"
    try:
        anyio.run(functools.partial(main, path=where, **ask))
    except ModuleNotFoundError as exc:
        if exc.name != "openai":
            raise
        sys.exit("this example needs the OpenAI SDK: pip install openai")
    except Exception as exc:
        # The SDK failed mid-turn (no network, no API key): the turn is already stored as
        # abandoned, so one line says what happened instead of the SDK's traceback.
        sys.exit(f"stopped: {type(exc).__name__}: {exc} (the turn is stored as abandoned)")
