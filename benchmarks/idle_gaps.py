"""Benchmark: turns seconds apart against a server that drops idle connections after 5 s.

    python benchmarks/idle_gaps.py [--gaps 10 30] [--server-idle 5] [--body-s 6]
        [--typing-s 2] [--keep-every 4] [--k 4] [--turns 2] [--json PATH]

``turn_overhead.py`` runs turns back to back, so every request finds a warm keep-alive
connection. A real conversation pauses between turns (the user typing) and inside them (the
LLM writing a long reply), and a Node server closes a connection idle for 5 s. Here a dev
server (an EmbeddedStore behind ``neotoma_agent.server``, in its own process, aiohttp's
``keepalive_timeout=--server-idle``) serves turns over HttpTransport whose user message
names ``--k`` stored companies: the enter phase sends k lookups, the user store and the
history read at once (k + 2 connections), the body waits ``--body-s``, the exit phase sends
the closing store.
Turns are ``--gaps`` seconds apart, under three strategies:

- ``none``: nothing between turns (what 0.2 does);
- ``warm``: the application calls ``transport.warm(n)`` when the user starts typing,
  ``--typing-s`` before the turn, n the enter phase's requests (measured back to back);
- ``warm+keep``: ``warm`` and, while the body runs, ``transport.warm(1)`` every
  ``--keep-every`` seconds (default 4), so the closing store finds its connection warm.

Per phase it reports requests and **new connections** (counted by an aiohttp trace on the
transport's session), and the round trips the phase costs on a network: one for its
requests (they go out together) plus, when it opens connections, one for the TCP handshake
(``rt_tcp``) or three with TLS 1.2 / two with TLS 1.3 (``rt_tls13``). ``warming_per_idle_min``
is the warming requests sent per minute of pause. Counts, not times: on 127.0.0.1 a
handshake is free, on a network it is a round trip.

The counts are what the strategies leave on a server that keeps its deadline, whatever the
machine's speed: a loaded machine runs the server's idle timer late (a connection past its
deadline still open, so reused) and answers a warming request late (the turn then opens
connections of its own). So before a turn and before its closing store the client waits
until the server has closed every pooled connection idle past ``--server-idle``, and
before a turn until its warming requests are answered (the user typed long enough);
``settle_s`` is how long those waits took (0 on an idle machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.server import create_app
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport

#: the dev server always requires a token
TOKEN = "bench-token"

NAMES = "Acme Globex Initech Umbrella Hooli Stark Wayne Tyrell".split()
STRATEGIES = ("none", "warm", "warm+keep")


def _server_process(db: str, idle: float, k: int, port_out: Any, stop: Any) -> None:
    async def main() -> None:
        async with EmbeddedStore.open(db) as store:
            seeder = NeotomaMemory(store, conversation_id="seed")
            for name in NAMES[:k]:
                await seeder.remember("company", name=f"{name} Corp")
            runner = web.AppRunner(
                create_app(store, token=TOKEN), access_log=None, keepalive_timeout=idle
            )
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port_out.put(runner.addresses[0][1])
            await asyncio.to_thread(stop.wait)
            await runner.cleanup()

    asyncio.run(main())


class Counts:
    """Requests and new connections, attributed to the phase running when they began."""

    def __init__(self) -> None:
        self.phase = "idle"
        self.rows: dict[str, dict[str, int]] = {}

    def _row(self, phase: str) -> dict[str, int]:
        return self.rows.setdefault(phase, {"requests": 0, "new_connections": 0})

    def trace(self) -> aiohttp.TraceConfig:
        config = aiohttp.TraceConfig()

        # A warming request runs in a task of its own, whatever phase is on when it starts:
        # it is told by its route. A connection counts for the request that opened it.
        async def on_request(_: Any, ctx: Any, params: aiohttp.TraceRequestStartParams) -> None:
            ctx.phase = "warming" if params.url.path == "/health" else self.phase
            self._row(ctx.phase)["requests"] += 1

        async def on_new_connection(_: Any, ctx: Any, __: Any) -> None:
            self._row(getattr(ctx, "phase", self.phase))["new_connections"] += 1

        config.on_request_start.append(on_request)
        config.on_connection_create_end.append(on_new_connection)
        config.freeze()
        return config


#: a wait for the server (its idle timer, a warming answer) gives up after this long
_SETTLE_LIMIT_S = 60.0


async def _server_dropped_idle(session: aiohttp.ClientSession, idle_s: float) -> float:
    """Wait until the server has closed every pooled connection idle for ``idle_s`` or more
    (a loaded machine runs its timers late); the seconds waited."""
    connector = session.connector
    pooled = getattr(connector, "_conns", None)  # aiohttp's pool: (protocol, released at)
    started = time.monotonic()
    while pooled and time.monotonic() - started < _SETTLE_LIMIT_S:
        now = time.monotonic()
        if not any(
            now - released >= idle_s and proto.is_connected()
            for idle in pooled.values()
            for proto, released in idle
        ):
            break
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def _warming_answered(transport: HttpTransport) -> float:
    """Wait until the transport's warming requests are answered; the seconds waited."""
    started = time.monotonic()
    warming = set(transport._warmer._tasks)  # benchmark only: the batches in flight
    if warming:
        await asyncio.wait(warming, timeout=_SETTLE_LIMIT_S)
    return time.monotonic() - started


