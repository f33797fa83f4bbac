"""Benchmark: instructions per tool call over the dev server, counted by callgrind.

    python benchmarks/tool_calls_instructions.py [--turns 10] [--calls 50] [--baseline SRC]

The CPU figures of ``benchmarks/tool_calls.py`` move by 10% from run to run on a loaded
machine; an instruction count does not. For each source tree (this one, and ``--baseline``
if given) a child process runs under ``valgrind --tool=callgrind``: it starts the dev
server (its own process, not counted), warms a memory with 6 turns, then runs ``--turns``
turns of 0 calls, and in another child of ``--calls`` calls (the same turns as
``tool_calls.py``: 5 history turns each). Only the timed turns are counted: the child
calls ``getppid()`` just before them (``--zero-before``) and ``getpgrp()`` just after
(``--dump-before``). Printed: instructions per turn, and per call
``(I(calls) - I(0)) / (turns * calls)``, of the whole client process (the turn's thread
and any other). Needs valgrind (``apt-get install valgrind``); a run takes a minute or two.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _callgrind import instructions

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


async def _child(calls: int, turns: int) -> None:
    sys.path.insert(0, str(HERE))
    import _callgrind
    import tool_calls as bench

    from neotoma_agent import HttpTransport, NeotomaMemory, RetryPolicy

    bench._quiet()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "served.db"
        async with (
            bench.dev_server(db) as (url, _),
            HttpTransport(url, token=bench.TOKEN, retry=RetryPolicy(backoff=False)) as http,
        ):
            memory = NeotomaMemory(http, conversation_id="c", platform="bench", history_turns=5)
            for i in range(6):
                await bench.one_turn(memory, calls, -1 - i)
            _callgrind.start()
            for i in range(turns):
                await bench.one_turn(memory, calls, i)
            _callgrind.stop()


def count(tree: Path, calls: int, turns: int) -> int:
    """Instructions of ``turns`` timed turns of ``calls`` calls, with ``tree``'s package."""
    child = [sys.executable, str(HERE / "tool_calls_instructions.py"), "--child", str(calls)]
    return instructions([*child, "--turns", str(turns)], tree=tree, marked=True)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child is not None:
        import anyio

        anyio.run(_child, args.child, args.turns)
        return
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    rows = []
    for name, tree in trees.items():
        none, many = (count(tree, n, args.turns) for n in (0, args.calls))
        rows.append(
            {
                "tree": name,
                "instructions_per_turn_0": none // args.turns,
                f"instructions_per_turn_{args.calls}": many // args.turns,
                "instructions_per_call": (many - none) // (args.turns * args.calls),
            }
        )
    print(f"dev server, {args.turns} turns per row, {args.calls} calls (callgrind)")
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
