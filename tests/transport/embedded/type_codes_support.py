"""Stores whose entity rows and type index hold each entity's type as its word code (schema
version 14), and the same stores as version 13 held them.

``untype`` rebuilds the entity table with the type as text (rowids kept) and the type index
on it, as version 13 held them: the helpers that write a file back to an older version
call it first, and ``untyped_copy`` writes a copy of a (closed) schema-14 file at version
13. Opening it upgrades it again; every read must answer the same on both, and so must
every write after.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from codec_support import uncode
from conversation_index_support import unnumber
from search_rowid_support import unkey
from version_copy_support import copy_at_version

#: the version before the type index held the type's code
BEFORE = 13


#: the entity row's columns beside its id and type
_COLUMNS = (
    "canonical_name, aliases, created_at, updated_at, snapshot, observation_count, "
    "last_observation_at, message_count, uid, first_id, first_source, first_key, "
    "first_priority, first_osource, first_specificity, first_basis, first_rule, first_fields"
)


def untype(conn: sqlite3.Connection) -> None:
    """The entity rows with their type as text and the type index on it, as version 13
    held them (the table rebuilt, rowids kept; inside the caller's transaction; the caller
    sets the version), and the search index as version 14 held it (the fields coded since
    the field codec's version first written back as objects)."""
    uncode(conn)
    unkey(conn)
    columns = [r[1] for r in conn.execute("PRAGMA table_xinfo(entities)")]
    if "type_code" not in columns:
        return
    conn.execute(
        "CREATE TABLE entities_v13 (id TEXT PRIMARY KEY, entity_type TEXT NOT NULL, "
        "canonical_name TEXT NOT NULL, aliases TEXT NOT NULL DEFAULT '[]', "
        "created_at NOT NULL, updated_at NOT NULL, snapshot TEXT NOT NULL, "
        "observation_count INTEGER NOT NULL, last_observation_at, "
        "message_count INTEGER NOT NULL DEFAULT 0, uid INTEGER NOT NULL DEFAULT 0, "
        "first_id, first_source, first_key, first_priority INTEGER, first_osource, "
        "first_specificity REAL, first_basis, first_rule, first_fields TEXT)"
    )
    conn.execute(
        f"INSERT INTO entities_v13 (rowid, id, entity_type, {_COLUMNS}) "
        f"SELECT rowid, id, entity_type, {_COLUMNS} FROM entities ORDER BY rowid"
    )
    conn.execute("DROP TABLE entities")
    conn.execute("ALTER TABLE entities_v13 RENAME TO entities")
    conn.execute("CREATE INDEX entities_by_type ON entities (uid, entity_type, id)")


def untyped_copy(path: Path, to: Path) -> Path:
    return copy_at_version(path, to, BEFORE, unnumber, untype)


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
