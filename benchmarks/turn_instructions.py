"""Benchmark: instructions per short turn on the embedded store, counted by callgrind.

    python benchmarks/turn_instructions.py [--turns 40] [--scoped] [--loop] [--baseline TREE]
        [--backend trio] [--json PATH]
    python benchmarks/turn_instructions.py --turns 0 --stores 200 [--loop] [--store-callers 64]
        [--baseline TREE]

The CPU figures of ``benchmarks/peers.py`` move with the machine's load; an instruction
count does not. For each source tree (this one, and ``--baseline`` if given: e.g.
``git worktree add /tmp/main main``) a child process runs under ``valgrind
--tool=callgrind``: it opens an ``EmbeddedStore`` on a fresh file, runs the peers
benchmark's short turn (a 64-character prompt, a 210-character reply, default settings)
over 16 conversations in rotation, ``WARMUP`` turns first, then ``--turns`` counted ones:
the child calls ``getppid()`` just before them and ``getpgrp()`` just after (see
``_callgrind``). Printed: instructions per counted turn, of the whole process (the event
loop's thread and the store's), in user space: the kernel's part (thread wake-ups, the
WAL's writes) is not counted. With ``--scoped``, the same turns are counted a second time
through each conversation's own user's view (``store.for_user(...)``, as the peers
benchmark's ``scoped`` peer builds it), and the ratio scoped / unscoped is printed beside
them (the goal: at most ``GOAL_SCOPED_RATIO``). With ``--loop``, the same turns are
counted a third time on the event loop's thread alone (callgrind's ``--separate-threads``):
what a turn costs the caller's thread, the store's own thread left out. ``--backend trio``
runs every child on trio (asyncio by default, as the peers benchmark). With ``--stores N``,
``N`` turn-shaped ``EmbeddedStore.store`` calls (``sqlite_floor.py``'s: a conversation, a
message, a turn record and a PART_OF edge, as a body) from one caller are counted the same
way, after ``STORE_WARMUP`` of them (and with ``--loop``, on the event loop's thread alone):
the generic store path, HTTP's bodies and answers included; ``--store-callers C`` counts
them again from ``C`` concurrent callers (whose stores the store's thread commits
together); ``--turns 0`` counts stores alone. Needs valgrind
(``apt-get install valgrind``); a tree takes about a minute (a minute more for each of
``--scoped`` and ``--loop``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _callgrind import instructions
from peers import GOAL_SCOPED_RATIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: turns before the counted ones (imports, caches, each conversation's first turns)
WARMUP = 80
CONVERSATIONS = 16
#: stores before the counted ones (``--stores``), over ``STORE_CONVERSATIONS`` conversations
STORE_WARMUP = 200
STORE_CONVERSATIONS = 64


async def _child(turns: int, scoped: bool) -> None:
    sys.path.insert(0, str(HERE))
    import _callgrind
    from peers import conversation, prompt, reply, user

    from neotoma_agent import NeotomaMemory
    from neotoma_agent.transport.embedded import EmbeddedStore

    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "turns.db") as store:
            memories = [
                NeotomaMemory(
                    store.for_user(user(c)) if scoped else store, conversation_id=conversation(c)
                )
                for c in range(CONVERSATIONS)
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


async def _store_child(stores: int, callers: int) -> None:
    sys.path.insert(0, str(HERE))
    import _callgrind
    import anyio
    from embedded_store import turn_payload

    from neotoma_agent.transport.embedded import EmbeddedStore

    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "stores.db") as store:

            async def one(i: int) -> None:
                c = i % STORE_CONVERSATIONS
                p = turn_payload(f"conv-{c}", i, f"message {i} of caller {c}")
                await store.store(
                    p["entities"],
                    idempotency_key=p["idempotency_key"],
                    relationships=p["relationships"],
                )

            async def caller(first: int, last: int) -> None:
                for i in range(first, last, callers):
                    await one(i)

            async def run(first: int, last: int) -> None:
                if callers == 1:
                    await caller(first, last)
                    return
                async with anyio.create_task_group() as tg:
                    for c in range(callers):
                        tg.start_soon(caller, first + c, last)

            await run(0, STORE_WARMUP)
            _callgrind.start()
            await run(STORE_WARMUP, STORE_WARMUP + stores)
            _callgrind.stop()


def count_stores(
    tree: Path, stores: int, *, loop: bool = False, callers: int = 1, backend: str = "asyncio"
) -> int:
    """Instructions of ``stores`` counted turn-shaped stores from ``callers`` concurrent
    callers, with ``tree``'s package (on the event loop's thread alone if ``loop``)."""
    child = [sys.executable, str(HERE / "turn_instructions.py"), "--child", "--stores", str(stores)]
    child += ["--store-callers", str(callers), "--backend", backend]
    return instructions(child, tree=tree, marked=True, main_thread=loop)[0]


def count(
    tree: Path, turns: int, *, scoped: bool = False, loop: bool = False, backend: str = "asyncio"
) -> int:
    """Instructions of ``turns`` counted turns, with ``tree``'s package (through each
    conversation's user's view if ``scoped``; on the event loop's thread alone if
    ``loop``), on ``backend``."""
    child = [sys.executable, str(HERE / "turn_instructions.py"), "--child", "--turns", str(turns)]
    child += ["--backend", backend]
    if scoped:
        child.append("--scoped")
    return instructions(child, tree=tree, marked=True, main_thread=loop)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument(
        "--scoped", action="store_true", help="also count the turn through store.for_user(...)"
    )
    parser.add_argument(
        "--loop", action="store_true", help="also count the event loop's thread alone"
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument(
        "--stores", type=int, default=0, help="also count this many turn-shaped stores"
    )
    parser.add_argument(
        "--store-callers",
        type=int,
        default=1,
        help="with --stores: also count them from this many concurrent callers",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        import anyio

        if args.stores:
            anyio.run(_store_child, args.stores, args.store_callers, backend=args.backend)
        else:
            anyio.run(_child, args.turns, args.scoped, backend=args.backend)
        return
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    rows: list[dict[str, object]] = []
    for name, tree in trees.items():
        row: dict[str, object] = {"tree": name}
        if args.stores:
            row["instructions_per_store"] = (
                count_stores(tree, args.stores, backend=args.backend) // args.stores
            )
            if args.loop:
                row["event_loop_instructions_per_store"] = (
                    count_stores(tree, args.stores, loop=True, backend=args.backend) // args.stores
                )
            if args.store_callers > 1:
                row["store_callers"] = args.store_callers
                row["instructions_per_store_concurrent"] = (
                    count_stores(
                        tree, args.stores, callers=args.store_callers, backend=args.backend
                    )
                    // args.stores
                )
        if not args.turns:
            rows.append(row)
            continue
        row["instructions_per_turn"] = count(tree, args.turns, backend=args.backend) // args.turns
        if args.loop:
            row["event_loop_instructions_per_turn"] = (
                count(tree, args.turns, loop=True, backend=args.backend) // args.turns
            )
        if args.scoped:
            row["scoped_instructions_per_turn"] = (
                count(tree, args.turns, scoped=True, backend=args.backend) // args.turns
            )
            row["scoped_vs_unscoped"] = round(
                row["scoped_instructions_per_turn"] / row["instructions_per_turn"], 4
            )
        rows.append(row)
    if args.stores:
        print(
            f"embedded store, {args.stores} turn-shaped stores from one caller after "
            f"{STORE_WARMUP} on {args.backend} (callgrind, user space)"
        )
        for r in rows:
            line = f"  {r['tree']:<10} {r['instructions_per_store']:>12,} instructions per store"
            if args.loop:
                line += f"; the event loop's thread {r['event_loop_instructions_per_store']:>11,}"
            if args.store_callers > 1:
                line += (
                    f"; from {args.store_callers} callers "
                    f"{r['instructions_per_store_concurrent']:>11,}"
                )
            print(line)
    if args.turns:
        print(
            f"embedded store, {args.turns} short turns after {WARMUP} on {args.backend}"
            " (callgrind, user space)"
        )
        for r in rows:
            line = f"  {r['tree']:<10} {r['instructions_per_turn']:>12,} instructions per turn"
            if args.loop:
                line += f"; the event loop's thread {r['event_loop_instructions_per_turn']:>11,}"
            if args.scoped:
                line += (
                    f"; scoped {r['scoped_instructions_per_turn']:>12,}"
                    f" ({r['scoped_vs_unscoped']:.3f}x, goal <= {GOAL_SCOPED_RATIO:g}x)"
                )
            print(line)
    if args.json is not None:
        report = {
            "turns": args.turns,
            "stores": args.stores,
            "scoped": args.scoped,
            "loop": args.loop,
            "backend": args.backend,
            "rows": rows,
        }
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
