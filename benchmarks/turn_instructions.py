"""Benchmark: instructions per short turn on the embedded store, counted by callgrind.

    python benchmarks/turn_instructions.py [--turns 40] [--baseline TREE] [--json PATH]

The CPU figures of ``benchmarks/peers.py`` move with the machine's load; an instruction
count does not. For each source tree (this one, and ``--baseline`` if given: e.g.
``git worktree add /tmp/main main``) a child process runs under ``valgrind
--tool=callgrind``: it opens an ``EmbeddedStore`` on a fresh file, runs the peers
benchmark's short turn (a 64-character prompt, a 210-character reply, default settings)
over 16 conversations in rotation, ``WARMUP`` turns first, then ``--turns`` counted ones:
the child calls ``getppid()`` just before them and ``getpgrp()`` just after (see
``_callgrind``). Printed: instructions per counted turn, of the whole process (the event
loop's thread and the store's), in user space: the kernel's part (thread wake-ups, the
WAL's writes) is not counted. Needs valgrind (``apt-get install valgrind``); a tree
takes about a minute.
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
#: turns before the counted ones (imports, caches, each conversation's first turns)
WARMUP = 80
CONVERSATIONS = 16


async def _child(turns: int) -> None:
    sys.path.insert(0, str(HERE))
    import _callgrind
    from peers import conversation, prompt, reply

    from neotoma_agent import NeotomaMemory
    from neotoma_agent.transport.embedded import EmbeddedStore

    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "turns.db") as store:
            memories = [
                NeotomaMemory(store, conversation_id=conversation(c)) for c in range(CONVERSATIONS)
            ]

            async def turn(i: int) -> None:
                async with memories[i % CONVERSATIONS].turn(prompt(i), turn_id=f"t{i}") as t:
                    t.reply = reply(i)

            for i in range(WARMUP):
                await turn(i)
            _callgrind.start()
            for i in range(WARMUP, WARMUP + turns):
                await turn(i)
            _callgrind.stop()


def count(tree: Path, turns: int) -> int:
    """Instructions of ``turns`` counted turns, with ``tree``'s package."""
    child = [sys.executable, str(HERE / "turn_instructions.py"), "--child", "--turns", str(turns)]
    return instructions(child, tree=tree, marked=True)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        import anyio

        anyio.run(_child, args.turns)
        return
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    rows = [
        {"tree": name, "instructions_per_turn": count(tree, args.turns) // args.turns}
        for name, tree in trees.items()
    ]
    print(f"embedded store, {args.turns} short turns after {WARMUP} (callgrind, user space)")
    for row in rows:
        print(f"  {row['tree']:<10} {row['instructions_per_turn']:>12,} instructions per turn")
    if args.json is not None:
        args.json.write_text(json.dumps({"turns": args.turns, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
