"""A user's reads and writes walk that user's rows only, and a lookup by id seeks the id:
the query plan of every statement a view runs (turns, remembers, every read path) seeks an
index led by the user or an entity's id, scans no table whole, and walks no user's rows
where a seek would do. The unscoped store (the local dev user) keeps the plans it had.
Plans are deterministic, unlike timings."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from users_support import MARKS, everything_visible, seed_user

from neotoma_agent import LOCAL_USER_ID, EmbeddedStore, UserStore
from neotoma_agent.transport.embedded._db_thread import Job
from neotoma_agent.transport.embedded._rows import entity_text, install

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

_TABLES = (
    "entities|observations|relationships|field_values|idempotency_keys|"
    "conversation_summaries|conversation_messages|users"
)
#: a whole table read, or all of a user's rows read where the statement names rows
_WALKS = re.compile(rf"^SCAN ({_TABLES})\b|INDEX \w+ \(uid=\?\)$")
#: the reads whose answer is a walk: every entity of the user by id (an untyped query), the
#: user's conversation list (a page in the index's order), every edge of the user (``GET
#: /relationships`` without a filter; edges have no index by user, a turn writes several),
#: whether the file has users at all (one row)
_LISTINGS = re.compile(
    r"FROM entities WHERE \+?uid = current_uid\(\) AND NOT \(instr"
    r"|FROM conversation_summaries WHERE"
    r"|FROM relationships WHERE|FROM users LIMIT 1"
)


async def _statements(store: EmbeddedStore, view: UserStore | EmbeddedStore) -> list[str]:
    for user, mark in MARKS.items():  # other users' rows for a walk to read
        if user != view.user_id:
            await seed_user(store.for_user(user), mark)
    statements: list[str] = []
    job: Job[None] = Job(lambda conn: conn.set_trace_callback(statements.append), writes=False)
    store._thread.submit(job)
    await job.wait()
    await seed_user(view, "Rviewmark")
    with sqlite3.connect(store.path) as conn:
        ids = [r[0] for r in conn.execute(f"SELECT {entity_text('id')} FROM entities")]
    await everything_visible(view, ids)
    return statements


def _walks(path: Path, statements: list[str]) -> set[str]:
    assert len(statements) > 200
    found: set[str] = set()
    with sqlite3.connect(path) as conn:
        conn.create_function("current_uid", 0, lambda: 0)  # the store's: any value plans alike
        install(conn)  # entity_key, as the store's connections have it
        for sql in statements:
            head = sql.lstrip().split(None, 1)[0].upper()
            if head not in ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH"):
                continue
            if _LISTINGS.search(sql):
                continue
            for *_, detail in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
                if _WALKS.search(detail):
                    found.add(f"{detail}: {sql[:240]}")
    return found


@pytest.mark.parametrize("user", ["alice", LOCAL_USER_ID, None], ids=["alice", "local", "store"])
async def test_no_statement_walks_rows_a_seek_would_find(tmp_path: Path, user: str | None) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        view = store if user is None else store.for_user(user)
        statements = await _statements(store, view)
    walks = _walks(path, statements)
    assert not walks, "\n".join(sorted(walks))
