"""Benchmark: reading a conversation's last turns costs the same however long it is.

    python benchmarks/history.py [--turns 30,10000] [--last 20] [--reads 50] [--json PATH]

Writes one conversation per length (``record_turn``, whole turns, on a real SQLite file),
then times ``memory.history(limit=--last)`` (the median of ``--reads`` reads) on the
embedded store and over HTTP to the dev server on 127.0.0.1 (the same file), side by side
in one run. Both read through the conversation-message index (one range scan and one
request), so the time should not grow with the conversation's length: the table shows
the ratio of the longest to the shortest conversation on each transport.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._version import __version__
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport

#: the dev server always requires a token
TOKEN = "bench-token"

#: turns written together (the store commits a batch at once)
BATCH = 200


async def write(store: EmbeddedStore, conversation_id: str, turns: int) -> None:
    memory = NeotomaMemory(store, conversation_id=conversation_id, history_turns=0)
    for start in range(0, turns, BATCH):
        await asyncio.gather(
            *(
                memory.record_turn(
                    f"question {i}: what changed since turn {i - 1}?",
                    f"answer {i}: nothing much, the usual.",
                    turn_id=f"t{i:06d}",
                    turn_number=i,
                    retrieve=False,
                )
                for i in range(start + 1, min(turns, start + BATCH) + 1)
            )
        )


async def median_ms(transport: Transport, conversation_id: str, last: int, reads: int) -> float:
    memory = NeotomaMemory(transport, conversation_id=conversation_id)
    history = await memory.history(last)  # warm up (and check)
    if len(history) != last:
        raise RuntimeError(f"read {len(history)} turns, wanted {last}")
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        await memory.history(last)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def run(lengths: Sequence[int], last: int, reads: int) -> dict[str, Any]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "history.db") as store:
            for n in lengths:
                await write(store, f"conv-{n}", n)
            async with (
                serving(create_app(store, token=TOKEN)) as url,
                HttpTransport(url, token=TOKEN) as http,
            ):
                for n in lengths:
                    rows.append(
                        {
                            "turns": n,
                            "embedded_ms": round(
                                await median_ms(store, f"conv-{n}", last, reads), 3
                            ),
                            "http_ms": round(await median_ms(http, f"conv-{n}", last, reads), 3),
                        }
                    )
    shortest, longest = rows[0], rows[-1]
    return {
        "benchmark": "history",
        "neotoma_agent": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "last": last,
        "reads": reads,
        "rows": rows,
        "embedded_ratio": round(longest["embedded_ms"] / shortest["embedded_ms"], 2),
        "http_ratio": round(longest["http_ms"] / shortest["http_ms"], 2),
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        f"memory.history({report['last']}): median of {report['reads']} reads "
        "(embedded store; HTTP to the dev server on 127.0.0.1, same file)",
        "",
        "   turns in conversation | embedded (ms) | HTTP (ms)",
        "  -----------------------|---------------|----------",
    ]
    for row in report["rows"]:
        lines.append(
            f"  {row['turns']:>22,} | {row['embedded_ms']:>13.3f} | {row['http_ms']:>9.3f}"
        )
    lines += [
        "",
        f"longest / shortest: embedded {report['embedded_ratio']:g}x, "
        f"HTTP {report['http_ratio']:g}x",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="30,10000", help="conversation lengths, comma-separated")
    parser.add_argument("--last", type=int, default=20, help="turns each read asks for")
    parser.add_argument("--reads", type=int, default=50, help="timed reads per length")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    lengths = sorted(int(n) for n in args.turns.split(","))
    if not lengths or lengths[0] < args.last or args.last < 1 or args.reads < 1:
        parser.error("every length must be >= --last >= 1, and --reads >= 1")
    report = asyncio.run(run(lengths, args.last, args.reads))
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
