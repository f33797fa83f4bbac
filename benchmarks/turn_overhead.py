"""Benchmark: the turn protocol's own time per turn over HTTP, against the reference SDK.

    python benchmarks/turn_overhead.py [--latency-ms 20] [--turns 15] [--json PATH] [--check]

A dev server (an EmbeddedStore behind ``neotoma_agent.server``, in its own process) listens
on 127.0.0.1 and delays every request by L (``--latency-ms``, default 20 ms), standing in
for the network and server time of a real deployment. For k = 0, 1, 4, 8, 16 identifiers in the user
message, each naming an existing entity, it times one turn with an empty body (enter and
exit) two ways, interleaved so both see the same machine:

- ours: ``async with memory.turn(text): pass`` over HttpTransport. Enter runs the k lookups
  and the user store concurrently (one round), exit is one store: the floor is 2 L.
- baseline: the call pattern of the reference TypeScript SDK (``@neotoma/agent``
  ``NeotomaMemory.openTurn`` / ``closeTurn``): one lookup at a time (its first 8
  identifiers), the user store, one ``create_relationship`` per REFERS_TO edge of the user
  message, the assistant store, one ``create_relationship`` per REFERS_TO edge of the
  reply. Its lookup results are parsed correctly here (the SDK reads ``entity_id``, which the
  server does not send, so as shipped it retrieves nothing and writes no edges).

Times are medians over ``--turns`` turns, printed in units of L with the baseline / ours
ratio. Target: ours <= 2.3 L for every k; ``--check`` exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
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
from aiohttp import web

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._retrieval import extract
from neotoma_agent._version import __version__
from neotoma_agent.exceptions import NeotomaError
from neotoma_agent.server import Handler, create_app, serving
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport

KS = (0, 1, 4, 8, 16)
TARGET_L = 2.3
NAMES = (
    "Acme Globex Initech Umbrella Hooli Stark Wayne Tyrell "
    "Cyberdyne Soylent Wonka Gringotts Vandelay Dunder Oscorp Aperture"
).split()
#: the reference SDK's bounded retrieval: its first ``retrievalLimit`` identifiers
REFERENCE_LIMIT = 8


def user_message(k: int) -> str:
    """A message naming the first ``k`` seeded companies (no other identifiers)."""
    if k == 0:
        return "How are things going today?"
    return "What changed at " + ", ".join(NAMES[:k]) + "?"


class Latency:
    """Middleware: every request waits ``seconds`` before the store sees it; counts requests."""

    def __init__(self, seconds: float, counter: Any) -> None:
        self.seconds = seconds
        self.counter = counter  # a multiprocessing.Value shared with the benchmark

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        with self.counter.get_lock():
            self.counter.value += 1
        await asyncio.sleep(self.seconds)
        return await handler(request)


def _server_process(db_path: str, seconds: float, counter: Any, ready: Any, stop: Any) -> None:
    """The dev server in its own process, as a real deployment would be: the client's CPU
    work then overlaps with the server's instead of queueing on one event loop."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    async def serve_until_stopped() -> None:
        async with EmbeddedStore.open(db_path) as store:
            app = create_app(store, middlewares=[Latency(seconds, counter)])
            async with serving(app) as url:
                ready.put(url)
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)

    asyncio.run(serve_until_stopped())


