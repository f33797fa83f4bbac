"""Benchmark: the turn protocol's own time per turn over HTTP, against the reference SDK.

    python benchmarks/turn_overhead.py [--latency-ms 20] [--turns 15] [--history-turns N]
                                       [--json PATH] [--check]

A dev server (an EmbeddedStore behind ``neotoma_agent.server``, in its own process) listens
on 127.0.0.1 and answers every request L after it arrived (``--latency-ms``, default 20 ms),
standing in for the network and server time of a real deployment: the request is handled
at once and its answer held until then, so the dev server's own CPU counts only where it
takes longer than L. Client and server each get their own core (``--no-pin`` shares
them), as they would be on two machines. For k = 0, 1, 4, 8, 16 identifiers in the user
message, each naming an existing entity, it times one turn with an empty body (enter and
exit) three ways, interleaved so that all see the same machine:

- ours: ``async with memory.turn(text): pass`` over HttpTransport. Enter runs the k lookups
  and the user store concurrently (one round), exit is one store: the floor is 2 L.
- bare HTTP: the same number of requests, with nothing to do (k + 1 concurrent
  ``GET /health``, then one more) on a plain aiohttp session: what HTTP itself costs on this
  machine, so that what ours adds above it is the protocol's own time.
- baseline: the call pattern of the reference TypeScript SDK (``@neotoma/agent``
  ``NeotomaMemory.openTurn`` / ``closeTurn``): one lookup at a time (its first 8
  identifiers), the user store, one ``create_relationship`` per REFERS_TO edge of the user
  message, the assistant store, one ``create_relationship`` per REFERS_TO edge of the
  reply. Its lookup results are parsed correctly here (the SDK reads ``entity_id``, which the
  server does not send, so as shipped it retrieves nothing and writes no edges).

``--history-turns N`` (default: the library's default, 5) is each turn's ``history_turns``:
its history read runs beside the lookups and the user store, so it adds a request but no
round (``0`` turns it off; the bare-HTTP floor sends one more request at once with it on).

Times are medians over ``--turns`` turns, printed in units of L with the baseline / ours
ratio. Target: ours <= 2.3 L for every k; ``--check`` exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
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

import aiohttp
import structlog
from _meta import environment
from aiohttp import web

from neotoma_agent._memory import DEFAULT_HISTORY_TURNS, NeotomaMemory
from neotoma_agent._recall.retrieval import extract
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

#: the dev server always requires a token
TOKEN = "bench-token"
#: the reference SDK's bounded retrieval: its first ``retrievalLimit`` identifiers
REFERENCE_LIMIT = 8


def user_message(k: int) -> str:
    """A message naming the first ``k`` seeded companies (no other identifiers)."""
    if k == 0:
        return "How are things going today?"
    return "What changed at " + ", ".join(NAMES[:k]) + "?"


class Releaser:
    """Releases held answers on time, in one task.

    asyncio's timers fire up to ~1 ms late (epoll waits in whole milliseconds), which at
    L = 20 ms would inflate every request by ~5%. So one task sleeps until ``SPIN_S`` before
    the earliest deadline, then spins the loop until it passes. (One spinner, not one per
    held request: seventeen spinning handlers would slow the very answers they hold.)
    """

    SPIN_S = 0.0012
    #: longest nap, so that a deadline added while napping is still seen in time
    NAP_S = 0.002

    def __init__(self) -> None:
        self._held: list[tuple[float, int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def until(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            return
        released: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._held, (deadline, id(released), released))
        if self._task is None:
            self._task = loop.create_task(self._run())
        await released

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            while self._held and self._held[0][0] <= now:
                heapq.heappop(self._held)[2].set_result(None)
            if not self._held:
                await asyncio.sleep(self.NAP_S)
                continue
            nap = self._held[0][0] - now - self.SPIN_S
            await asyncio.sleep(min(nap, self.NAP_S) if nap > 0 else 0)


class Latency:
    """Middleware: every answer leaves the server ``seconds`` after its request arrived.

    The request is handled at once and its answer held until the deadline: L stands for
    the network and the server together (a real server's processing is part of what a
    client waits for), so the dev server's own CPU is not counted on top of L unless it
    takes longer than L. Counts requests and how late answers leave (the harness's error,
    reported with the figures).
    """

    def __init__(self, seconds: float, counter: Any, lateness: Any) -> None:
        self.seconds = seconds
        self.counter = counter  # multiprocessing.Values shared with the benchmark
        self.lateness = lateness
        self.releaser = Releaser()

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        with self.counter.get_lock():
            self.counter.value += 1
        response = await handler(request)
        await self.releaser.until(deadline)
        with self.lateness.get_lock():
            self.lateness.value += loop.time() - deadline
        return response


def split_cores() -> tuple[set[int], set[int]] | None:
    """One core for the client, another for the server; None where that cannot be done.

    The server stands in for another machine. Unpinned, its two busy threads (the event
    loop, and SQLite's thread in C code that runs without the GIL) take both of a 2-core
    machine's cores while the client is still sending, and the client's requests leave
    late: that would be the dev server's cost counted as the protocol's.
    """
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        return None
    cores = sorted(getaffinity(0))
    if len(cores) < 2:
        return None
    return {cores[0]}, set(cores[1:])


def _pin(cores: set[int] | None) -> None:
    if cores is not None:
        os.sched_setaffinity(0, cores)


def _server_process(
    db_path: str,
    seconds: float,
    counter: Any,
    lateness: Any,
    ready: Any,
    stop: Any,
    cores: set[int] | None,
) -> None:
    """The dev server in its own process, as a real deployment would be: the client's CPU
    work then overlaps with the server's instead of queueing on one event loop."""
    _pin(cores)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    async def serve_until_stopped() -> None:
        async with EmbeddedStore.open(db_path) as store:
            app = create_app(store, token=TOKEN, middlewares=[Latency(seconds, counter, lateness)])
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


async def run(
    latency_ms: float,
    turns: int,
    ks: Sequence[int],
    *,
    pin: bool = True,
    history_turns: int = DEFAULT_HISTORY_TURNS,
) -> dict[str, Any]:
    seconds = latency_ms / 1000
    cores = split_cores() if pin else None
    client_cores = None
    if cores is not None:
        client_cores = os.sched_getaffinity(0)
        _pin(cores[0])
    ctx = multiprocessing.get_context("spawn")
    counter = ctx.Value("l", 0)
    lateness = ctx.Value("d", 0.0)
    ready = ctx.Queue()
    stop = ctx.Event()
    with tempfile.TemporaryDirectory() as tmp:
        server = ctx.Process(
            target=_server_process,
            args=(
                str(Path(tmp) / "bench.db"),
                seconds,
                counter,
                lateness,
                ready,
                stop,
                cores[1] if cores else None,
            ),
            daemon=True,
        )
        server.start()
        try:
            url = await asyncio.get_running_loop().run_in_executor(None, ready.get, True, 60)
            rows = await _measure(url, seconds, counter, turns, ks, history_turns)
        finally:
            stop.set()
            server.join(30)
            if server.is_alive():
                server.terminate()
            _pin(client_cores)
    return {
        "benchmark": "turn_overhead",
        "neotoma_agent": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cores": None
        if cores is None
        else {"client": sorted(cores[0]), "server": sorted(cores[1])},
        "latency_ms": latency_ms,
        "turns_per_k": turns,
        "history_turns": history_turns,
        # how late answers left the server on average (the harness's own error)
        "mean_hold_error_ms": round(1000 * lateness.value / max(1, counter.value), 3),
        "target_L": TARGET_L,
        "meets_target": all(row["ours_L"] <= TARGET_L for row in rows),
        "rows": rows,
    }


async def _measure(
    url: str, seconds: float, counter: Any, turns: int, ks: Sequence[int], history_turns: int
) -> list[dict[str, Any]]:
    health_url = url.rstrip("/") + "/health"
    async with HttpTransport(url, token=TOKEN) as http, aiohttp.ClientSession() as bare:
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
            history_turns=history_turns,
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

        async def health() -> None:
            async with bare.get(health_url) as response:
                await response.read()

        async def floor(k: int) -> float:
            # What HTTP alone costs on this machine: ours's requests, with nothing to do.
            started = time.perf_counter()
            await asyncio.gather(*(health() for _ in range(k + 1 + (history_turns > 0))))
            await health()
            return time.perf_counter() - started

        # Warm up: open the pooled connections, fill SQLite's caches.
        for i in range(3):
            await ours(16, f"warmup-{i}")
            await baseline(16, f"warmup-{i}")
            await floor(16)

        rows = []
        for k in ks:
            ours_s: list[float] = []
            base_s: list[float] = []
            floor_s: list[float] = []
            ours_requests = base_requests = 0
            for i in range(turns):
                elapsed, ours_requests = await ours(k, f"k{k}-{i}")
                ours_s.append(elapsed)
                elapsed, base_requests = await baseline(k, f"k{k}-{i}")
                base_s.append(elapsed)
                floor_s.append(await floor(k))
            ours_med = statistics.median(ours_s)
            base_med = statistics.median(base_s)
            rows.append(
                {
                    "k": k,
                    "ours_ms": round(ours_med * 1000, 2),
                    "ours_L": round(ours_med / seconds, 2),
                    "ours_requests": ours_requests,
                    "bare_http_L": round(statistics.median(floor_s) / seconds, 2),
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
        f"(loopback dev server), median of {report['turns_per_k']} turns, empty body, "
        f"history_turns={report['history_turns']}",
        "",
        "   k | ours (L) | requests | bare HTTP (L) | baseline (L) | requests | baseline / ours",
        "  ---|----------|----------|---------------|--------------|----------|----------------",
    ]
    for row in report["rows"]:
        lines.append(
            f"  {row['k']:>2} | {row['ours_L']:>8.2f} | {row['ours_requests']:>8} |"
            f" {row['bare_http_L']:>13.2f} | {row['baseline_L']:>12.2f} |"
            f" {row['baseline_requests']:>8} |"
            f" {row['ratio']:>13.1f}x"
        )
    verdict = "met" if report["meets_target"] else "MISSED"
    lines += [
        "",
        "bare HTTP: the same number of requests (k + 1 at once, then 1) to GET /health,",
        f"which does nothing; answers left the server {report['mean_hold_error_ms']:g} ms late"
        " on average",
        "cores: "
        + (
            f"client {report['cores']['client']}, server {report['cores']['server']}"
            if report["cores"]
            else "shared (not pinned)"
        ),
        f"target: ours <= {report['target_L']} L for every k ({verdict})",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="injected L (ms)")
    parser.add_argument("--turns", type=int, default=15, help="turns per k and per side")
    parser.add_argument(
        "--history-turns",
        type=int,
        default=DEFAULT_HISTORY_TURNS,
        help="history_turns of each turn (0: no history read)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    parser.add_argument(
        "--no-pin", action="store_true", help="let client and server share every core"
    )
    args = parser.parse_args(argv)
    meta = environment(None if argv is None else ["benchmarks/turn_overhead.py", *argv])
    # This script is the application, so it decides logging: keep warnings, drop the
    # per-turn info events (rendering them to the console would be timed as overhead).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.latency_ms <= 0 or args.turns < 1:
        parser.error("--latency-ms must be > 0 and --turns >= 1")
    report = asyncio.run(
        run(args.latency_ms, args.turns, KS, pin=not args.no_pin, history_turns=args.history_turns)
    )
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps({**report, "meta": meta}, indent=2) + "\n")
    return 1 if args.check and not report["meets_target"] else 0


if __name__ == "__main__":
    sys.exit(main())