def _round_trips(row: dict[str, int], handshake_rtts: int) -> int:
    return (1 if row["requests"] else 0) + (handshake_rtts if row["new_connections"] else 0)


async def run_strategy(
    url: str,
    strategy: str,
    gap: float,
    args: argparse.Namespace,
    retries: list[int],
    body_s: float,
    warm_n: int = 1,
) -> dict[str, Any]:
    counts = Counts()
    message = "What changed at " + ", ".join(NAMES[: args.k]) + "?"
    async with HttpTransport(url, token=TOKEN) as transport:
        # Benchmark only: count on the transport's own session (trace configs are fixed
        # when a session is made, so this reaches into it once).
        session = transport._session_for_loop()
        session._trace_configs.append(counts.trace())
        memory = NeotomaMemory(transport, conversation_id=f"idle-{strategy}-{gap:g}")
        per_turn: list[dict[str, dict[str, int]]] = []
        idle = args.server_idle
        settle = 0.0
        for n in range(args.turns + 1):  # turn 0 only opens the first connections
            if n == 1:
                retries[0] = 0  # the retries of the counted turns only
            if n:
                typing_at = max(gap - args.typing_s, 0.0)
                await asyncio.sleep(typing_at)
                settle += await _server_dropped_idle(session, idle)
                if strategy != "none":
                    transport.warm(warm_n)
                await asyncio.sleep(gap - typing_at)
                settle += await _warming_answered(transport)
                settle += await _server_dropped_idle(session, idle)
            counts.rows = {k: v for k, v in counts.rows.items() if k == "warming"}
            counts.phase = "enter"
            async with memory.turn(message, turn_id=f"t{n}") as t:
                counts.phase = "body"
                deadline = time.monotonic() + body_s
                while (left := deadline - time.monotonic()) > 0:
                    step = min(left, args.keep_every)
                    await asyncio.sleep(step)
                    if strategy == "warm+keep" and deadline - time.monotonic() > 0:
                        transport.warm(1)
                if n:
                    settle += await _server_dropped_idle(session, idle)
                t.reply = "Here is what changed."
                counts.phase = "exit"
            counts.phase = "idle"
            if n:
                per_turn.append({p: dict(counts.rows.get(p, {})) for p in ("enter", "exit")})
        warming = counts.rows.get("warming", {"requests": 0})["requests"]
    idle_minutes = args.turns * (gap + body_s) / 60
    row: dict[str, Any] = {"strategy": strategy, "gap_s": gap, "body_s": body_s}
    for phase in ("enter", "exit"):
        phase_rows = [t.get(phase) or {"requests": 0, "new_connections": 0} for t in per_turn]
        row[f"{phase}_requests"] = max(r["requests"] for r in phase_rows)
        row[f"{phase}_new_connections"] = max(r["new_connections"] for r in phase_rows)
        row[f"{phase}_rt_tcp"] = max(_round_trips(r, 1) for r in phase_rows)
        row[f"{phase}_rt_tls13"] = max(_round_trips(r, 2) for r in phase_rows)
    row["turn_rt_tcp"] = row["enter_rt_tcp"] + row["exit_rt_tcp"]
    row["turn_rt_tls13"] = row["enter_rt_tls13"] + row["exit_rt_tls13"]
    row["warming_requests"] = warming
    row["warming_per_idle_min"] = warming / idle_minutes if idle_minutes else 0.0
    row["settle_s"] = round(settle, 3)
    row["retries"] = retries[0]
    retries[0] = 0
    return row


