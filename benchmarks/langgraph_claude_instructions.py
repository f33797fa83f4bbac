"""Benchmark: instructions per turn of each loop of ``langgraph_claude_overhead``, by callgrind.

    python benchmarks/langgraph_claude_instructions.py [--turns 30] [--only NAME] [--json PATH]

The CPU medians of ``benchmarks/langgraph_claude_overhead.py`` move by a few tenths of a
millisecond from run to run on a loaded machine, as much as the figure its goal is on
(``over manual``); an instruction count does not. For each framework a child process runs
under ``valgrind --tool=callgrind``, builds the same loops (the same makers), warms them
(``--turns`` turns of each, rotating, as the CPU benchmark's rounds), then runs ``--turns``
turns of one loop at a time, each after a ``gc.collect()`` (a full collection, tens of
millions of instructions, would otherwise land in whichever loop runs when it falls due:
each loop pays its own young collections, none a full one): the child calls ``getppid()``
just before a loop's turns
(``--zero-before``) and ``getpgrp()`` just after (``--dump-before``), so each dump counts
one loop's turns only, every thread of the process (the store's SQLite thread included).
Printed: instructions per turn of each loop, ``added`` = integrated - framework - turn and
``over manual`` = integrated - manual, the column the goal is on. Needs valgrind
(``apt-get install valgrind``); a framework takes a few minutes.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any

from _callgrind import instructions

HERE = Path(__file__).resolve().parent
ORDER = ("framework", "turn", "seams", "manual", "integrated")


async def _child(name: str, turns: int) -> None:
    sys.path.insert(0, str(HERE))
    import _callgrind
    import langgraph_claude_overhead as bench
    from _framework_bench import bench_loops, one_round

    _, make = bench.FRAMEWORKS[name]
    async with bench_loops(name, make) as loops:
        await one_round(loops, turns, "warm")
        # The first dump after the warm-up carries a one-off of about 180 M instructions,
        # whatever loop it counts: a turn in a dump of its own, dropped.
        gc.collect()
        _callgrind.start()
        await loops["framework"]("What about Acme Corp? (settling)")
        _callgrind.stop()
        for label in ORDER:
            # Each loop starts with the collector empty, so that it pays for its own young
            # collections and none of a full one another loop's garbage brought on (tens of
            # millions of instructions: it would swamp a loop).
            gc.collect()
            _callgrind.start()
            for i in range(turns):
                await loops[label](f"What about Acme Corp? (counted {label} {i})")
            _callgrind.stop()


def count(name: str, turns: int) -> dict[str, int]:
    """Instructions per turn of each loop of framework ``name``."""
    child = [sys.executable, str(Path(__file__).resolve()), "--child", name]
    # The settling turn's dump, then one per loop, in the order they ran.
    totals = instructions([*child, "--turns", str(turns)], marked=True)[1:]
    if len(totals) < len(ORDER):
        raise RuntimeError(f"callgrind wrote {len(totals)} dumps, not one per loop")
    return {label: total // turns for label, total in zip(ORDER, totals, strict=False)}


def main() -> None:
    sys.path.insert(0, str(HERE))
    from langgraph_claude_overhead import FRAMEWORKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--only", choices=sorted(FRAMEWORKS))
    parser.add_argument("--child", choices=sorted(FRAMEWORKS), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child is not None:
        import anyio

        anyio.run(_child, args.child, args.turns)
        return
    import importlib.util

    rows: dict[str, Any] = {}
    for name, (module, _) in FRAMEWORKS.items():
        if args.only and name != args.only:
            continue
        if importlib.util.find_spec(module) is None:
            rows[name] = {"skipped": f"{module} is not installed"}
            continue
        per = count(name, args.turns)
        per["added"] = per["integrated"] - per["framework"] - per["turn"]
        per["over_manual"] = per["integrated"] - per["manual"]
        rows[name] = per
    print(f"instructions per turn, millions ({args.turns} turns of each loop, callgrind)")
    columns = (*ORDER, "added", "over_manual")
    print(f"{'framework':<18}" + "".join(f"{c.replace('_', ' '):>12}" for c in columns))
    for name, row in rows.items():
        if "skipped" in row:
            print(f"{name:<18}  skipped: {row['skipped']}")
            continue
        print(f"{name:<18}" + "".join(f"{row[c] / 1e6:>12.3f}" for c in columns))
    print("goal (on CPU, not instructions): over manual < 1 ms")
    if args.json is not None:
        args.json.write_text(json.dumps({"turns": args.turns, "frameworks": rows}, indent=2))


if __name__ == "__main__":
    main()
