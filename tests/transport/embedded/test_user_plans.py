"""A user's reads and writes walk that user's rows only: the query plan of every statement a
scoped view runs (turns, remembers, every read path) seeks an index led by the user or an
entity's id, and scans no table whole. Plans are deterministic, unlike timings."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from users_support import MARKS, everything_visible, seed_user

from neotoma_agent import EmbeddedStore
from neotoma_agent.transport.embedded._db_thread import Job

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

_TABLES = (
    "entities|observations|relationships|field_values|idempotency_keys|"
    "conversation_summaries|conversation_messages|users|search_docs"
)
_FULL_SCAN = re.compile(rf"^SCAN ({_TABLES})\b")
#: ``GET /relationships`` without a filter lists every edge of the user: the one read
#: whose answer is a walk of a table (edges have no index by user; a turn writes several).
_LISTING = "FROM relationships WHERE uid ="


async def _traced(store: EmbeddedStore, into: list[str]) -> None:
    job: Job[None] = Job(lambda conn: conn.set_trace_callback(into.append), writes=False)
    store._thread.submit(job)
    await job.wait()


async def test_no_statement_of_a_scoped_view_scans_a_table(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        for user, mark in MARKS.items():  # other users' rows for a scan to walk
            if user != "alice":
                await seed_user(store.for_user(user), mark)
        statements: list[str] = []
        await _traced(store, statements)
        alice = store.for_user("alice")
        await seed_user(alice, MARKS["alice"])
        with sqlite3.connect(path) as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM entities")]
        await everything_visible(alice, ids)
    assert len(statements) > 200
    scans: set[str] = set()
    with sqlite3.connect(path) as conn:
        for sql in statements:
            head = sql.lstrip().split(None, 1)[0].upper()
            if head not in ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH") or _LISTING in sql:
                continue
            for *_, detail in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
                if _FULL_SCAN.match(detail):
                    scans.add(f"{detail}: {sql[:200]}")
    assert not scans, "\n".join(sorted(scans))
