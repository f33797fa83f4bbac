"""Benchmark: the CPU the LangGraph and Claude Agent SDK integrations add per turn.

    python benchmarks/langgraph_claude_overhead.py [--turns 200] [--rounds 5] [--json PATH]
                                                   [--only langgraph|claude-agent-sdk]

For each framework whose package is installed, on the embedded store (a SQLite file), with a
fake model, four loops take turns one run at a time (rotating the order), round after round:

- ``framework``: the run alone, no memory (``create_agent`` on ``GenericFakeChatModel``
  streamed with ``astream(stream_mode="messages")``, given the same earlier messages the
  integration sends; a ``ClaudeSDKClient`` prompt over the tests' fake CLI transport);
- ``turn``: the turn alone (``async with memory.turn(text) as t: t.reply = ...``);
- ``seams``: the run with the seams the integration uses, doing nothing (a pass-through
  ``AgentMiddleware`` and the three stream modes ``astream_turn`` reads; the four hooks
  answering ``{}``);
- ``integrated``: the run through the integration (``astream_turn`` + ``NeotomaMiddleware``;
  ``nc.turn``).

CPU is the process's (``time.process_time``: the store's SQLite thread included), per turn,
the median over rounds. ``added`` = integrated - framework - turn; ``glue`` = integrated -
seams - turn (the goal: under 1 ms). The loops have the shape of
``benchmarks/integration_overhead.py``'s (one function per framework returning them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report

from neotoma_agent import EmbeddedStore, NeotomaMemory

REPLY = "Acme Corp is a customer of ours."
# The tests' fake claude CLI (claude_support.FakeCLI) stands in for the real program.
FAKE_CLI_DIR = str(Path(__file__).resolve().parents[1] / "tests" / "integrations")
Loop = Callable[[str], Awaitable[None]]


@contextlib.asynccontextmanager
async def langgraph_loops(memory: NeotomaMemory) -> AsyncIterator[dict[str, Loop]]:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage

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

    async def with_memory(text: str) -> None:
        async with astream_turn(integrated, text, memory=memory) as s:
            async for _ in s.text():
                pass

    yield {"framework": framework, "seams": seams, "integrated": with_memory}


@contextlib.asynccontextmanager
async def claude_loops(memory: NeotomaMemory) -> AsyncIterator[dict[str, Loop]]:
    sys.path.insert(0, FAKE_CLI_DIR)
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, HookMatcher
    from claude_support import FakeCLI, success

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
    many = [script("What about Acme Corp?")] * 100_000
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for label, hooks in (("framework", None), ("seams", no_ops), ("integrated", nc.hooks())):
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

        async def with_memory(text: str) -> None:
            async with nc.turn(clients["integrated"], text) as s:
                async for _ in s.text():
                    pass

        yield {"framework": plain("framework"), "seams": plain("seams"), "integrated": with_memory}


FRAMEWORKS: dict[str, tuple[str, Callable[[NeotomaMemory], Any]]] = {
    "langgraph": ("langgraph", langgraph_loops),
    "claude-agent-sdk": ("claude_agent_sdk", claude_loops),
}


async def one_round(loops: dict[str, Loop], turns: int, label: str) -> dict[str, float]:
    """CPU ms per turn of each loop, the loops taking turns one by one (rotating order)."""
    spent = dict.fromkeys(loops, 0.0)
    order = list(loops)
    for i in range(turns):
        for name in order[i % len(order) :] + order[: i % len(order)]:
            started = time.process_time()
            await loops[name](f"What about Acme Corp? ({label} {name} {i})")
            spent[name] += time.process_time() - started
    return {name: total / turns * 1000 for name, total in spent.items()}


async def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    _module, make = FRAMEWORKS[name]
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "bench.db") as store:
            memory = NeotomaMemory(store, conversation_id=f"bench-{name}")
            await memory.remember("company", name="Acme Corp", website="acme.com")
            async with make(memory) as loops:

                async def turn_only(text: str) -> None:
                    async with memory.turn(text) as t:
                        t.reply = REPLY

                loops["turn"] = turn_only
                await one_round(loops, max(1, args.turns // 10), "warm")
                samples: dict[str, list[float]] = {label: [] for label in loops}
                for r in range(args.rounds):
                    for label, ms in (await one_round(loops, args.turns, f"r{r}")).items():
                        samples[label].append(ms)
    med = {label: statistics.median(values) for label, values in samples.items()}
    return {
        "framework_ms": med["framework"],
        "seams_ms": med["seams"],
        "turn_ms": med["turn"],
        "integrated_ms": med["integrated"],
        "added_ms": med["integrated"] - med["framework"] - med["turn"],
        "glue_ms": med["integrated"] - med["seams"] - med["turn"],
        "samples_ms": samples,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, (module, _make) in FRAMEWORKS.items():
        if args.only and name != args.only:
            continue
        if importlib.util.find_spec(module) is None:
            rows[name] = {"skipped": f"{module} is not installed"}
            continue
        rows[name] = await measure(name, args)
    return {"turns": args.turns, "rounds": args.rounds, "frameworks": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        f"CPU per turn, ms (median of {result['rounds']} rounds of {result['turns']} turns)",
        f"{'framework':<18}{'alone':>9}{'seams':>9}{'turn':>9}{'integrated':>12}"
        f"{'added':>9}{'glue':>9}",
    ]
    for name, row in result["frameworks"].items():
        if "skipped" in row:
            lines.append(f"{name:<18}  skipped: {row['skipped']}")
            continue
        lines.append(
            f"{name:<18}{row['framework_ms']:>9.3f}{row['seams_ms']:>9.3f}{row['turn_ms']:>9.3f}"
            f"{row['integrated_ms']:>12.3f}{row['added_ms']:>9.3f}{row['glue_ms']:>9.3f}"
        )
    lines.append("added = integrated - alone - turn; glue = integrated - seams - turn")
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=sorted(FRAMEWORKS))
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    run_and_report(arguments, main, render)
