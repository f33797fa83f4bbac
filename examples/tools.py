"""A multi-step tool loop inside one turn: each call recorded, what the tools produce stored.

    python examples/tools.py [--openai] [PATH] ["your question"]

Runs offline by default, with a scripted model (:class:`ScriptedModel`, shaped like
``openai.AsyncOpenAI``: it asks for a ``lookup``, then a ``remember``, then answers);
``--openai`` talks to the real API instead (``pip install openai``, ``OPENAI_API_KEY``).

The whole loop (model calls and tool runs) is the body of one ``memory.turn()``: the user
message is stored (and what it names retrieved) before the first model call, and the final
reply is stored once the loop ends, or the turn is recorded as abandoned if it fails. Each
tool run is ``async with t.tool(name, args, call_id=...) as call:``: it is timed, ends
``ok``, ``error`` or ``cancelled``, and is written in the turn's closing store as one
``tool_invocation`` (its arguments and result on the observation), so the turn is still two
store calls however many tools ran. The model sees the conversation so far (``t.history``,
as chat messages, each earlier turn with the tools it used) and what retrieval found
(``t.context()``). The ``lookup`` tool reads the store and the reply cites what it found
(``t.cite``); the ``remember`` tool's result is recorded with ``t.remember``: its id goes
back to the model at once, the entity is written in the same closing store and the reply
REFERS_TO it. An entity retrieval found (same type and name) is extended, not duplicated.
After the turn, ``memory.tools(turn_id)`` reads the calls back.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from types import SimpleNamespace
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


class ScriptedModel:
    """An offline stand-in for ``openai.AsyncOpenAI`` (``client.chat.completions.create``).

    Turn by turn it asks for a ``lookup`` of the first name in the question, then a
    ``remember`` of what the question says, then answers with what the tools returned.
    """

    def __init__(self) -> None:
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    async def _create(self, *, messages: list[dict[str, Any]], **_: Any) -> Any:
        answers = [m["content"] for m in messages if m["role"] == "tool"]
        question = [m["content"] for m in messages if m["role"] == "user"][-1]
        asked = len(answers)
        if asked == 0:
            return _completion(None, [_call("call_1", "lookup", {"name": "Acme Corp"})])
        if asked == 1:
            facts = {"address": "Lisbon"} if "Lisbon" in question else {}
            args = {"entity_type": "company", "name": "Acme Corp", "facts": facts}
            return _completion(None, [_call("call_2", "remember", args)])
        found = json.loads(answers[0])
        known = ", ".join(f"{e['name']} ({e['type']})" for e in found) or "nothing"
        return _completion(f"I found {known} and noted the move to Lisbon.", None)


def _call(call_id: str, name: str, args: dict[str, Any]) -> Any:
    function = SimpleNamespace(name=name, arguments=json.dumps(args))
    return SimpleNamespace(id=call_id, type="function", function=function)


def _completion(content: str | None, tool_calls: list[Any] | None) -> Any:
    message = SimpleNamespace(role="assistant", content=content, tool_calls=tool_calls)
    return SimpleNamespace(choices=[SimpleNamespace(message=message)])


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
            used = ", ".join(f"{c.name} ({c.status})" for c in earlier.tools)
            note = f"\n[tools used: {used}]" if used else ""
            messages.append({"role": "assistant", "content": earlier.reply + note})
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
    """Answer ``question`` with tools; ``client`` defaults to the offline :class:`ScriptedModel`
    (pass ``openai.AsyncOpenAI()`` for the real thing)."""
    if client is None:
        client = ScriptedModel()
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
                    # Timed and recorded; an exception here ends the call "error" (and,
                    # left to escape, the turn "abandoned", keeping the calls it made).
                    async with t.tool(call.function.name, args, call_id=call.id) as run:
                        run.result = await run_tool(memory, t, call.function.name, args)
                    out.write(f"  tool {call.function.name}({args}) -> {run.result}\n")
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(run.result)}
                    )
            else:
                raise RuntimeError(f"no answer after {MAX_STEPS} model calls")
        result = t.result
        out.write(f"assistant: {t.reply}\n")
        out.write(
            f"stored: {result.stored_status}, REFERS_TO {len(result.cited_ids)} cited and "
            f"{len(result.produced_ids)} produced entities, {len(result.tool_ids)} tool calls\n"
        )
        for stored in await memory.tools(t.turn_id):  # read back, arguments included
            out.write(f"  {stored.name}: {stored.status}, {stored.duration_ms} ms, {stored.args}\n")
    return result


def _openai_client() -> Any:
    import openai  # type: ignore[import-not-found, unused-ignore]

    return openai.AsyncOpenAI()


if __name__ == "__main__":
    argv = sys.argv[1:]
    online = "--openai" in argv
    argv = [a for a in argv if a != "--openai"]
    where = argv[0] if argv else ":memory:"
    ask = {"question": argv[1]} if len(argv) > 1 else {}
    try:
        client = _openai_client() if online else ScriptedModel()
        anyio.run(functools.partial(main, client, path=where, **ask))
    except ModuleNotFoundError as exc:
        if exc.name != "openai":
            raise
        sys.exit("this example needs the OpenAI SDK: pip install openai")
    except Exception as exc:
        # The SDK failed mid-turn (no network, no API key): the turn is already stored as
        # abandoned, so one line says what happened instead of the SDK's traceback.
        sys.exit(f"stopped: {type(exc).__name__}: {exc} (the turn is stored as abandoned)")
