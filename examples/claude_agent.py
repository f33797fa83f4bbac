"""The Claude Agent SDK with every prompt stored as a Neotoma turn, on asyncio or trio.

    pip install 'neotoma-agent[claude-agent-sdk]'
    python examples/claude_agent.py [PATH]

Offline by default: a small stand-in for the ``claude`` program answers over the SDK's
``Transport`` seam (it plays one scripted reply, calling the hooks as the real one does).
With ``ANTHROPIC_API_KEY`` set, the same code runs the real bundled ``claude`` program.
The ``UserPromptSubmit`` hook gives the model ``t.context()``; the reply is stored when the
``ResultMessage`` says success. The store is in memory unless PATH names a file (then
``neotoma-agent show claude-example --db PATH``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, Transport

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.integrations.claude_agent_sdk import NeotomaClaude


class OfflineCLI(Transport):
    """Answers like the ``claude`` program would: the prompt hook, two text deltas, a result."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self._hooks: dict[str, list[str]] = {}
        self._answers: dict[str, anyio.Event] = {}

    async def connect(self) -> None: ...

    def is_ready(self) -> bool:
        return True

    async def close(self) -> None:
        self._send.close()

    async def end_input(self) -> None:
        self._send.close()

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        async with self._receive:
            async for message in self._receive:
                if message.get("type") == "user":
                    async for answer in self._reply(message["message"]["content"]):
                        yield answer
                else:
                    yield message

    async def write(self, data: str) -> None:
        message = json.loads(data)
        if message["type"] == "control_request":  # initialize, interrupt
            for event, matchers in (message["request"].get("hooks") or {}).items():
                self._hooks[event] = [i for m in matchers for i in m["hookCallbackIds"]]
            reply = {"subtype": "success", "request_id": message["request_id"], "response": {}}
            self._send.send_nowait({"type": "control_response", "response": reply})
        elif message["type"] == "control_response":
            self._answers[message["response"]["request_id"]].set()
        else:
            self._send.send_nowait(message)  # the prompt: answered in read_messages

    async def _reply(self, prompt: str) -> AsyncIterator[dict[str, Any]]:
        session = "offline-session"
        for n, callback in enumerate(self._hooks.get("UserPromptSubmit", [])):
            self._answers[f"h{n}"] = anyio.Event()
            hook = {"hook_event_name": "UserPromptSubmit", "session_id": session, "prompt": prompt}
            request = {"subtype": "hook_callback", "callback_id": callback, "input": hook}
            yield {"type": "control_request", "request_id": f"h{n}", "request": request}
            await self._answers[f"h{n}"].wait()  # the model starts once the hook answered
        text = ["Acme Corp ", "is a customer."]
        for piece in text:
            delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": piece}}
            yield {"type": "stream_event", "uuid": piece, "session_id": session, "event": delta}
        yield (
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": "".join(text),
                "duration_ms": 1,
                "duration_api_ms": 1,
                "num_turns": 1,
                "session_id": session,
            }
        )


async def main(path: str) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="claude-example")
        await memory.remember("company", name="Acme Corp", website="acme.com")
        nc = NeotomaClaude(memory)
        options = ClaudeAgentOptions(hooks=nc.hooks(), include_partial_messages=True)
        real = bool(os.environ.get("ANTHROPIC_API_KEY"))
        # The client connects once; each prompt on it is one turn.
        async with ClaudeSDKClient(options, transport=None if real else OfflineCLI()) as client:  # noqa: SIM117
            async with nc.turn(client, "What do we know about Acme Corp?") as s:
                async for delta in s.text():
                    print(delta, end="", flush=True)
        print(f"\n[{s.result.stored_status}]")
        for h in await memory.history():
            print(f"stored: {h.status:9} {h.user!r} -> {h.reply!r}")


if __name__ == "__main__":
    backend = os.environ.get("NEOTOMA_EXAMPLE_BACKEND", "asyncio")  # or "trio"
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else ":memory:", backend=backend)
