"""The restatements the versions before ``DERIVED_RESTATEMENTS`` held as rows: each derived
restatement (``_derived_restatement``) written back as its row, for the copies of a file "as
the version before held it" (opened again, they are derived again)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from neotoma_agent.transport.embedded import _schema
from neotoma_agent.transport.embedded._derived_restatement import (
    DERIVED_RESTATEMENTS,
    SEQ,
    materialize,
)
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["DERIVED", "derived_rows", "rows_copy", "rows_kept", "underive"]

#: the version whose conversation index may flag a derived restatement
DERIVED = MIGRATIONS.index(DERIVED_RESTATEMENTS) + 1


def derived_rows(conn: sqlite3.Connection) -> list[tuple[int, int]]:
    """(conversation row, message row) of each derived restatement, oldest first."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(conversation_messages)")}
    if "restated" not in columns:
        return []
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "SELECT cm.conversation_row, cm.message_row FROM conversation_messages cm "
            "JOIN entities m ON m.rowid = cm.message_row WHERE cm.restated = 1 "
            "ORDER BY m.created_at, m.rowid"
        )
    ]


def underive(conn: sqlite3.Connection, drop: bool = True) -> int:
    """Each derived restatement of the file of ``conn`` (in a transaction) written back as
    its row (its snapshot's meta naming the row's seq), the index's column dropped (with
    ``drop``); how many."""
    derived = derived_rows(conn)
    seqs: dict[int, dict[int, int]] = {}  # conversation row: {time: seq}
    for row, message_row in derived:
        seq = materialize(conn, row, message_row)
        (at,) = conn.execute("SELECT created_at FROM entities WHERE rowid = ?", (message_row,))
        seqs.setdefault(row, {})[at[0]] = seq
    for row, by_time in seqs.items():
        (text,) = conn.execute("SELECT snapshot FROM entities WHERE rowid = ?", (row,)).fetchone()
        doc = json.loads(text)
        for meta in doc.get("o", []):
            if isinstance(meta, list) and meta[1] == SEQ:
                meta[1] = by_time[meta[2]]
        if doc.get("s") == SEQ:
            shared = by_time[max(by_time)]
            doc["s"] = shared
            conn.execute("UPDATE observations SET fields = NULL WHERE seq = ?", (shared,))
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
        conn.execute("UPDATE entities SET snapshot = ? WHERE rowid = ?", (text, row))
    columns = {r[1] for r in conn.execute("PRAGMA table_info(conversation_messages)")}
    if drop and "restated" in columns:
        conn.execute("ALTER TABLE conversation_messages DROP COLUMN restated")
    return len(derived)


@contextmanager
def rows_kept() -> Iterator[None]:
    """Upgrades that derive no restatement (its step's column added, every row kept: the
    reads of this release read both), for the tests of an earlier step that compare an
    upgraded file's rows with the older file's (``test_derived_restatement`` upgrades the
    recorded files with it)."""
    saved = _schema._AFTER[DERIVED_RESTATEMENTS]
    _schema._AFTER[DERIVED_RESTATEMENTS] = lambda conn: None
    try:
        yield
    finally:
        _schema._AFTER[DERIVED_RESTATEMENTS] = saved


def rows_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` with its derived restatements as rows (the
    index's column kept: this release reads both)."""
    shutil.copyfile(path, to)
    with closing(sqlite3.connect(to, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        underive(conn, drop=False)
        conn.execute("COMMIT")
    return to
