"""Benchmark: what tool calls cost a turn, on the embedded store and over the dev server.

    python benchmarks/tool_calls.py [--turns 30] [--quick] [--json PATH]

For a turn with 0, 5 and 50 tool calls (``t.record_tool`` with small arguments and a small
result, as a framework reports them), each row gives, side by side in one run:

- ``cpu_ms_per_turn``: process CPU per turn (client and store: the embedded store runs in
  this process, and so does the dev server here), median over ``--turns`` turns;
- ``cpu_ms_per_call``: what each call adds, ``(cpu(n) - cpu(0)) / n``;
- ``record_us_per_call``: the library's own part of a call (checking and recording it,
  building its ``tool_invocation`` element, capped), without any store: the goal is well
  under 100 us;
- ``bytes_per_call``: what each call adds to an embedded store file (pages in use after a
  checkpoint, on a fresh file per row), against the turns with no calls;
- ``stores_per_turn``, ``requests_per_turn`` and ``rounds_per_turn``: store calls, all
  requests (the history read included: the earlier turns' calls come with it), and the
  sequential request rounds with a fixed delay added to every request: the goal is still
  2 whatever the number of calls.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report

from neotoma_agent import EmbeddedStore, HttpTransport, NeotomaMemory, RetryPolicy
from neotoma_agent._tools import ToolLog, tool_entity
from neotoma_agent.server import create_app, serving
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport

CALLS = (0, 5, 50)
ARGS = {"origin": "LHR", "destination": "LIS", "date": "2026-12-24", "passengers": 2}
RESULT = {"offers": [{"id": "AB123", "price": 182.5, "seats": 4}]}
DELAY_S = 0.05


class Delayed(RecordingTransport):
    """Every request waits ``DELAY_S`` first: a stand-in for a network round trip.

    :attr:`rounds` counts the sequential rounds: a request that starts at least one delay
    after the first request of the current round could only start once an earlier one
    ended, so it opens the next round (CPU time between requests does not count).
    """

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self.starts: list[float] = []

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.starts.append(time.perf_counter())
        await anyio.sleep(DELAY_S)
        return await super()._call(method, *args, **kwargs)

    @property
    def rounds(self) -> int:
        count, opened = 0, None
        for start in sorted(self.starts):
            if opened is None or start - opened >= DELAY_S * 0.95:
                count, opened = count + 1, start
        return count


async def one_turn(memory: NeotomaMemory, n: int, index: int) -> None:
    async with memory.turn(f"Find flights, request {index}") as t:
        for i in range(n):
            t.record_tool("search_flights", args={**ARGS, "i": i}, result=RESULT, duration_ms=3.5)
        t.reply = "Found them."


def record_cost(n: int = 2000) -> float:
    """Microseconds per call of recording it and building its stored element."""
    log = ToolLog("chat:turn")
    from neotoma_agent import ToolCall

    started = time.process_time()
    for i in range(n):
        call = log.add(ToolCall.create("search_flights", args={**ARGS, "i": i}, result=RESULT))
        tool_entity(call, "chat:turn", "bench")
    return (time.process_time() - started) / n * 1e6


def used_bytes(path: Path) -> int:
    """The pages the file uses, after its WAL is checkpointed into it."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
    finally:
        conn.close()
    return int((pages - free) * size)


async def bytes_per_turn(n: int, turns: int, tmp: Path) -> float:
    """Disk per turn of ``turns`` turns with ``n`` calls each, on a fresh file."""
    path = tmp / f"bytes-{n}.db"
    async with EmbeddedStore.open(path) as embedded:
        await one_turn(NeotomaMemory(embedded, conversation_id="warm"), n, -1)
    before = used_bytes(path)
    async with EmbeddedStore.open(path) as embedded:
        memory = NeotomaMemory(embedded, conversation_id="bytes", platform="bench")
        for i in range(turns):
            await one_turn(memory, n, i)
    return (used_bytes(path) - before) / turns


async def measure(transport: Transport, turns: int, tmp: Path) -> Any:
    rows = []
    for n in CALLS:
        memory = NeotomaMemory(transport, conversation_id=f"bench-{n}", platform="bench")
        await one_turn(memory, n, -1)  # warm
        cpu = []
        for i in range(turns):
            started = time.process_time()
            await one_turn(memory, n, i)
            cpu.append((time.process_time() - started) * 1000)
        grown = await bytes_per_turn(n, turns, tmp)
        recorder = RecordingTransport(transport)
        await one_turn(NeotomaMemory(recorder, conversation_id=f"bench-{n}"), n, turns)
        delayed = Delayed(transport)
        slow = NeotomaMemory(delayed, conversation_id=f"bench-{n}", platform="bench")
        await one_turn(slow, n, turns + 1)
        rounds = delayed.rounds
        rows.append(
            {
                "calls": n,
                "cpu_ms_per_turn": round(statistics.median(cpu), 3),
                "bytes_per_turn": round(grown),
                "stores_per_turn": len(recorder.calls_to("store")),
                "requests_per_turn": len(recorder.calls),
                "rounds_per_turn": rounds,
            }
        )
    base = rows[0]
    for row in rows[1:]:
        n = row["calls"]
        row["cpu_ms_per_call"] = round((row["cpu_ms_per_turn"] - base["cpu_ms_per_turn"]) / n, 4)
        row["bytes_per_call"] = round((row["bytes_per_turn"] - base["bytes_per_turn"]) / n)
    return rows


async def run(args: argparse.Namespace) -> dict[str, Any]:
    turns = 3 if args.quick else args.turns
    out: dict[str, Any] = {"turns": turns, "record_us_per_call": round(record_cost(), 2)}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("embedded", "dev server"):
            db = Path(tmp) / f"{backend.replace(' ', '_')}.db"
            async with EmbeddedStore.open(db) as embedded:
                if backend == "embedded":
                    out[backend] = await measure(embedded, turns, Path(tmp))
                    continue
                async with (
                    serving(create_app(embedded)) as url,
                    HttpTransport(url, retry=RetryPolicy(backoff=False)) as http,
                ):
                    out[backend] = await measure(http, turns, Path(tmp))
    out["python"] = sys.version.split()[0]
    out["cpus"] = os.cpu_count()
    return out


def render(result: dict[str, Any]) -> str:
    lines = [
        f"tool calls per turn, {result['turns']} turns per row; recording + building one call: "
        f"{result['record_us_per_call']} us CPU",
        f"{'backend':<11} {'calls':>5} {'cpu ms/turn':>11} {'cpu ms/call':>11} "
        f"{'B/call':>7} {'stores':>6} {'requests':>8} {'rounds':>6}",
    ]
    for backend in ("embedded", "dev server"):
        for row in result[backend]:
            lines.append(
                f"{backend:<11} {row['calls']:>5} {row['cpu_ms_per_turn']:>11} "
                f"{row.get('cpu_ms_per_call', '-'):>11} {row.get('bytes_per_call', '-'):>7} "
                f"{row['stores_per_turn']:>6} {row['requests_per_turn']:>8} "
                f"{row['rounds_per_turn']:>6}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="3 turns per row")
    parser.add_argument("--json", type=Path)
    run_and_report(parser.parse_args(), run, render)


if __name__ == "__main__":
    main()
