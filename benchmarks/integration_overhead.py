"""Benchmark: the CPU a framework integration adds per turn, beyond the turn's own cost.

    python benchmarks/integration_overhead.py [--turns 200] [--rounds 5] [--json PATH]
                                              [--only pydantic-ai|openai-agents]

For each framework whose package is installed, on the embedded store (a SQLite file), with
the framework's own test model, five loops take turns one run at a time (rotating the
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
  module's ``run``), which does both;
- ``manual``: the same framework run inside a hand-written turn (``async with
  memory.turn(text) as t:`` around it, ``t.reply = `` its output), the obvious glue that
  keeps none of the rules: what holding a turn open around a run costs any glue. It gives
  the model what the integration gives it: ``t.context()`` as instructions (Pydantic AI:
  the run's ``instructions=``, history included as the capability does; the Agents SDK:
  appended to the agent's instructions, history left out as ``run`` does, since the
  history goes as input items), so both runs make the same model request and ``over
  manual`` is the integration's own cost, not that of a longer prompt or of the context
  (rendering it is the turn's work: about 0.04 ms).

CPU is the process's (``time.process_time``: the store's SQLite thread included), per turn,
the median over rounds. ``added`` = integrated - framework - turn is what the glue itself
costs per turn, and ``glue`` = integrated - seams - turn is that less what the framework
spends on its own seams; ``over manual`` = integrated - manual is what the integration
costs beyond the hand-written glue, the column the goal is on (under 1 ms beyond the
turn's own cost: ``_framework_bench.GOAL``). Each turn has one identifier
naming an existing entity and the store keeps the conversation's history (so the context
block is rendered).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _framework_bench import REPLY, Frameworks, Loop, run_all
from _framework_bench import parse as parse_args
from _framework_bench import render as render_table
from _report import run_and_report

from neotoma_agent import NeotomaMemory


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

    alone = agents["framework"]

    async def manual(text: str) -> None:
        async with memory.turn(text) as t:
            # The capability's defaults: the context, history included, within 4000 chars.
            block = t.context(max_chars=4000) or None
            async with alone.run_stream(text, instructions=block) as streamed:
                t.reply = await streamed.get_output()

    return {**{label: loop(agent) for label, agent in agents.items()}, "manual": manual}


def openai_agents_loops(memory: NeotomaMemory) -> dict[str, Loop]:
    from agents import Agent, RunConfig, RunHooks, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    from neotoma_agent.integrations.openai_agents import run

    set_tracing_disabled(True)
    config = RunConfig(tracing_disabled=True)

    def agent(instructions: str = "You help.") -> Agent[Any]:
        return Agent(
            name="a", instructions=instructions, model=ScriptedModel([[assistant_message(REPLY)]])
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

    async def manual(text: str) -> None:
        async with memory.turn(text) as t:
            # As run's input filter does: the context after the instructions, no history.
            block = t.context(max_chars=4000, history=False)
            instructions = f"You help.\n\n{block}" if block else "You help."
            result = await Runner.run(agent(instructions), with_history(text), run_config=config)
            t.reply = result.final_output

    return {"framework": framework, "seams": seams, "integrated": with_memory, "manual": manual}


FRAMEWORKS: Frameworks = {
    "pydantic-ai": ("pydantic_ai", pydantic_ai_loops),
    "openai-agents": ("agents", openai_agents_loops),
}

FOOTER = (
    "added = integrated - alone - turn; glue = integrated - seams - turn\n"
    "(seams: the framework run with the same hooks doing nothing: the framework's own\n"
    "cost of the seams the integration needs); over manual = integrated - manual (manual:\n"
    "the same run, given the same context, inside a hand-written turn)"
)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    return await run_all(FRAMEWORKS, args)


def render(result: dict[str, Any]) -> str:
    return render_table(result, 15, FOOTER)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    return parse_args(__doc__, FRAMEWORKS, argv)


if __name__ == "__main__":
    run_and_report(parse(), main, render)
