"""Stores whose entity rows hold their names, aliases and times coded (``_row_codes``), and
the same stores as the version before held them (each as its text or time).

``uncode_rows`` rebuilds the entity table as the version before held it (rowids kept) from
the values its generated columns read; ``uncoded_copy`` writes a copy of a (closed) file
at that version. Opening it upgrades it again; every read must answer the same on both,
and so must every write after.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from version_copy_support import copy_at_version

from neotoma_agent.transport.embedded._row_codes import ROW_CODES
from neotoma_agent.transport.embedded._schema import MIGRATIONS
from neotoma_agent.transport.embedded._type_index import WORD_SQL

__all__ = ["BEFORE", "coded_rows", "old_table", "uncode_rows", "uncoded_copy"]

#: the version before the entity rows held their names, aliases and times coded
BEFORE = MIGRATIONS.index(ROW_CODES)

_CODED = ("name_code", "alias_list", "updated_code", "last_code")
_COLUMNS = (
    "canonical_name, aliases, created_at, updated_at, snapshot, observation_count, "
    "last_observation_at, message_count, uid, first_id, first_source, first_key, "
    "first_priority, first_osource, first_specificity, first_basis, first_rule, first_fields"
)


def old_table(conn: sqlite3.Connection, name: str = "entities") -> None:
    """An empty entity table as the version before held it."""
    conn.execute(
        f"CREATE TABLE {name} (id TEXT PRIMARY KEY, type_code NOT NULL, "
        "canonical_name TEXT NOT NULL, aliases TEXT NOT NULL DEFAULT '[]', "
        "created_at NOT NULL, updated_at NOT NULL, snapshot TEXT NOT NULL, "
        "observation_count INTEGER NOT NULL, last_observation_at, "
        "message_count INTEGER NOT NULL DEFAULT 0, uid INTEGER NOT NULL DEFAULT 0, "
        "first_id, first_source, first_key, first_priority INTEGER, first_osource, "
        "first_specificity REAL, first_basis, first_rule, first_fields TEXT, "
        f"entity_type AS ({WORD_SQL}) VIRTUAL)"
    )


def uncode_rows(conn: sqlite3.Connection) -> None:
    """The entity table as the version before held it (inside the caller's transaction;
    the caller sets the version)."""
    old_table(conn, "entities_old")
    conn.execute(
        f"INSERT INTO entities_old (rowid, id, type_code, {_COLUMNS}) "
        f"SELECT rowid, id, type_code, {_COLUMNS} FROM entities ORDER BY rowid"
    )
    conn.execute("DROP TABLE entities")
    conn.execute("ALTER TABLE entities_old RENAME TO entities")
    conn.execute("CREATE INDEX entities_by_type ON entities (uid, type_code, id)")


def uncoded_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` as the version before held it."""
    return copy_at_version(path, to, BEFORE, uncode_rows)


def coded_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every entity row's coded columns (each value and its SQLite type), by rowid."""
    typed = ", ".join(f"{c}, typeof({c})" for c in _CODED)
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(f"SELECT rowid, {typed} FROM entities ORDER BY rowid").fetchall()
