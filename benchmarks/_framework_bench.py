"""The timing loop the framework-integration benchmarks share (``integration_overhead``,
``langgraph_claude_overhead``): each names its frameworks and builds their loops; this runs
them and prints the one table.

A framework's maker is given the ``NeotomaMemory`` and returns (or yields, as an async
context manager) its loops: ``framework`` (the run alone), ``seams`` (the run with the
integration's hooks doing nothing) and ``integrated`` (the run through the integration);
``turn`` (the turn alone) is added here. A maker may also give ``manual``: the framework run
inside a hand-written ``memory.turn`` (the obvious glue, keeping none of the rules the
integration keeps), the floor any glue pays for holding a turn open around a run (its
objects alive, so the collector has more to walk). The loops take turns one run at a time, in a
rotating order, round after round, on one embedded store (a SQLite file), so all see the
same machine. CPU is the process's (``time.process_time``: the store's SQLite thread
included), per turn, the median over rounds; ``added`` = integrated - framework - turn,
``glue`` = integrated - seams - turn and, with ``manual``, ``over manual`` = integrated -
manual, the column the goal is on (:data:`GOAL`, printed under the table).

The collector: by default (``--gc normal``) Python's, as an application runs it. A run
nested in a turn allocates past the young generation's threshold, so young collections
come about once per turn, and their promotions bring, now and then, a full collection that
walks every object of the process (the frameworks' imports: about 110,000) for tens of ms;
which loop it lands on is chance, so it moves one loop's median round by several tenths of
a ms. ``--gc frozen`` calls ``gc.collect(); gc.freeze()`` after the warm-up (what servers
that fork workers do): the objects of the imports are left out of every collection, the
collections that remain are those of the loops' own objects, so the figures repeat. The
table says which it was.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from neotoma_agent import EmbeddedStore, NeotomaMemory

REPLY = "Acme Corp is a customer of ours."
Loop = Callable[[str], Awaitable[None]]
#: The goal of issues 25 and 26 ("under 1 ms beyond the turn's own cost"), and the column it
#: is on: the turn's own cost is the turn held open around the same run (``manual``).
GOAL = "goal: over manual < 1 ms (the CPU beyond the turn's own cost: the same run by hand)"
#: A framework's maker: its loops, returned or yielded by an async context manager.
Maker = Callable[[NeotomaMemory], Any]
#: name -> (the module that must be importable, the maker)
Frameworks = dict[str, tuple[str, Maker]]


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


@contextlib.asynccontextmanager
async def _loops_of(make: Maker, memory: NeotomaMemory) -> AsyncIterator[dict[str, Loop]]:
    made = make(memory)
    if isinstance(made, dict):
        yield made
    else:
        async with made as loops:
            yield loops


@contextlib.asynccontextmanager
async def bench_loops(name: str, make: Maker) -> AsyncIterator[dict[str, Loop]]:
    """Framework ``name``'s loops over a fresh embedded store that holds the entity the
    prompts name, with ``turn`` (the same turn, no framework run) beside them."""
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "bench.db") as store:
            memory = NeotomaMemory(store, conversation_id=f"bench-{name}")
            await memory.remember("company", name="Acme Corp", website="acme.com")
            async with _loops_of(make, memory) as loops:

                async def turn_only(text: str) -> None:
                    async with memory.turn(text) as t:
                        t.reply = REPLY

                loops["turn"] = turn_only
                yield loops


async def measure(name: str, make: Maker, args: argparse.Namespace) -> dict[str, Any]:
    """One framework's row: the median CPU ms per turn of each loop, ``added`` and ``glue``."""
    async with bench_loops(name, make) as loops:
        await one_round(loops, max(1, args.turns // 10), "warm")  # imports, caches
        if args.gc == "frozen":
            gc.collect()
            gc.freeze()
        samples: dict[str, list[float]] = {label: [] for label in loops}
        try:
            for r in range(args.rounds):
                for label, ms in (await one_round(loops, args.turns, f"r{r}")).items():
                    samples[label].append(ms)
        finally:
            gc.unfreeze()
    med = {label: statistics.median(values) for label, values in samples.items()}
    manual = (
        {"manual_ms": med["manual"], "over_manual_ms": med["integrated"] - med["manual"]}
        if "manual" in med
        else {}
    )
    return {
        "framework_ms": med["framework"],
        "seams_ms": med["seams"],
        "turn_ms": med["turn"],
        "integrated_ms": med["integrated"],
        "added_ms": med["integrated"] - med["framework"] - med["turn"],
        "glue_ms": med["integrated"] - med["seams"] - med["turn"],
        **manual,
        "samples_ms": samples,
    }


async def run_all(frameworks: Frameworks, args: argparse.Namespace) -> dict[str, Any]:
    """Every installed framework's row (``--only`` one of them); the others skipped."""
    rows: dict[str, Any] = {}
    for name, (module, make) in frameworks.items():
        if args.only and name != args.only:
            continue
        if importlib.util.find_spec(module) is None:
            rows[name] = {"skipped": f"{module} is not installed"}
            continue
        rows[name] = await measure(name, make, args)
    return {
        "turns": args.turns,
        "rounds": args.rounds,
        "gc": args.gc,
        "goal": GOAL,
        "frameworks": rows,
    }


def render(result: dict[str, Any], width: int, footer: str) -> str:
    """The table: a row per framework (``width``: its name column), then ``footer``."""
    collector = (
        "frozen after the warm-up: gc.collect(); gc.freeze()"
        if result.get("gc") == "frozen"
        else "normal"
    )
    lines = [
        f"CPU per turn, ms (median of {result['rounds']} rounds of {result['turns']} turns;"
        f" gc: {collector})",
        f"{'framework':<{width}}{'alone':>9}{'seams':>9}{'turn':>9}{'integrated':>12}"
        f"{'added':>9}{'glue':>9}{'manual':>9}{'over manual':>13}",
    ]
    for name, row in result["frameworks"].items():
        if "skipped" in row:
            lines.append(f"{name:<{width}}  skipped: {row['skipped']}")
            continue
        lines.append(
            f"{name:<{width}}{row['framework_ms']:>9.3f}{row['seams_ms']:>9.3f}"
            f"{row['turn_ms']:>9.3f}{row['integrated_ms']:>12.3f}{row['added_ms']:>9.3f}"
            f"{row['glue_ms']:>9.3f}"
            + (
                f"{row['manual_ms']:>9.3f}{row['over_manual_ms']:>13.3f}"
                if "manual_ms" in row
                else f"{'-':>9}{'-':>13}"
            )
        )
    lines.append(footer)
    lines.append(GOAL)
    return "\n".join(lines)


def parse(
    doc: str | None, frameworks: Frameworks, argv: list[str] | None = None
) -> argparse.Namespace:
    """``--turns``, ``--rounds``, ``--gc normal|frozen``, ``--only NAME`` and ``--json PATH``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--gc",
        choices=["normal", "frozen"],
        default="normal",
        help="frozen: gc.collect(); gc.freeze() after the warm-up (see the module docstring)",
    )
    parser.add_argument("--only", choices=sorted(frameworks))
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)
