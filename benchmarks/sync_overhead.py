"""Benchmark: what a turn costs through the sync API over the async API, side by side.

    python benchmarks/sync_overhead.py [--turns 200] [--rounds 5] [--chunks 100] [--json PATH]

The same turns, one after another, two ways, interleaved round by round (each round runs a
batch of ``--turns`` turns per way, the way that goes first alternating) so that both see
the same machine:

- async: ``async with memory.turn(msg) as t:`` on an event loop in the main thread;
- sync: ``with memory.turn(msg) as t:`` from the main thread, with no loop of its own (a
  script), through ``neotoma_agent.sync`` (its loop runs in a thread of its own).

Bodies: ``reply`` sets the reply at once; ``stream`` streams ``--chunks`` chunks through
``t.stream`` (an async generator on one side, a list on the other). Transports: the embedded
store (a file per way) and the dev server over HTTP on 127.0.0.1 (``neotoma-agent serve``
in its own process, one server for both ways). Each way has its own conversation, so both
read the same amount of history. ``bridge`` is the bare hand-off: ``store.call`` of a
coroutine that returns at once, against awaiting it.

Figures: the median over rounds of the mean wall time per turn, and CPU time per turn
(``process_time``: both threads of this process, not the server's); ``ratio`` is sync /
async, ``overhead`` the difference per turn. The machine is shared: compare the ratios of
one run, and repeat it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from neotoma_agent import EmbeddedStore, HttpTransport, NeotomaMemory, Transport, __version__
from neotoma_agent.sync import SyncMemory, SyncStore

#: the dev server always requires a token
TOKEN = "bench-token"

QUESTION = "What do we know about Acme Corp?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def dev_server(db: Path) -> Iterator[str]:
    """``neotoma-agent serve`` on a free loopback port, in its own process."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "neotoma_agent.cli", "serve", "--db", str(db), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "NEOTOMA_TOKEN": TOKEN},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the dev server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _timed(batch: Callable[[], None], turns: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    batch()
    return (
        (time.perf_counter() - wall) * 1000 / turns,
        (time.process_time() - cpu) * 1000 / turns,
    )


async def _achunks(chunks: list[str]) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


def _row(
    transport: str,
    body: str,
    samples: dict[str, list[tuple[float, float]]],
) -> dict[str, Any]:
    a_wall = statistics.median(s[0] for s in samples["async"])
    s_wall = statistics.median(s[0] for s in samples["sync"])
    a_cpu = statistics.median(s[1] for s in samples["async"])
    s_cpu = statistics.median(s[1] for s in samples["sync"])
    return {
        "transport": transport,
        "body": body,
        "async_ms": round(a_wall, 4),
        "sync_ms": round(s_wall, 4),
        "ratio": round(s_wall / a_wall, 3),
        "overhead_us": round((s_wall - a_wall) * 1000, 1),
        "async_cpu_ms": round(a_cpu, 4),
        "sync_cpu_ms": round(s_cpu, 4),
        "cpu_ratio": round(s_cpu / a_cpu, 3) if a_cpu else None,
    }


def compare(
    transport: str,
    make: Callable[[], Transport],
    args: argparse.Namespace,
    loop: asyncio.AbstractEventLoop,
) -> list[dict[str, Any]]:
    """Both ways on one kind of transport: a row per body, plus the bare hand-off."""
    chunks = [f"chunk {i} " for i in range(args.chunks)]
    async_transport = make()
    rows = []
    with SyncStore(make()) as store:
        sync_memory = SyncMemory(store, conversation_id="sync")
        async_memory = NeotomaMemory(async_transport, conversation_id="async")

        async def async_batch(body: str) -> None:
            for _ in range(args.turns):
                async with async_memory.turn(QUESTION) as t:
                    if body == "reply":
                        t.reply = "Acme Corp is a client."
                    else:
                        async for _chunk in t.stream(_achunks(chunks)):
                            pass

        def sync_batch(body: str) -> None:
            for _ in range(args.turns):
                with sync_memory.turn(QUESTION) as t:
                    if body == "reply":
                        t.reply = "Acme Corp is a client."
                    else:
                        for _chunk in t.stream(chunks):
                            pass

        async def nothing() -> None:
            return None

        async def async_bridge() -> None:
            for _ in range(args.turns):
                await loop.create_task(nothing())

        def sync_bridge() -> None:
            for _ in range(args.turns):
                store.call(nothing)

        # Warm both ways (connections, caches, the first history reads) before timing.
        loop.run_until_complete(async_memory.remember("company", name="Acme Corp"))
        sync_memory.remember("company", name="Acme Corp")
        loop.run_until_complete(async_batch("reply"))
        sync_batch("reply")

        ways: dict[str, dict[str, Callable[[], None]]] = {
            body: {
                "async": lambda body=body: loop.run_until_complete(async_batch(body)),
                "sync": lambda body=body: sync_batch(body),
            }
            for body in ("reply", "stream")
        }
        ways["bridge"] = {
            "async": lambda: loop.run_until_complete(async_bridge()),
            "sync": sync_bridge,
        }
        for body, pair in ways.items():
            samples: dict[str, list[tuple[float, float]]] = {"async": [], "sync": []}
            for r in range(args.rounds):
                order = ("async", "sync") if r % 2 == 0 else ("sync", "async")
                for way in order:
                    samples[way].append(_timed(pair[way], args.turns))
            rows.append(_row(transport, body, samples))
    loop.run_until_complete(async_transport.aclose())
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            files = iter(range(1_000))
            rows += compare(
                "embedded", lambda: EmbeddedStore.open(root / f"e{next(files)}.db"), args, loop
            )
            if not args.no_http:
                with dev_server(root / "server.db") as url:
                    rows += compare("http", lambda: HttpTransport(url, token=TOKEN), args, loop)
    finally:
        loop.close()
    return {
        "rows": rows,
        "turns": args.turns,
        "rounds": args.rounds,
        "chunks": args.chunks,
        "version": __version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def render(report: dict[str, Any]) -> str:
    head = (
        f"{'transport':<9} {'body':<7} {'async ms':>9} {'sync ms':>9} {'ratio':>6} "
        f"{'+us/turn':>9} {'async cpu':>10} {'sync cpu':>9} {'cpu ratio':>9}"
    )
    lines = [
        f"sync API over async, per turn ({report['turns']} turns x {report['rounds']} rounds, "
        f"medians; stream = {report['chunks']} chunks; bridge = one hand-off, no turn)",
        head,
        "-" * len(head),
    ]
    for r in report["rows"]:
        lines.append(
            f"{r['transport']:<9} {r['body']:<7} {r['async_ms']:>9.3f} {r['sync_ms']:>9.3f} "
            f"{r['ratio']:>6.2f} {r['overhead_us']:>9.1f} {r['async_cpu_ms']:>10.3f} "
            f"{r['sync_cpu_ms']:>9.3f} {r['cpu_ratio'] or 0:>9.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per batch")
    parser.add_argument("--rounds", type=int, default=5, help="batches per way")
    parser.add_argument("--chunks", type=int, default=100, help="chunks a streamed reply has")
    parser.add_argument("--no-http", action="store_true", help="the embedded store only")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    # The application (this script) decides logging: per-turn INFO events would dominate.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    report = run(args)
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
