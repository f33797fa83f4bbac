"""Benchmark: bytes on disk per turn of the embedded store.

    python benchmarks/disk_per_turn.py [--turns 1000 10000 100000] [--json PATH]
        [--real-url URL --real-db PATH [--real-turns N] [--real-token TOKEN]]

Runs short turns (enter + close through ``NeotomaMemory.turn``: the conversation update,
the user and assistant messages, the turn record, their edges and idempotency keys) in 100
concurrent conversations on a fresh file, checkpoints the WAL into it, and reports the
file's size per turn, and per table and index of the largest run (SQLite's ``dbstat``,
pages as they are: B-trees filled by random keys are not full). Target (issue 15):
<= 2 KB per short turn. A real Neotoma server holds ~16.4 KB per turn of the same shape
after a checkpoint (``neotoma-semantics.md`` §10, 5,000 turns imported), quoted as a
reference; with ``--real-url`` (a fresh server) and ``--real-db`` (its SQLite file), the
same turns are also written to that server and its file measured the same way.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _report import run_and_report

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport

TARGET_BYTES = 2048
REAL_SERVER_BYTES = 16.4 * 1024  # semantics §10: a real server's file, after a checkpoint
CONVERSATIONS = 100


async def _turns(transport: Transport, turns: int, conversations: int = CONVERSATIONS) -> float:
    """``turns`` short turns over concurrent conversations; returns the seconds taken."""
    memories = [
        NeotomaMemory(transport, conversation_id=f"disk-{c}", platform="bench")
        for c in range(conversations)
    ]

    async def conversation(c: int) -> None:
        for i in range(c, turns, conversations):
            async with memories[c].turn(f"Turn {i}: how are things going?", turn_id=f"t{i}") as t:
                t.reply = f"Reply {i}: all is well, thank you."

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for c in range(min(conversations, turns)):
            tg.start_soon(conversation, c)
    return time.perf_counter() - started


async def write_turns(path: Path, turns: int) -> float:
    """``turns`` short turns on a fresh embedded store at ``path``; the seconds taken."""
    async with EmbeddedStore.open(path) as store:
        return await _turns(store, turns)


def measure(path: Path, turns: int, breakdown: bool) -> dict[str, Any]:
    with sqlite3.connect(path) as conn:
        # A real server's file may be busy: what the checkpoint cannot copy stays in the
        # WAL, which is counted with the file.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = path.with_name(path.name + "-wal")
        size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        row: dict[str, Any] = {
            "turns": turns,
            "file_bytes": size,
            "bytes_per_turn": round(size / turns, 1),
        }
        if breakdown:
            row["tables"] = {
                name: round(size / turns, 1)
                for name, size in conn.execute(
                    "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
                )
            }
    return row


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for turns in args.turns:
            path = Path(tmp) / f"disk-{turns}.db"
            seconds = await write_turns(path, turns)
            row = measure(path, turns, breakdown=turns == max(args.turns))
            row["turns_per_s"] = round(turns / seconds, 1)
            rows.append(row)
            print(f"  {turns:,} turns: {row['bytes_per_turn']:,.0f} B/turn", file=sys.stderr)
    result: dict[str, Any] = {
        "target_bytes_per_turn": TARGET_BYTES,
        "real_server_bytes_per_turn": REAL_SERVER_BYTES,
        "rows": rows,
    }
    if args.real_url:
        # Per turn is the growth: a fresh server's file already holds its schema and seeds.
        empty = measure(args.real_db, 1, breakdown=False)["file_bytes"]
        async with HttpTransport(args.real_url, args.real_token) as http:
            seconds = await _turns(http, args.real_turns, args.real_conversations)
        real = measure(args.real_db, args.real_turns, breakdown=True)
        real["empty_file_bytes"] = empty
        real["bytes_per_turn"] = round((real["file_bytes"] - empty) / args.real_turns, 1)
        real["turns_per_s"] = round(args.real_turns / seconds, 1)
        result["real_server"] = real
    return result


def render(result: dict[str, Any]) -> str:
    lines = [f"{'turns':>9} {'file bytes':>13} {'bytes/turn':>11} {'vs real server':>15}"]
    lines.append("-" * len(lines[0]))
    for r in result["rows"]:
        ratio = r["bytes_per_turn"] / result["real_server_bytes_per_turn"]
        lines.append(
            f"{r['turns']:>9,} {r['file_bytes']:>13,} {r['bytes_per_turn']:>11,.0f} {ratio:>14.2f}x"
        )
    biggest = result["rows"][-1]
    lines.append(f"\nper table and index at {biggest['turns']:,} turns (bytes/turn):")
    for name, size in biggest["tables"].items():
        if size >= 1:
            lines.append(f"  {name:<40} {size:>8,.0f}")
    worst = max(r["bytes_per_turn"] for r in result["rows"])
    verdict = "met" if worst <= TARGET_BYTES else "MISSED"
    real = result.get("real_server")
    measured = (
        f"{real['bytes_per_turn']:,.0f} B/turn measured ({real['turns']:,} turns; the file's "
        f"growth over the {real['empty_file_bytes']:,} bytes of a fresh one)"
        if real
        else f"~{REAL_SERVER_BYTES:,.0f} B/turn (semantics §10, not measured here)"
    )
    lines.append(
        f"\ntarget <= {TARGET_BYTES:,} B/turn: {verdict} (worst {worst:,.0f}); "
        f"a real server: {measured}"
    )
    if real:
        lines.append(f"\nthe real server's file at {real['turns']:,} turns (bytes/turn):")
        lines.extend(
            f"  {name:<40} {size:>8,.0f}" for name, size in real["tables"].items() if size >= 1
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--real-url", help="a fresh real Neotoma server to write the turns to")
    parser.add_argument("--real-db", type=Path, help="that server's SQLite file")
    parser.add_argument("--real-token", default="dev-local", help="its bearer token")
    parser.add_argument("--real-turns", type=int, default=1_000, help="turns written to it")
    parser.add_argument(
        "--real-conversations",
        type=int,
        default=4,
        help="concurrent conversations on it (a real server is slower: 100 would time out)",
    )
    args = parser.parse_args()
    args.turns = sorted(args.turns)
    run_and_report(args, run, render)


if __name__ == "__main__":
    main()
