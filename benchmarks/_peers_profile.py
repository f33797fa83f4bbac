"""Where one of our turns goes (``peers.py --profile``): SQL statements, rows and WAL pages
per turn, the CPU split between the event loop and the store's SQLite thread, and the top of
a ``cProfile`` of both threads.

Internals on purpose: the store's connection is traced (``_store._connect`` wrapped) and its
thread profiled (``DBThread._main`` wrapped), to count what a turn costs SQLite, not the API.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

#: turns counted (fewer than the store's WAL autocheckpoint allows: its pages all stay in the WAL)
TURNS = 100


def _rows(path: Path) -> Counter[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        names = [
            n
            for (n,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE "
                "'CREATE VIRTUAL%'"
            )
        ]
        counts = Counter({n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names})
    conn.close()
    return counts


def _wal_frames(path: Path, page_size: int) -> int:
    wal = path.with_name(path.name + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, (size - 32) // (page_size + 24))


def _statement_kind(sql: str) -> str:
    words = sql.split()
    return " ".join(words[:2]).upper() if words else ""


async def _counts(ours: Any, path: Path) -> dict[str, Any]:
    """Statements, rows and WAL frames of ``TURNS`` turns on a fresh store (after warm-up)."""
    from neotoma_agent.transport.embedded import _store

    statements: list[str] = []
    tracing = False
    connect = _store._connect

    def traced(*args: Any, **kwargs: Any) -> Callable[[], sqlite3.Connection]:
        make = connect(*args, **kwargs)

        def make_traced() -> sqlite3.Connection:
            conn = make()
            conn.set_trace_callback(lambda sql: statements.append(sql) if tracing else None)
            return conn

        return make_traced

    _store._connect = traced  # type: ignore[assignment]
    try:
        async with ours(path) as turn:
            from peers import WARMUP

            for i in range(WARMUP):
                await turn(0, i)
            with sqlite3.connect(path) as conn:
                page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            conn.close()
            rows_before, frames_before = _rows(path), _wal_frames(path, page_size)
            tracing = True
            for i in range(WARMUP, WARMUP + TURNS):
                await turn(0, i)
            tracing = False
            rows_after, frames_after = _rows(path), _wal_frames(path, page_size)
    finally:
        _store._connect = connect  # type: ignore[assignment]
    # SQLite also reports the statements a virtual table (FTS5) runs inside one, as "-- ...".
    top = [s for s in statements if not s.startswith("--")]
    rows = {n: (rows_after[n] - rows_before[n]) / TURNS for n in rows_after}
    return {
        "sql_statements_per_turn": len(top) / TURNS,
        "fts_inner_statements_per_turn": (len(statements) - len(top)) / TURNS,
        "statements_by_kind": {
            k: v / TURNS for k, v in Counter(_statement_kind(s) for s in top).most_common()
        },
        "rows_written_per_turn": sum(rows.values()),
        "rows_by_table": {n: r for n, r in sorted(rows.items(), key=lambda x: -x[1]) if r},
        "wal_pages_per_turn": (frames_after - frames_before) / TURNS,
    }


async def _cpu_split(ours: Any, path: Path, top: int) -> dict[str, Any]:
    """CPU of ``TURNS`` turns split by thread, and the top functions of a cProfile of both."""
    from neotoma_agent.transport.embedded import _db_thread

    main_profile = cProfile.Profile()
    db_profile = cProfile.Profile()
    db_cpu: list[float] = []
    counting = threading.Event()
    original = _db_thread.DBThread._main

    def profiled_main(self: Any) -> None:
        # The thread's CPU from its first counted job on (process_time counts all threads).
        started = time.thread_time()
        try:
            db_profile.runcall(original, self)
        finally:
            db_cpu.append(time.thread_time() - started)

    _db_thread.DBThread._main = profiled_main  # type: ignore[method-assign]
    try:
        async with ours(path) as turn:
            from peers import WARMUP

            for i in range(WARMUP):
                await turn(0, i)
            counting.set()
            process, main = time.process_time(), time.thread_time()
            main_profile.enable()
            for i in range(WARMUP, WARMUP + TURNS):
                await turn(0, i)
            main_profile.disable()
            process, main = time.process_time() - process, time.thread_time() - main
    finally:
        _db_thread.DBThread._main = original  # type: ignore[method-assign]
    stats = pstats.Stats(main_profile)
    stats.add(db_profile)
    sqlite_s = sum(
        tt
        for (file, _, name), (_, _, tt, _, _) in stats.stats.items()  # type: ignore[attr-defined]
        if file == "~" and "sqlite3.Connection" in name or "sqlite3.Cursor" in name
    )
    out = io.StringIO()
    pstats.Stats(main_profile, stream=out).sort_stats("tottime").print_stats(top)
    db_out = io.StringIO()
    pstats.Stats(db_profile, stream=db_out).sort_stats("tottime").print_stats(top)
    return {
        # Unprofiled figures are in the table; these are under cProfile (slower, same split).
        "profiled_cpu_ms_per_turn": process / TURNS * 1e3,
        "profiled_event_loop_thread_ms_per_turn": main / TURNS * 1e3,
        "profiled_sqlite_calls_ms_per_turn": sqlite_s / TURNS * 1e3,
        "cprofile_event_loop": out.getvalue(),
        "cprofile_db_thread": db_out.getvalue(),
    }


async def profile(
    args: argparse.Namespace, ours: Any, measure: Any, file_bytes: Callable[[Path], int]
) -> dict[str, Any]:
    """Our turn's counts, its unprofiled CPU and bytes, and its profile."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        result: dict[str, Any] = dict(await measure("ours", d / "plain.db", 1, TURNS, 0))
        result.update(await _counts(ours, d / "counts.db"))
        result.update(await _cpu_split(ours, d / "profile.db", args.profile_top))
        del file_bytes
    return result


__all__ = ["profile", "anyio"]
