"""Benchmark: what tool calls cost a turn, on the embedded store and over the dev server.

    python benchmarks/tool_calls.py [--turns 30] [--quick] [--baseline SRC] [--rounds N]
                                    [--history-turns 5] [--json PATH]

For a turn with 0, 5 and 50 tool calls (``t.record_tool`` with small arguments and a small
result, as a framework reports them; each turn reads the last 5 turns' history, calls
included, as a turn does by default: ``--history-turns`` sets it, 0 for none), each row
gives:

- ``lib_us_per_call``: the library's own CPU per call, ``(lib(n) - lib(0)) / n``, where
  ``lib`` is the CPU of the thread the turn runs on: on the embedded store its SQLite work
  runs on the store's own thread, and the dev server runs in its own process, so this is
  recording, checking, building the closing store, the transport, and reading the calls
  back in later turns' history. Goal (issue 23): well under 100 us (aim: <= 40 us);
- ``total_us_per_call``: the same with the store's CPU counted too (the embedded store's
  thread; the dev server process, read from ``/proc``);
- ``bytes_per_call`` / ``bytes_per_turn``: what the turns add to the store file (pages in
  use after a checkpoint);
- ``stores_per_turn``, ``requests_per_turn`` and ``rounds_per_turn``: store calls, all
  requests, and the sequential request rounds with a fixed delay added to every request
  (the goal: still 2 whatever the number of calls).

``record_us_per_call`` is the library's part of one call without any turn or store
(``ToolCall.create``, ``ToolLog.add``, its ``tool_invocation`` element). CPU figures are
medians over ``--turns`` turns, the rows' turns interleaved (one of each row in turn, so
that the machine's load shifts them alike), the best of ``--rounds`` rounds (each round a
fresh process per source tree); the bytes come from ``--turns`` more turns per row.
``--baseline SRC`` runs the same measurement with the package from another source tree
(e.g. ``git archive main | tar -x -C /tmp/main``), the rounds interleaved, and prints old
and new side by side; a tree without tool calls gives its 0-call rows only (bytes per turn
before tool calls existed).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

#: the dev server always requires a token
TOKEN = "bench-token"

ROOT = Path(__file__).resolve().parent.parent
CALLS = (0, 5, 50)
ARGS = {"origin": "LHR", "destination": "LIS", "date": "2026-12-24", "passengers": 2}
RESULT = {"offers": [{"id": "AB123", "price": 182.5, "seats": 4}]}
DELAY_S = 0.05
BACKENDS = ("embedded", "dev server")
TARGET_US = 40.0


# ------------------------------------------------------------------ the worker (one tree)


def _quiet() -> None:
    import logging

    import structlog

    # The application (this script) decides logging: per-turn INFO events would dominate.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


async def one_turn(memory: Any, n: int, index: int) -> None:
    async with memory.turn(f"Find flights, request {index}") as t:
        for i in range(n):
            t.record_tool("search_flights", args={**ARGS, "i": i}, result=RESULT, duration_ms=3.5)
        t.reply = "Found them."


def record_cost(n: int = 1000, repeats: int = 5) -> float | None:
    """Microseconds per call of recording it and building its stored element (best of
    ``repeats``); ``None`` for a tree without tool calls."""
    try:
        from neotoma_agent import ToolCall
        from neotoma_agent._records.tool_payload import tool_entity
        from neotoma_agent._records.tools import ToolLog
    except ImportError:
        return None
    best = float("inf")
    for _ in range(repeats):
        log = ToolLog("chat:turn")
        started = time.process_time()
        for i in range(n):
            call = log.add(ToolCall.create("search_flights", args={**ARGS, "i": i}, result=RESULT))
            tool_entity(call, "chat:turn", "bench")
        best = min(best, (time.process_time() - started) / n * 1e6)
    return best


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


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(db: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "neotoma_agent", "serve", "--db", str(db), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "NEOTOMA_TOKEN": TOKEN},
        # -m puts the working directory first on sys.path: not a checkout's package.
        cwd=db.parent,
    )


@contextlib.asynccontextmanager
async def dev_server(db: Path) -> AsyncIterator[tuple[str, int]]:
    """``neotoma-agent serve`` on ``db`` in its own process (this tree's package)."""
    import aiohttp
    import anyio

    port = _free_port()
    proc = _serve(db, port)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{url}/health") as answer:
                        if answer.status < 500:
                            break
                if proc.poll() is not None:
                    raise RuntimeError("the dev server exited at start")
                await anyio.sleep(0.05)
            else:
                raise RuntimeError("the dev server did not start")
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def _delayed(inner: Any) -> Any:
    import anyio

    from neotoma_agent.testing import RecordingTransport

    class Delayed(RecordingTransport):  # type: ignore[misc]
        """Every request waits ``DELAY_S`` first: a stand-in for a network round trip.

        :attr:`rounds` counts the sequential rounds: a request that starts at least one
        delay after the first request of the current round could only start once an
        earlier one ended, so it opens the next round.
        """

        def __init__(self, inner: Any) -> None:
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

    return Delayed(inner)


async def measure(
    transport: Any,
    turns: int,
    calls: tuple[int, ...],
    db: Path,
    store_cpu: Callable[[], float],
    history: int,
) -> list[dict[str, Any]]:
    from neotoma_agent import NeotomaMemory
    from neotoma_agent.testing import RecordingTransport

    memories = {
        n: NeotomaMemory(
            transport, conversation_id=f"bench-{n}", platform="bench", history_turns=history
        )
        for n in calls
    }
    for n, memory in memories.items():
        for i in range(6):  # warm, and a full history (5 turns) for every timed turn
            await one_turn(memory, n, -1 - i)
    lib: dict[int, list[float]] = {n: [] for n in calls}
    total: dict[int, list[float]] = {n: [] for n in calls}
    for i in range(turns):
        # The rows interleaved, turn by turn: a change in the machine's load shifts them
        # all alike, so their differences (the per-call figures) hold.
        for n, memory in memories.items():
            cpu, thread, store = time.process_time(), time.thread_time(), store_cpu()
            await one_turn(memory, n, i)
            lib[n].append((time.thread_time() - thread) * 1e6)
            # The worker's own threads (the embedded store's included), and the server's.
            total[n].append((time.process_time() - cpu + store_cpu() - store) * 1e6)
    rows = []
    for n, memory in memories.items():
        # What the turns add to the file, row by row (untimed: the file is read between).
        before = used_bytes(db)
        for i in range(turns):
            await one_turn(memory, n, turns + i)
        grown = (used_bytes(db) - before) / turns
        recorder = RecordingTransport(transport)
        await one_turn(NeotomaMemory(recorder, conversation_id=f"bench-{n}"), n, 2 * turns)
        delayed = _delayed(transport)
        slow = NeotomaMemory(delayed, conversation_id=f"bench-{n}", platform="bench")
        await one_turn(slow, n, 2 * turns + 1)
        rows.append(
            {
                "calls": n,
                "lib_us_per_turn": round(statistics.median(lib[n]), 1),
                "total_us_per_turn": round(statistics.median(total[n]), 1),
                "bytes_per_turn": round(grown),
                "stores_per_turn": len(recorder.calls_to("store")),
                "requests_per_turn": len(recorder.calls),
                "rounds_per_turn": delayed.rounds,
            }
        )
    base = rows[0]
    for row in rows[1:]:
        n = row["calls"]
        for what in ("lib_us", "total_us"):
            extra = row[f"{what}_per_turn"] - base[f"{what}_per_turn"]
            row[f"{what}_per_call"] = round(extra / n, 1)
        row["bytes_per_call"] = round((row["bytes_per_turn"] - base["bytes_per_turn"]) / n)
    return rows


async def work(turns: int, history: int) -> dict[str, Any]:
    """One tree's figures (the package this process imports)."""
    import neotoma_agent
    from neotoma_agent import EmbeddedStore, HttpTransport, RetryPolicy, Turn

    calls = CALLS if hasattr(Turn, "record_tool") else (0,)
    out: dict[str, Any] = {
        "package": str(Path(neotoma_agent.__file__).parent.parent),
        "record_us_per_call": None if len(calls) == 1 else round(record_cost() or 0, 2),
    }
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "embedded.db"
        async with EmbeddedStore.open(db) as embedded:
            out["embedded"] = await measure(embedded, turns, calls, db, lambda: 0.0, history)
        db = Path(tmp) / "served.db"
        async with (
            dev_server(db) as (url, pid),
            HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
        ):
            cpu = functools.partial(_proc_cpu, pid)
            out["dev server"] = await measure(http, turns, calls, db, cpu, history)
    return out


def worker(turns: int, history: int) -> None:
    import anyio

    _quiet()
    print(json.dumps(anyio.run(work, turns, history)))


# ------------------------------------------------------------------ the parent (trees, rounds)


def run_tree(tree: Path, turns: int, history: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    script = str(Path(__file__).resolve())
    sizes = ["--turns", str(turns), "--history-turns", str(history)]
    done = subprocess.run(
        [sys.executable, script, "--worker", *sizes],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the worker for {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if Path(result["package"]).resolve() != tree.resolve():
        raise SystemExit(f"the worker for {tree} imported the package from {result['package']}")
    return result


def _best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    # CPU: the least of the rounds (the one the shared machine disturbed least); the rest
    # (bytes, counts) from the first round: they do not depend on the machine.
    out = dict(rounds[0])
    records = [r["record_us_per_call"] for r in rounds if r["record_us_per_call"] is not None]
    out["record_us_per_call"] = min(records) if records else None
    for backend in BACKENDS:
        rows = []
        for i, row in enumerate(rounds[0][backend]):
            row = dict(row)
            for key in row:
                if key.startswith(("lib_us", "total_us")):
                    row[key] = min(r[backend][i][key] for r in rounds)
            rows.append(row)
        out[backend] = rows
    return out


def run(turns: int, rounds: int, baseline: Path | None, history: int = 5) -> dict[str, Any]:
    trees = {"new": ROOT} if baseline is None else {"new": ROOT, "baseline": baseline}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():  # interleaved: each round sees both the same
            results[name].append(run_tree(tree, turns, history))
    report: dict[str, Any] = {
        "turns": turns,
        "rounds": rounds,
        "history_turns": history,
        "target_us_per_call": TARGET_US,
        **_best(results["new"]),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    if baseline is not None:
        report["baseline"] = {"tree": str(baseline), **_best(results["baseline"])}
    return report


def _cell(row: dict[str, Any] | None, key: str) -> str:
    if row is None or row.get(key) is None:
        return "-"
    return str(row[key])


def render(report: dict[str, Any]) -> str:
    base = report.get("baseline")
    record = f"recording + building one call: {report['record_us_per_call']} us CPU"
    if base is not None:
        record += f" (baseline {_cell(base, 'record_us_per_call')} us)"
    lines = [
        f"tool calls per turn: {report['turns']} turns per row ({report['history_turns']} "
        f"history turns each), best of {report['rounds']} round(s); "
        f"goal <= {report['target_us_per_call']:.0f} us of library CPU per call",
        record,
    ]
    columns = [
        ("lib us/call", "lib_us_per_call"),
        ("total us/call", "total_us_per_call"),
        ("lib us/turn", "lib_us_per_turn"),
        ("B/turn", "bytes_per_turn"),
        ("B/call", "bytes_per_call"),
    ]
    head = f"{'backend':<11} {'calls':>5}"
    for label, _ in columns:
        head += f" {label:>13}" + (f" {'(base)':>8}" if base is not None else "")
    lines.append(head + f" {'stores':>6} {'requests':>8} {'rounds':>6}")
    for backend in BACKENDS:
        old = {r["calls"]: r for r in base[backend]} if base is not None else {}
        for row in report[backend]:
            line = f"{backend:<11} {row['calls']:>5}"
            for _, key in columns:
                line += f" {_cell(row, key):>13}"
                if base is not None:
                    line += f" {_cell(old.get(row['calls']), key):>8}"
            lines.append(
                line + f" {row['stores_per_turn']:>6} {row['requests_per_turn']:>8} "
                f"{row['rounds_per_turn']:>6}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="3 turns per row, one round")
    parser.add_argument("--rounds", type=int, default=None, help="default 1; 2 with --baseline")
    parser.add_argument(
        "--baseline", type=Path, metavar="SRC", help="also measure the package in this tree"
    )
    parser.add_argument("--history-turns", type=int, default=5, help="each turn's history read")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    turns = 3 if args.quick else args.turns
    if args.worker:
        worker(turns, args.history_turns)
        return
    rounds = args.rounds or (1 if args.quick or args.baseline is None else 2)
    report = run(turns, rounds, args.baseline, args.history_turns)
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
