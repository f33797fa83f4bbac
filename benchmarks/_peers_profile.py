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
import struct
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers import WARMUP

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
        counts = Counter(
            {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
        )
    conn.close()
    return counts


def _wal_frames(path: Path, page_size: int) -> int:
    wal = path.with_name(path.name + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, (size - 32) // (page_size + 24))


class _WalPages:
    """The WAL frames each turn appends, by the B-tree (table or index) that owns each page
    once the turn is written: SQLite's ``dbstat`` read after every turn, so a page freed by
    one B-tree and reused by another is charged to the one that wrote it. A page no B-tree
    owns is on the freelist; page 1 (``sqlite_schema``) also holds the file's header (its
    size, its freelist), rewritten by any commit that grows the file or takes a free page."""

    def __init__(self, path: Path, page_size: int) -> None:
        self.wal = path.with_name(path.name + "-wal")
        self.frame = page_size + 24
        self.offset = self.wal.stat().st_size
        self.counts: Counter[str] = Counter()
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def after_turn(self) -> None:
        owners = dict(self.conn.execute("SELECT pageno, name FROM dbstat"))
        with self.wal.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = len(data) - len(data) % self.frame
        for at in range(0, whole, self.frame):
            (page,) = struct.unpack_from(">I", data, at)
            self.counts[owners.get(page, "(freelist)")] += 1
        self.offset += whole

    def close(self) -> None:
        self.conn.close()


def _fts_index(sql: str) -> str:
    """The FTS5 index an inner statement ("-- REPLACE INTO 'main'.'search_text_data'...")
    works on, or what it is."""
    for word in sql.replace("'", " ").replace(".", " ").replace("(", " ").split():
        for suffix in ("_data", "_idx", "_content", "_docsize", "_config"):
            if word.endswith(suffix):
                return word[: -len(suffix)]
    return " ".join(sql.split()[1:3])


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
            for i in range(WARMUP):
                await turn(0, i)
            with sqlite3.connect(path) as conn:
                page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            conn.close()
            rows_before, frames_before = _rows(path), _wal_frames(path, page_size)
            wal_pages = _WalPages(path, page_size)
            try:
                for i in range(WARMUP, WARMUP + TURNS):
                    tracing = True
                    await turn(0, i)
                    tracing = False
                    wal_pages.after_turn()
            finally:
                wal_pages.close()
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
        "wal_bytes_per_turn": (frames_after - frames_before) * (page_size + 24) / TURNS,
        "page_size": page_size,
        "wal_pages_by_btree": {k: v / TURNS for k, v in wal_pages.counts.most_common()},
        "fts_inner_statements_by_index": {
            k: v / TURNS
            for k, v in Counter(
                _fts_index(s) for s in statements if s.startswith("--")
            ).most_common()
        },
    }


class _TimedConnection(sqlite3.Connection):
    """Adds up the CPU of every ``execute`` (a write runs to its end in it; a read's first
    step too, the rest is in its ``fetch``, not counted: its rows are few)."""

    spent = 0.0

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        started = time.thread_time()
        try:
            return super().execute(*args, **kwargs)
        finally:
            _TimedConnection.spent += time.thread_time() - started

    def executemany(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        started = time.thread_time()
        try:
            return super().executemany(*args, **kwargs)
        finally:
            _TimedConnection.spent += time.thread_time() - started


def _bytes_by_table(path: Path, turns: int) -> dict[str, int]:
    """Bytes per turn of each table and index (pages as they are, their slack included)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables = {
            name: round(size / turns)
            for name, size in conn.execute(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            )
        }
    conn.close()
    return {n: b for n, b in tables.items() if b >= 1}


async def _unprofiled_split(ours: Any, path: Path) -> dict[str, float]:
    """CPU of ``TURNS`` turns: the event-loop thread's, the rest (the store's thread), and
    the store's ``execute`` calls (SQLite itself)."""
    connect = sqlite3.connect

    def timed(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        return connect(*args, factory=_TimedConnection, **kwargs)

    sqlite3.connect = timed  # type: ignore[assignment]
    try:
        async with ours(path) as turn:
            for i in range(WARMUP):
                await turn(0, i)
            _TimedConnection.spent = 0.0
            process, main = time.process_time(), time.thread_time()
            for i in range(WARMUP, WARMUP + TURNS):
                await turn(0, i)
            process, main = time.process_time() - process, time.thread_time() - main
            in_sqlite = _TimedConnection.spent
    finally:
        sqlite3.connect = connect  # type: ignore[assignment]
    return {
        "split_cpu_ms_per_turn": process / TURNS * 1e3,
        "split_event_loop_thread_ms_per_turn": main / TURNS * 1e3,
        "split_store_thread_ms_per_turn": (process - main) / TURNS * 1e3,
        "split_sqlite_execute_ms_per_turn": in_sqlite / TURNS * 1e3,
    }


#: (label, thread, file suffix, function name or None for every function of the file, how):
#: ``cum`` adds a function's cumulative time (itself and what it calls), ``tot`` the time
#: spent in the matched functions' own code.
AREAS = (
    # ``write``: what a turn's records run (``_store_records``), and under ``POST /store`` too.
    ("the store action (the write)", "store", "embedded/_write.py", "write", "cum"),
    ("  observations and snapshots", "store", "embedded/_write.py", "_observe", "cum"),
    ("  name index (bookkeeping names)", "store", "embedded/_name_index.py", "index_name", "cum"),
    ("  search index", "store", "embedded/_search.py", "index_search", "cum"),
    ("  edges", "store", "embedded/_edges.py", "relate", "cum"),
    ("  idempotency keys", "store", "embedded/_key_digest.py", "record_key", "cum"),
    # a turn's enter reads its page typed from the rows (the route's answer: recent_conversation)
    ("the history read", "store", "embedded/_typed_page.py", "typed_page", "cum"),
    ("JSON encode and decode (store thread)", "store", "json/", None, "tot"),
    ("answers parsed (_results from_json)", "loop", "transport/_results.py", None, "tot"),
    ("anyio (scopes, tasks)", "loop", "anyio/", None, "tot"),
    ("asyncio (the loop, futures)", "loop", "asyncio/", None, "tot"),
    ("identifier extraction", "loop", "neotoma_agent/_recall/extract.py", None, "tot"),
    ("log events", "loop", "neotoma_agent/_util/log.py", None, "tot"),
)


def _area_shares(stats: dict[str, pstats.Stats]) -> dict[str, float]:
    """Each area's share of its thread's profiled CPU."""
    shares: dict[str, float] = {}
    for label, thread, suffix, function, how in AREAS:
        st = stats[thread]
        total = st.total_tt  # type: ignore[attr-defined]
        spent = 0.0
        for (file, _, name), (_, _, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
            if suffix in file and (function is None or name == function):
                spent += ct if how == "cum" else tt
        shares[f"{label} [{thread}]"] = spent / total if total else 0.0
    return shares


async def _cpu_split(ours: Any, path: Path, top: int) -> dict[str, Any]:
    """CPU of ``TURNS`` turns split by thread, and the top functions of a cProfile of both."""
    from neotoma_agent.transport.embedded import _db_thread

    # CPU, not wall time: a thread waiting for the GIL or the queue is not charged.
    main_profile = cProfile.Profile(time.thread_time)
    db_profile = cProfile.Profile(time.thread_time)
    counting = threading.Event()
    original = _db_thread.DBThread._run_group

    def profiled_group(self: Any, conn: sqlite3.Connection, group: list[Any]) -> None:
        # A group of jobs (reads, or writes and their commit), the counted turns' only.
        if not counting.is_set():
            return original(self, conn, group)
        db_profile.enable()
        try:
            return original(self, conn, group)
        finally:
            db_profile.disable()

    _db_thread.DBThread._run_group = profiled_group  # type: ignore[method-assign]
    try:
        async with ours(path) as turn:
            for i in range(WARMUP):
                await turn(0, i)
            counting.set()
            process, main = time.process_time(), time.thread_time()
            main_profile.enable()
            for i in range(WARMUP, WARMUP + TURNS):
                await turn(0, i)
            main_profile.disable()
            counting.clear()
            process, main = time.process_time() - process, time.thread_time() - main
    finally:
        _db_thread.DBThread._run_group = original  # type: ignore[method-assign]
    db_stats = pstats.Stats(db_profile)
    sqlite_s = sum(
        tt
        for (file, _, name), (_, _, tt, _, _) in db_stats.stats.items()  # type: ignore[attr-defined]
        if file == "~" and ("sqlite3.Connection" in name or "sqlite3.Cursor" in name)
    )
    db_total = db_stats.total_tt  # type: ignore[attr-defined]
    out = io.StringIO()
    pstats.Stats(main_profile, stream=out).sort_stats("tottime").print_stats(top)
    db_out = io.StringIO()
    pstats.Stats(db_profile, stream=db_out).sort_stats("tottime").print_stats(top)
    return {
        # Unprofiled figures are in the table; these are under cProfile (slower, same split).
        "profiled_cpu_ms_per_turn": process / TURNS * 1e3,
        "profiled_event_loop_thread_ms_per_turn": main / TURNS * 1e3,
        "profiled_db_thread_ms_per_turn": db_total / TURNS * 1e3,
        "profiled_sqlite_calls_ms_per_turn": sqlite_s / TURNS * 1e3,
        "profiled_share_by_area": _area_shares(
            {"loop": pstats.Stats(main_profile), "store": db_stats}
        ),
        "cprofile_event_loop": out.getvalue(),
        "cprofile_db_thread": db_out.getvalue(),
    }


async def profile(
    args: argparse.Namespace, ours: Any, measure: Any, file_bytes: Callable[[Path], int]
) -> dict[str, Any]:
    """Our turn's counts, its unprofiled CPU and bytes, and its profile."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        turns = args.profile_disk_turns
        result: dict[str, Any] = dict(await measure("ours", d / "plain.db", 16, 1, turns, 0))
        written = turns + 16 * WARMUP
        result["file_bytes_by_table_per_turn"] = _bytes_by_table(d / "plain.db", written)
        result["disk_turns"] = turns
        result.update(await _counts(ours, d / "counts.db"))
        result.update(await _unprofiled_split(ours, d / "split.db"))
        result.update(await _cpu_split(ours, d / "profile.db", args.profile_top))
        del file_bytes
    return result


def render_profile(result: dict[str, Any]) -> str:
    """The profile as text: the counts, the CPU split, then both cProfile tops."""
    lines = [
        f"our turn, 1 caller ({result['disk_turns']:,} turns over 16 conversations):",
        f"  CPU                      {result['cpu_ms_per_turn']:8.3f} ms/turn (unprofiled)",
        f"  on disk                  {result['bytes_per_turn']:8,.0f} B/turn",
        f"one conversation, {TURNS} turns after warm-up:",
        f"  SQL statements           {result['sql_statements_per_turn']:8.2f} /turn"
        f" (+ {result['fts_inner_statements_per_turn']:.2f} run inside FTS5: "
        + ", ".join(f"{k} {v:g}" for k, v in result["fts_inner_statements_by_index"].items())
        + ")",
        f"  rows written             {result['rows_written_per_turn']:8.2f} /turn",
        f"  WAL pages                {result['wal_pages_per_turn']:8.2f} /turn"
        f" ({result['wal_bytes_per_turn']:,.0f} B, pages of {result['page_size']:,} B)",
        "  WAL pages by table and index (/turn): "
        + ", ".join(f"{k} {v:.2f}" for k, v in result["wal_pages_by_btree"].items()),
        "  where the CPU goes (unprofiled, process_time and thread_time):",
        f"    whole process          {result['split_cpu_ms_per_turn']:8.3f} ms/turn",
        f"    event-loop thread      {result['split_event_loop_thread_ms_per_turn']:8.3f}",
        f"    store thread           {result['split_store_thread_ms_per_turn']:8.3f}",
        f"      in SQLite (execute)  {result['split_sqlite_execute_ms_per_turn']:8.3f}",
        "  under cProfile (CPU per thread; slower than unprofiled, the split is the point):",
        f"    whole process          {result['profiled_cpu_ms_per_turn']:8.3f} ms/turn",
        f"    event-loop thread      {result['profiled_event_loop_thread_ms_per_turn']:8.3f}",
        f"    store thread, groups   {result['profiled_db_thread_ms_per_turn']:8.3f}",
        f"      in sqlite3 calls     {result['profiled_sqlite_calls_ms_per_turn']:8.3f}",
        "  shares of each thread's profiled CPU, by area:",
        *(f"    {k:<50} {v:6.1%}" for k, v in result["profiled_share_by_area"].items()),
        "  statements by kind (/turn): "
        + ", ".join(f"{k} {v:g}" for k, v in result["statements_by_kind"].items()),
        "  rows by table (/turn): "
        + ", ".join(f"{k} {v:g}" for k, v in result["rows_by_table"].items()),
        "  file bytes by table and index (/turn, the 16-conversation file): "
        + ", ".join(f"{k} {v:,}" for k, v in result["file_bytes_by_table_per_turn"].items()),
        "",
        "event-loop thread:",
        result["cprofile_event_loop"],
        "store thread:",
        result["cprofile_db_thread"],
    ]
    return "\n".join(lines)


__all__ = ["profile", "render_profile"]