class _RetryCounter(logging.Handler):
    # A retry is an INFO event (the transport doing its job): the handler, the library's
    # logger and structlog's filter (main) let INFO through, or no retry is ever counted.
    def __init__(self, counter: list[int]) -> None:
        super().__init__(logging.INFO)
        self.counter = counter

    def emit(self, record: logging.LogRecord) -> None:
        if "transport.retry" in record.getMessage():
            self.counter[0] += 1


async def run_all(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    retries = [0]
    library = logging.getLogger("neotoma_agent")
    library.setLevel(logging.INFO)
    library.propagate = False  # its INFO events are counted here, never printed
    library.addHandler(_RetryCounter(retries))
    # What turn_overhead.py sees: no pause anywhere.
    rows = [await run_strategy(url, "none", 0.0, args, retries, 0.0)]
    rows[0]["strategy"] = "back-to-back"
    # Warm as many connections as the enter phase sends requests at once (the k lookups,
    # the user store and the history read), as measured back to back.
    warm_n = rows[0]["enter_requests"]
    for gap in args.gaps:
        for strategy in STRATEGIES:
            row = await run_strategy(url, strategy, gap, args, retries, args.body_s, warm_n)
            row["warm_n"] = 0 if strategy == "none" else warm_n
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gaps", type=float, nargs="+", default=[10.0, 30.0])
    parser.add_argument("--server-idle", type=float, default=5.0)
    parser.add_argument("--body-s", type=float, default=6.0)
    parser.add_argument("--typing-s", type=float, default=2.0)
    parser.add_argument("--keep-every", type=float, default=4.0)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not 0 < args.typing_s < args.server_idle or not 0 < args.keep_every < args.server_idle:
        parser.error("--typing-s and --keep-every must be between 0 and --server-idle")
    # This script is the application, so it decides logging: to stdlib, where the library's
    # INFO events are counted (retries) and warnings only of anything else would show.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.stdlib.LoggerFactory(),
    )
    logging.basicConfig(level=logging.WARNING, handlers=[logging.NullHandler()])

    ctx = multiprocessing.get_context("spawn")
    port_out, stop = ctx.Queue(), ctx.Event()
    with tempfile.TemporaryDirectory() as tmp:
        server = ctx.Process(
            target=_server_process,
            args=(str(Path(tmp) / "served.db"), args.server_idle, args.k, port_out, stop),
        )
        server.start()
        try:
            port = port_out.get(timeout=60)
            rows = asyncio.run(run_all(f"http://127.0.0.1:{port}", args))
        finally:
            stop.set()
            server.join(30)

    head = f"{'strategy':<13}{'gap s':>6}{'enter req/new':>15}{'exit req/new':>14}"
    print(head + f"{'RT tcp':>8}{'RT tls1.3':>10}{'warm req/idle min':>19}{'retries':>8}")
    for r in rows:
        print(
            f"{r['strategy']:<13}{r['gap_s']:>6g}"
            f"{r['enter_requests']:>9}/{r['enter_new_connections']:<5}"
            f"{r['exit_requests']:>8}/{r['exit_new_connections']:<5}"
            f"{r['turn_rt_tcp']:>8}{r['turn_rt_tls13']:>10}"
            f"{r['warming_per_idle_min']:>19.1f}{r['retries']:>8}"
        )
    report = {
        "rows": rows,
        "keep_every_s": args.keep_every,
        "server_idle_s": args.server_idle,
        "body_s": args.body_s,
        "typing_s": args.typing_s,
        "k": args.k,
        "turns": args.turns,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
