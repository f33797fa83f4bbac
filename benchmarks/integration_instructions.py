"""Benchmark: instructions per turn of each loop of ``integration_overhead``, by callgrind.

    python benchmarks/integration_instructions.py [--turns 20] [--warm 10]
                                                  [--only pydantic-ai|openai-agents]
                                                  [--gc frozen|normal] [--baseline SRC]

The CPU figures of ``benchmarks/integration_overhead.py`` move by a few tenths of a ms from
run to run on a loaded machine, as much as the integrations cost; an instruction count
does not. For each framework, each of its loops (``framework``, ``turn``, ``manual``,
``integrated``: the loops of ``integration_overhead``, built by its own makers) runs in
child processes under ``valgrind --tool=callgrind``, alone: ``--warm`` turns, then the
collector as ``--gc`` says (``frozen``, the default: ``gc.collect(); gc.freeze()``, so a
full collection over the imports, which lands in one turn in hundreds, does not decide the
figure; ``normal``: left as it is), then a few more turns in one child and ``--turns``
more than that in another; a loop's instructions per turn are the difference of the two
children's totals over ``--turns``. Counted: the whole process, the store's SQLite thread
too. (Markers around the counted turns, callgrind's ``--zero-before`` and
``--dump-before``, kept the store thread's start-up and warm-up in the count: the turn
loop read 18.1 M instructions a turn that way, 10.7 M this way; they seem to zero only the
thread that calls the marker.)
Printed: instructions per turn of each loop, ``added`` = integrated - framework - turn and
``over manual`` = integrated - manual, in millions; with ``--baseline SRC`` the same for the
package in that source tree, beside. Needs valgrind; a loop takes a few minutes.

Each loop runs alone, so the collections a loop causes are its own (in the timed
benchmark the loops take turns and a collection counts to whichever loop set it off).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
from pathlib import Path
from typing import Any

from _callgrind import instructions

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOOPS = ("framework", "turn", "manual", "integrated")


async def _child(framework: str, loop_name: str, turns: int, warm: int, collector: str) -> None:
    sys.path.insert(0, str(HERE))
    import logging

    import integration_overhead as bench
    import structlog
    from _framework_bench import bench_loops

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    async with bench_loops(framework, bench.FRAMEWORKS[framework][1]) as loops:
        loop = loops[loop_name]
        for i in range(warm):
            await loop(f"What about Acme Corp? (warm {i})")
        if collector == "frozen":
            gc.collect()
            gc.freeze()
        for i in range(turns):
            await loop(f"What about Acme Corp? ({i})")


#: the counted turns of the shorter child (the longer one runs ``--turns`` more)
_BASE_TURNS = 5


def _total(tree: Path, framework: str, loop: str, turns: int, args: argparse.Namespace) -> int:
    """Instructions of a whole child process that runs ``turns`` turns after the warm-up."""
    child = [sys.executable, str(Path(__file__).resolve()), "--child", framework, loop]
    sizes = ["--turns", str(turns), "--warm", str(args.warm), "--gc", args.gc]
    [total] = instructions([*child, *sizes], tree=tree, marked=False)
    return total


def count(tree: Path, framework: str, loop: str, args: argparse.Namespace) -> int:
    """Instructions per turn of ``loop`` with ``tree``'s package: the difference of two
    children, ``--turns`` turns apart, over ``--turns``."""
    short = _total(tree, framework, loop, _BASE_TURNS, args)
    long = _total(tree, framework, loop, _BASE_TURNS + args.turns, args)
    return (long - short) // args.turns


def row(tree: Path, framework: str, args: argparse.Namespace) -> dict[str, int]:
    ir = {loop: count(tree, framework, loop, args) for loop in LOOPS}
    return {
        **ir,
        "added": ir["integrated"] - ir["framework"] - ir["turn"],
        "over_manual": ir["integrated"] - ir["manual"],
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"instructions per turn, millions (callgrind: {result['turns']} turns more in one child"
        f" than in another, after {result['warm']}; gc: {result['gc']})",
        f"{'framework':<16}{'tree':<11}"
        + "".join(f"{name:>12}" for name in (*LOOPS, "added", "over manual")),
    ]
    for framework, trees in result["frameworks"].items():
        for tree, figures in trees.items():
            cells = "".join(f"{figures[k] / 1e6:>12.3f}" for k in (*LOOPS, "added", "over_manual"))
            lines.append(f"{framework:<16}{tree:<11}{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--only", choices=["pydantic-ai", "openai-agents"])
    parser.add_argument("--gc", choices=["frozen", "normal"], default="frozen")
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child is not None:
        asyncio.run(_child(*args.child, args.turns, args.warm, args.gc))
        return
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    frameworks = [args.only] if args.only else ["pydantic-ai", "openai-agents"]
    result = {
        "turns": args.turns,
        "warm": args.warm,
        "gc": args.gc,
        "frameworks": {
            fw: {name: row(tree, fw, args) for name, tree in trees.items()} for fw in frameworks
        },
    }
    print(render(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
