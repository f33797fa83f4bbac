"""store_many's batch: one savepoint for the batch while every store succeeds or fails
before writing; a store that fails after writing reruns the batch one savepoint per store.

Against a real SQLite file, on the store's own connection settings.
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import Any

from test_import_batch import _body  # the same bodies as the store_many tests there

from neotoma_agent.transport.embedded._batch import store_each
from neotoma_agent.transport.embedded._connect import connect as _connect
from neotoma_agent.transport.embedded._connect import encodable as _encodable
from neotoma_agent.transport.embedded._key_rows import key_text
from neotoma_agent.transport.embedded._write import store


def _run(conn: sqlite3.Connection, bodies: list[dict[str, Any]]) -> list[Any]:
    conn.execute("BEGIN IMMEDIATE")
    results = store_each(functools.partial(_encodable, store), conn, {"stores": bodies})
    conn.execute("COMMIT")
    return results


def _keys(conn: sqlite3.Connection) -> list[str]:
    return sorted(key_text(r[0]) for r in conn.execute("SELECT key FROM idempotency_keys"))


def test_a_batch_refused_before_writing_takes_one_savepoint(tmp_path: Path) -> None:
    conn = _connect(str(tmp_path / "b.db"), "NORMAL")()
    try:
        _run(conn, [_body("c", "k1", "one")])
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        # k1 again with other entities: refused before any write, in its place.
        results = _run(
            conn, [_body("c", "k2", "two"), _body("c", "k1", "edited"), _body("c", "k3", "x")]
        )
        conn.set_trace_callback(None)
        assert [type(r).__name__ for r in results] == ["dict", "IdempotencyMismatchError", "dict"]
        assert [s for s in statements if s.startswith("SAVEPOINT")] == ["SAVEPOINT batch"]
        assert _keys(conn) == ["k1", "k2", "k3"]
    finally:
        conn.close()


def test_a_store_failing_after_writing_reruns_the_batch_one_savepoint_each(
    tmp_path: Path,
) -> None:
    conn = _connect(str(tmp_path / "b.db"), "NORMAL")()
    try:
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        # The lone surrogate fails only when SQLite encodes the message, after its
        # conversation row was written.
        bodies = [_body("a", "k1", "one"), _body("b", "k2", "bad \ud800"), _body("c", "k3", "x")]
        results = _run(conn, bodies)
        conn.set_trace_callback(None)
        assert [type(r).__name__ for r in results] == ["dict", "ValidationError", "dict"]
        assert statements.count("SAVEPOINT batch_store") == 3
        assert _keys(conn) == ["k1", "k3"]
        names = conn.execute(
            "SELECT canonical_name FROM entities WHERE entity_type = 'conversation' ORDER BY 1"
        ).fetchall()
        assert [n[0] for n in names] == ["conversation:a", "conversation:c"]
        # The rerun answers as the first run would have: the same observation ids.
        fresh = _connect(str(tmp_path / "fresh.db"), "NORMAL")()
        try:
            again = _run(fresh, [bodies[0], bodies[2]])
        finally:
            fresh.close()
        ids = [[e["observation_id"] for e in r["entities"]] for r in (results[0], results[2])]
        assert ids == [[e["observation_id"] for e in r["entities"]] for r in again]
    finally:
        conn.close()