async def reference_turn(
    transport: Transport, conversation_id: str, turn_id: str, text: str
) -> None:
    """One turn the way ``@neotoma/agent`` does it: every call waits for the previous one."""
    retrieved: list[str] = []
    for identifier in extract(text, None, 16)[:REFERENCE_LIMIT]:
        try:
            hit = await transport.retrieve_entity_by_identifier(identifier)
        except NeotomaError:
            continue  # best-effort, as in the SDK
        if hit.entities and hit.entities[0].id not in retrieved:
            retrieved.append(hit.entities[0].id)
    conversation = {
        "entity_type": "conversation",
        "conversation_id": conversation_id,
        "title": conversation_id,
    }
    for role in ("user", "assistant"):
        suffix = "" if role == "user" else ":assistant"
        message = {
            "entity_type": "conversation_message",
            "role": role,
            "sender_kind": role,
            "content": text if role == "user" else "",
            "turn_key": f"{conversation_id}:{turn_id}{suffix}",
        }
        stored = await transport.store(
            [conversation, message],
            idempotency_key=f"conversation-{conversation_id}-{turn_id}-{role}",
            relationships=[{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
        )
        for target in retrieved:
            await transport.create_relationship("REFERS_TO", stored.entity_id(1), target)


async def run(latency_ms: float, turns: int, ks: Sequence[int]) -> dict[str, Any]:
    seconds = latency_ms / 1000
    ctx = multiprocessing.get_context("spawn")
    counter = ctx.Value("l", 0)
    ready = ctx.Queue()
    stop = ctx.Event()
    with tempfile.TemporaryDirectory() as tmp:
        server = ctx.Process(
            target=_server_process,
            args=(str(Path(tmp) / "bench.db"), seconds, counter, ready, stop),
            daemon=True,
        )
        server.start()
        try:
            url = await asyncio.get_running_loop().run_in_executor(None, ready.get, True, 60)
            rows = await _measure(url, seconds, counter, turns, ks)
        finally:
            stop.set()
            server.join(30)
            if server.is_alive():
                server.terminate()
    return {
        "benchmark": "turn_overhead",
        "neotoma_agent": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "latency_ms": latency_ms,
        "turns_per_k": turns,
        "target_L": TARGET_L,
        "meets_target": all(row["ours_L"] <= TARGET_L for row in rows),
        "rows": rows,
    }


async def _measure(
    url: str, seconds: float, counter: Any, turns: int, ks: Sequence[int]
) -> list[dict[str, Any]]:
    async with HttpTransport(url) as http:
        await http.store(
            [{"entity_type": "company", "name": name} for name in NAMES],
            idempotency_key="benchmark-seed",
        )
        memory = NeotomaMemory(
            http,
            conversation_id="bench-ours",
            platform="benchmark",
            # every lookup in flight at once: one round on enter for any k <= 16
            max_concurrency=16,
            retrieval_timeout=max(5.0, 50 * seconds),
            close_timeout=max(10.0, 50 * seconds),
        )

        async def ours(k: int, turn_id: str) -> tuple[float, int]:
            before = counter.value
            started = time.perf_counter()
            async with memory.turn(user_message(k), turn_id=turn_id) as turn:
                pass
            elapsed = time.perf_counter() - started
            if not turn.result.completed or len(turn.result.retrieved_ids) != min(
                k, memory.retrieval_limit
            ):
                raise RuntimeError(f"turn k={k} did not store or retrieve as expected")
            return elapsed, counter.value - before

        async def baseline(k: int, turn_id: str) -> tuple[float, int]:
            before = counter.value
            started = time.perf_counter()
            await reference_turn(http, "bench-baseline", turn_id, user_message(k))
            return time.perf_counter() - started, counter.value - before

        # Warm up: open the pooled connections, fill SQLite's caches.
        for i in range(3):
            await ours(16, f"warmup-{i}")
            await baseline(16, f"warmup-{i}")

        rows = []
        for k in ks:
            ours_s: list[float] = []
            base_s: list[float] = []
            ours_requests = base_requests = 0
            for i in range(turns):
                elapsed, ours_requests = await ours(k, f"k{k}-{i}")
                ours_s.append(elapsed)
                elapsed, base_requests = await baseline(k, f"k{k}-{i}")
                base_s.append(elapsed)
            ours_med = statistics.median(ours_s)
            base_med = statistics.median(base_s)
            rows.append(
                {
                    "k": k,
                    "ours_ms": round(ours_med * 1000, 2),
                    "ours_L": round(ours_med / seconds, 2),
                    "ours_requests": ours_requests,
                    "baseline_ms": round(base_med * 1000, 2),
                    "baseline_L": round(base_med / seconds, 2),
                    "baseline_requests": base_requests,
                    "ratio": round(base_med / ours_med, 2),
                }
            )
    return rows


def table(report: dict[str, Any]) -> str:
    lines = [
        f"turn overhead over HTTP: L = {report['latency_ms']:g} ms per request "
        f"(loopback dev server), median of {report['turns_per_k']} turns, empty body",
        "",
        "   k | ours (L) | requests | baseline (L) | requests | baseline / ours",
        "  ---|----------|----------|--------------|----------|----------------",
    ]
    for row in report["rows"]:
        lines.append(
            f"  {row['k']:>2} | {row['ours_L']:>8.2f} | {row['ours_requests']:>8} |"
            f" {row['baseline_L']:>12.2f} | {row['baseline_requests']:>8} |"
            f" {row['ratio']:>13.1f}x"
        )
    verdict = "met" if report["meets_target"] else "MISSED"
    lines += ["", f"target: ours <= {report['target_L']} L for every k ({verdict})"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="injected L (ms)")
    parser.add_argument("--turns", type=int, default=15, help="turns per k and per side")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args(argv)
    # This script is the application, so it decides logging: keep warnings, drop the
    # per-turn info events (rendering them to the console would be timed as overhead).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.latency_ms <= 0 or args.turns < 1:
        parser.error("--latency-ms must be > 0 and --turns >= 1")
    report = asyncio.run(run(args.latency_ms, args.turns, KS))
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if args.check and not report["meets_target"] else 0


if __name__ == "__main__":
    sys.exit(main())
