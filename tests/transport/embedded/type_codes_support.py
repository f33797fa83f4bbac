"""Stores whose type index holds each entity's type as its word code (schema version 14),
and the same stores as version 13 held them.

``untype`` drops the generated ``type_code`` column and builds the type index again on the
type's text, as version 13 held it: the helpers that write a file back to an older version
call it first, and ``untyped_copy`` writes a copy of a (closed) schema-14 file at version
13. Opening it upgrades it again; every read must answer the same on both, and so must
every write after.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

#: the version before the type index held the type's code
BEFORE = 13


def untype(conn: sqlite3.Connection) -> None:
    """The type index on the type's text, without ``type_code`` (inside the caller's
    transaction; the caller sets the version)."""
    columns = [r[1] for r in conn.execute("PRAGMA table_xinfo(entities)")]
    if "type_code" not in columns:
        return
    conn.execute("DROP INDEX entities_by_type")
    conn.execute("ALTER TABLE entities DROP COLUMN type_code")
    conn.execute("CREATE INDEX entities_by_type ON entities (uid, entity_type, id)")


def untyped_copy(path: Path, to: Path) -> Path:
    shutil.copyfile(path, to)
    with closing(sqlite3.connect(to, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        untype(conn)
        conn.execute(f"PRAGMA user_version = {BEFORE}")
        conn.execute("COMMIT")
    return to


def type_index(path: Path) -> list[tuple[Any, ...]]:
    """The type index's columns (``PRAGMA index_xinfo``: name, and whether a key)."""
    with closing(sqlite3.connect(path)) as conn:
        return [
            (r[2], r[5]) for r in conn.execute("PRAGMA index_xinfo(entities_by_type)").fetchall()
        ]


def type_entries(path: Path) -> list[tuple[Any, ...]]:
    """Every entry of the type index, as it holds them: (uid, type, id, rowid)."""
    with closing(sqlite3.connect(path)) as conn:
        column = (
            "type_code"
            if ("type_code",) in [(r[1],) for r in conn.execute("PRAGMA table_xinfo(entities)")]
            else "entity_type"
        )
        return conn.execute(
            f"SELECT uid, {column}, id, rowid FROM entities INDEXED BY entities_by_type "
            f"WHERE uid >= 0 ORDER BY uid, {column}, id"
        ).fetchall()
