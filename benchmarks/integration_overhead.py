"""Benchmark: the CPU a framework integration adds per turn, beyond the turn's own cost.

    python benchmarks/integration_overhead.py [--turns 200] [--rounds 5] [--json PATH]
                                              [--only pydantic-ai|openai-agents]

For each framework whose package is installed, on the embedded store (a SQLite file), with
the framework's own test model, four loops take turns one run at a time (rotating the
order), round after round, so that all see the same machine:

- ``framework``: the framework run alone (Pydantic AI ``agent.run`` with a ``FunctionModel``
  streaming a short reply; the Agents SDK ``Runner.run`` with a ``ScriptedModel``), no memory;
- ``turn``: the turn alone (``async with memory.turn(text) as t: t.reply = ...``): the
  turn's own cost, store included;
- ``seams``: the framework run with the hooks the integration uses, doing nothing (a
  capability with ``wrap_run``, ``wrap_run_event_stream``, an async ``get_instructions``
  function, ``wrap_tool_execute`` and ``after_model_request``; run hooks and a
  ``call_model_input_filter``): what the framework itself spends on those seams;
- ``integrated``: the framework run through the integration (``NeotomaCapability``; the
  module's ``run``), which does both.

CPU is the process's (``time.process_time``: the store's SQLite thread included), per turn,
the median over rounds. ``added`` = integrated - framework - turn is what the glue itself
costs per turn (the goal is under 1 ms), and ``glue`` = integrated - seams - turn is that
less what the framework spends on its own seams. Each turn has one identifier naming an existing
entity and the store keeps the conversation's history (so the context block is rendered).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report

from neotoma_agent import EmbeddedStore, NeotomaMemory

REPLY = "Acme Corp is a customer of ours."
Loop = Callable[[str], Awaitable[None]]


def pydantic_ai_loops(memory: NeotomaMemory) -> dict[str, Loop]:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.models.function import FunctionModel

    from neotoma_agent.integrations.pydantic_ai import NeotomaCapability

    async def stream(messages: Any, info: Any) -> AsyncIterator[str]:
        for word in REPLY.split(" "):
            yield word + " "

    async def no_instructions(ctx: Any) -> None:
        return None

    @dataclass
    class Seams(AbstractCapability[Any]):
        """The hooks the integration uses, doing nothing: what the seams cost the framework."""

        def get_instructions(self) -> Any:
            return no_instructions  # async, as the integration's (a plain one runs in a thread)

        async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
            return await handler()

        async def wrap_run_event_stream(self, ctx: Any, *, stream: Any) -> Any:
            async for event in stream:
                yield event

        async def wrap_tool_execute(
            self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
        ) -> Any:
            return await handler(args)

        async def after_model_request(
            self, ctx: Any, *, request_context: Any, response: Any
        ) -> Any:
            return response

    # Every agent streams its requests (the capability watches events for the partial
    # text, which makes Pydantic AI stream): the same framework work each way.
    agents = {
        "framework": Agent(FunctionModel(stream_function=stream)),
        "seams": Agent(FunctionModel(stream_function=stream), capabilities=[Seams()]),
        "integrated": Agent(
            FunctionModel(stream_function=stream), capabilities=[NeotomaCapability(memory)]
        ),
    }

    def loop(agent: Agent[None, str]) -> Loop:
        async def one(text: str) -> None:
            async with agent.run_stream(text) as streamed:
                await streamed.get_output()

        return one

    return {label: loop(agent) for label, agent in agents.items()}


def openai_agents_loops(memory: NeotomaMemory) -> dict[str, Loop]:
    from agents import Agent, RunConfig, RunHooks, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    from neotoma_agent.integrations.openai_agents import run

    set_tracing_disabled(True)
    config = RunConfig(tracing_disabled=True)

    def agent() -> Agent[Any]:
        return Agent(
            name="a", instructions="You help.", model=ScriptedModel([[assistant_message(REPLY)]])
        )

    def no_filter(data: Any) -> Any:
        return data.model_data

    # The seams the integration uses, doing nothing: run hooks and an input filter.
    seams_config = dataclasses.replace(config, call_model_input_filter=no_filter)

    # The integration sends the conversation's last turns as input items (history_turns,
    # 5 by default): the runs without it get as many, so the SDK handles the same input.
    earlier: list[Any] = []
    for i in range(memory.history_turns):
        earlier += [
            {"role": "user", "content": f"What about Acme Corp? (earlier {i})"},
            {"role": "assistant", "content": REPLY},
        ]

    def with_history(text: str) -> list[Any]:
        return [*earlier, {"role": "user", "content": text}]

    async def framework(text: str) -> None:
        await Runner.run(agent(), with_history(text), run_config=config)

    async def seams(text: str) -> None:
        await Runner.run(agent(), with_history(text), run_config=seams_config, hooks=RunHooks())

    async def with_memory(text: str) -> None:
        await run(agent(), text, memory=memory, run_config=config)

    return {"framework": framework, "seams": seams, "integrated": with_memory}


FRAMEWORKS: dict[str, tuple[str, Callable[[NeotomaMemory], dict[str, Loop]]]] = {
    "pydantic-ai": ("pydantic_ai", pydantic_ai_loops),
    "openai-agents": ("agents", openai_agents_loops),
}


async def one_round(loops: dict[str, Loop], turns: int, label: str) -> dict[str, float]:
    """CPU ms per turn of each loop over ``turns`` turns, the loops taking turns one by one
    (in a rotating order), so a slower moment of the machine falls on all of them."""
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
            loops = make(memory)

            async def turn_only(text: str) -> None:
                async with memory.turn(text) as t:
                    t.reply = REPLY

            loops["turn"] = turn_only
            await one_round(loops, max(1, args.turns // 10), "warm")  # imports, caches, pages
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
        f"{'framework':<15}{'alone':>9}{'seams':>9}{'turn':>9}{'integrated':>12}"
        f"{'added':>9}{'glue':>9}",
    ]
    for name, row in result["frameworks"].items():
        if "skipped" in row:
            lines.append(f"{name:<15}  skipped: {row['skipped']}")
            continue
        lines.append(
            f"{name:<15}{row['framework_ms']:>9.3f}{row['seams_ms']:>9.3f}{row['turn_ms']:>9.3f}"
            f"{row['integrated_ms']:>12.3f}{row['added_ms']:>9.3f}{row['glue_ms']:>9.3f}"
        )
    lines.append(
        "added = integrated - alone - turn (goal: under 1 ms); glue = integrated - seams - turn\n"
        "(seams: the framework run with the same hooks doing nothing: the framework's own\n"
        "cost of the seams the integration needs)"
    )
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
