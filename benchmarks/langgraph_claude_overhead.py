"""Benchmark: the CPU the LangGraph and Claude Agent SDK integrations add per turn.

    python benchmarks/langgraph_claude_overhead.py [--turns 200] [--rounds 5] [--json PATH]
                                                   [--only langgraph|claude-agent-sdk]

For each framework whose package is installed, on the embedded store (a SQLite file), with a
fake model, five loops take turns one run at a time (rotating the order), round after round:

- ``framework``: the run alone, no memory (``create_agent`` on ``GenericFakeChatModel``
  streamed with ``astream(stream_mode="messages")``, given the same earlier messages the
  integration sends; a ``ClaudeSDKClient`` prompt over the tests' fake CLI transport);
- ``turn``: the turn alone (``async with memory.turn(text) as t: t.reply = ...``);
- ``seams``: the run with the seams the integration uses, doing nothing (a pass-through
  ``AgentMiddleware`` and the three stream modes ``astream_turn`` reads; the four hooks
  answering ``{}``);
- ``manual``: the ``framework`` run inside a hand-written ``async with memory.turn(text) as
  t:``, given what the integration gives the model, the way it gives it, and the text read
  as the caller reads it: LangGraph, the same context block as a system message ahead of
  the same earlier turns (the model is called with the same messages as ``integrated``),
  the streamed text as ``t.reply``; Claude, the same block as ``additionalContext`` from a
  ``UserPromptSubmit`` hook of its own (the earlier turns in it only on the client's first
  prompt, as ``nc.hooks()`` does), the text deltas picked out, the result's text as
  ``t.reply``. The obvious glue, keeping none of the rules the integration keeps;
- ``integrated``: the run through the integration (``astream_turn`` + ``NeotomaMiddleware``;
  ``nc.turn``).

CPU is the process's (``time.process_time``: the store's SQLite thread included), per turn,
the median over rounds. ``over manual`` = integrated - manual is the CPU the integration
costs beyond the turn's own cost, a turn held open around the same run: the goal (issues 25
and 26: under 1 ms) is on this column. ``added`` = integrated - framework - turn also
counts what holding any turn open around a run costs beyond the two measured apart (the
hand-written loop pays it too); ``glue`` = integrated - seams - turn. The loops have the
shape of ``benchmarks/integration_overhead.py``'s: both run them with
``benchmarks/_framework_bench.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _framework_bench import REPLY, Frameworks, Loop, run_all
from _framework_bench import parse as parse_args
from _framework_bench import render as render_table
from _report import run_and_report

from neotoma_agent import NeotomaMemory

# The tests' fake claude CLI (claude_support.FakeCLI) stands in for the real program.
FAKE_CLI_DIR = str(Path(__file__).resolve().parents[1] / "tests" / "integrations")


@contextlib.asynccontextmanager
async def langgraph_loops(memory: NeotomaMemory) -> AsyncIterator[dict[str, Loop]]:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage

    from neotoma_agent.integrations.langgraph import NeotomaMiddleware, astream_turn

    class Seams(AgentMiddleware):  # type: ignore[misc]
        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    def model() -> Any:
        return GenericFakeChatModel(messages=itertools.repeat(REPLY))

    plain = create_agent(model(), [])
    seamed = create_agent(model(), [], middleware=[Seams()])
    integrated = create_agent(model(), [], middleware=[NeotomaMiddleware()])
    # astream_turn sends the conversation's last turns (no checkpointer): so do the others.
    earlier: list[Any] = []
    for _ in range(memory.history_turns):
        earlier += [HumanMessage("What about Acme Corp? (earlier)"), AIMessage(REPLY)]

    async def framework(text: str) -> None:
        async for _ in plain.astream(
            {"messages": [*earlier, HumanMessage(text)]}, stream_mode="messages"
        ):
            pass

    async def seams(text: str) -> None:
        async for _ in seamed.astream(
            {"messages": [*earlier, HumanMessage(text)]},
            stream_mode=["messages", "updates", "values"],
            version="v2",
        ):
            pass

    async def manual(text: str) -> None:
        # The obvious glue: the context (without the earlier turns, which go in as
        # messages), the earlier turns, the streamed text as the reply (none of the rules
        # astream_turn keeps).
        async with memory.turn(text) as t:
            messages: list[Any] = [SystemMessage(t.context(max_chars=4000, history=False))]
            for h in t.history:
                messages += [HumanMessage(h.user), AIMessage(h.reply or "")]
            messages.append(HumanMessage(text))
            reply = []
            async for chunk, _meta in plain.astream({"messages": messages}, stream_mode="messages"):
                if isinstance(chunk, AIMessageChunk):
                    reply.append(chunk.text)
            t.reply = "".join(reply)

    async def with_memory(text: str) -> None:
        async with astream_turn(integrated, text, memory=memory) as s:
            async for _ in s.text():
                pass

    yield {"framework": framework, "seams": seams, "manual": manual, "integrated": with_memory}


@contextlib.asynccontextmanager
async def claude_loops(memory: NeotomaMemory) -> AsyncIterator[dict[str, Loop]]:
    sys.path.insert(0, FAKE_CLI_DIR)
    from claude_agent_sdk import (
        ClaudeAgentOptions,
        ClaudeSDKClient,
        HookMatcher,
        ResultMessage,
        StreamEvent,
    )
    from claude_support import FakeCLI, success

    from neotoma_agent import Turn
    from neotoma_agent.integrations.claude_agent_sdk import NeotomaClaude

    def script(text: str) -> list[Any]:
        hook = ("hook", "UserPromptSubmit", {"prompt": text})
        return [hook, ("delta", "Acme Corp "), ("delta", "is a customer of ours."), success(REPLY)]

    async def nothing(data: Any, tool_use_id: Any, context: Any) -> Any:
        return {}

    nc = NeotomaClaude(memory)
    no_ops = {
        event: [HookMatcher(hooks=[nothing])]
        for event in ("UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "PreCompact")
    }
    # The hand-written loop's own UserPromptSubmit hook: the context block, the same one
    # nc.hooks() sends (t.context(max_chars=4000), the earlier turns only on the client's
    # first prompt: its session carries them after), reaches the model by the SDK's
    # context seam (additionalContext), as the integration's does. The client's reader
    # runs outside the turn, so the hook finds it where the loop put it.
    held: list[Turn] = []
    prompted: list[bool] = []

    async def context_hook(data: Any, tool_use_id: Any, context: Any) -> Any:
        block = held[-1].context(max_chars=4000, history=not prompted)
        return {
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": block}
        }

    by_hand = {"UserPromptSubmit": [HookMatcher(hooks=[context_hook])]}
    many = [script("What about Acme Corp?")] * 100_000
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for label, hooks in (
            ("framework", None),
            ("seams", no_ops),
            ("manual", by_hand),
            ("integrated", nc.hooks()),
        ):
            cli = await stack.enter_async_context(FakeCLI(*many))
            options = ClaudeAgentOptions(hooks=hooks, include_partial_messages=True)  # type: ignore[arg-type]
            clients[label] = await stack.enter_async_context(
                ClaudeSDKClient(options, transport=cli)
            )

        def plain(label: str) -> Loop:
            async def one(text: str) -> None:
                client = clients[label]
                await client.query(text)
                async for _ in client.receive_response():
                    pass

            return one

        async def manual(text: str) -> None:
            # The obvious glue: the prompt as it is, the context by the hook above, the
            # text deltas picked out to be shown (as s.text() does), the result's text as
            # the reply (none of the rules nc.turn keeps).
            client = clients["manual"]
            async with memory.turn(text) as t:
                held.append(t)
                try:
                    await client.query(text)
                    prompted[:] = [True]
                    shown = []
                    async for message in client.receive_response():
                        if isinstance(message, StreamEvent):
                            delta = message.event.get("delta") or {}
                            if delta.get("type") == "text_delta":
                                shown.append(delta["text"])
                        elif isinstance(message, ResultMessage) and isinstance(message.result, str):
                            t.reply = message.result
                finally:
                    held.pop()

        async def with_memory(text: str) -> None:
            async with nc.turn(clients["integrated"], text) as s:
                async for _ in s.text():
                    pass

        yield {
            "framework": plain("framework"),
            "seams": plain("seams"),
            "manual": manual,
            "integrated": with_memory,
        }


FRAMEWORKS: Frameworks = {
    # create_agent and the middleware are the `langchain` package's (it brings langgraph);
    # langgraph alone (the `bench` extra) runs none of these loops.
    "langgraph": ("langchain", langgraph_loops),
    "claude-agent-sdk": ("claude_agent_sdk", claude_loops),
}


FOOTER = (
    "added = integrated - alone - turn; glue = integrated - seams - turn; "
    "over manual = integrated - manual\n(manual: the same run inside a hand-written turn, "
    "given the same context and history)"
)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    return await run_all(FRAMEWORKS, args)


def render(result: dict[str, Any]) -> str:
    return render_table(result, 18, FOOTER)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    return parse_args(__doc__, FRAMEWORKS, argv)


if __name__ == "__main__":
    run_and_report(parse(), main, render)
