"""An entity row's name, aliases and times in fewer bytes (schema version 20).

Four columns of an entity row mostly repeat what the row holds already. The row stores
them coded, and four virtual generated columns (never stored, as ``entity_type`` is
computed from ``type_code``: ``_type_index``) give every statement that reads them the
values it read before, so no reader changes and SQL alone decodes them (the ``sqlite3``
shell, a dump or a backup of the file reads the same values):

- ``canonical_name`` from ``name_code``: a name that starts with its entity type and a
  colon (``conversation_message:{cid}:{tid}``, ``conversation_turn:{cid}|{tid}``,
  ``conversation:{cid}``, ``person:...``) is stored as the UTF-8 bytes of the rest, a
  BLOB, and read back with the type's text before it; any other name is stored as its
  text (a TEXT value is never a coded one, so nothing is guessed);
- ``aliases`` from ``alias_list``: NULL for none (``[]``), else the JSON list;
- ``updated_at`` from ``updated_code`` and ``last_observation_at`` from ``last_code``:
  NULL for the row's ``created_at`` (a message, written once, holds each in no byte), an
  empty blob for no time (a time is never a blob), else the time as it is. ``created_at``
  never changes, so each decodes from its own column and the creation time alone.

SQLite computes a table's generated columns on every write of a row, not only on a read,
so each decoding is comparisons, a concatenation and a cast: no function call (a
``typeof`` costs about as much as the rest of a decoding) and no application function.
A row is written coded (:func:`encode_name`, :func:`encode_aliases`, :func:`time_code` in
Python; :func:`set_time` in an ``UPDATE``, which compares with the row's ``created_at``),
and the migration from the version before rebuilds the table so (:func:`recode_rows`, rowids
kept: the name and search indexes number their documents by them).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ._type_index import WORD_SQL

__all__ = [
    "ROW_CODES",
    "encode_aliases",
    "encode_name",
    "recode_rows",
    "set_time",
    "time_code",
]


def encode_name(entity_type: str, name: str) -> str | bytes:
    """``name_code``: the rest of ``name`` after ``{entity_type}:`` as its UTF-8 bytes,
    else ``name`` itself."""
    if name.startswith(f"{entity_type}:"):
        return name[len(entity_type) + 1 :].encode()
    return name


def encode_aliases(aliases: str) -> str | None:
    """``alias_list``: an entity's aliases (their JSON list), NULL for none."""
    return None if aliases == "[]" else aliases


def time_code(value: str | int | None, created: str | int) -> str | int | bytes | None:
    """``updated_code`` or ``last_code``: NULL for the row's creation time (the same value
    of the same type), an empty blob for no time, else the time."""
    if value is None:
        return b""
    if type(value) is type(created) and value == created:
        return None
    return value


def set_time(column: str, param: int) -> str:
    """SQL of an ``UPDATE``'s ``SET`` setting ``column`` (``updated_at`` or
    ``last_observation_at``) to parameter ``?{param}`` coded (:func:`time_code`)."""
    p = f"?{param}"
    return (
        f"{_STORED[column]} = CASE WHEN {p} IS NULL THEN x'' WHEN {p} = created_at AND "
        f"typeof({p}) = typeof(created_at) THEN NULL ELSE {p} END"
    )


_STORED: Final = {"updated_at": "updated_code", "last_observation_at": "last_code"}


def _time(stored: str) -> str:
    # (comparisons only: a function call costs more, and every write computes it)
    return (
        f"CASE WHEN {stored} IS NULL THEN created_at WHEN {stored} = x'' THEN NULL "
        f"ELSE {stored} END"
    )


def _text(blob: str) -> str:
    return f"CAST({blob} AS TEXT)"


# A BLOB sorts above every TEXT (and ``name_code`` is never NULL or a number).
_NAME: Final = f"iif(name_code >= x'', entity_type || ':' || {_text('name_code')}, name_code)"

#: the entity table as this step holds it (``{name}``: the table's name)
_TABLE: Final = f"""
CREATE TABLE {{name}} (
    id TEXT PRIMARY KEY,
    type_code NOT NULL,
    name_code NOT NULL,
    alias_list TEXT,
    created_at NOT NULL,
    updated_code,
    snapshot TEXT NOT NULL,
    observation_count INTEGER NOT NULL,
    last_code,
    message_count INTEGER NOT NULL DEFAULT 0,
    uid INTEGER NOT NULL DEFAULT 0,
    first_id, first_source, first_key, first_priority INTEGER, first_osource,
    first_specificity REAL, first_basis, first_rule, first_fields TEXT,
    entity_type AS ({WORD_SQL}) VIRTUAL,
    canonical_name TEXT AS ({_NAME}) VIRTUAL,
    aliases TEXT AS (coalesce(alias_list, '[]')) VIRTUAL,
    updated_at AS ({_time("updated_code")}) VIRTUAL,
    last_observation_at AS ({_time("last_code")}) VIRTUAL
)
"""

_KEPT: Final = (
    "snapshot, observation_count, message_count, uid, first_id, first_source, first_key, "
    "first_priority, first_osource, first_specificity, first_basis, first_rule, first_fields"
)

# The migration: the table rebuilt by ``recode_rows``, right after it.
ROW_CODES: Final = "\n-- entity names, aliases and times coded (_row_codes)\n"


def recode_rows(conn: sqlite3.Connection) -> None:
    """The entity table rebuilt with its rows coded (rowids kept), and its indexes (the
    type index, and any other a step before made) built again."""
    indexes = [
        sql
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'entities' "
            "AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY rowid"
        )
    ]
    conn.create_function("name_code", 2, encode_name, deterministic=True)
    conn.create_function("alias_code", 1, encode_aliases, deterministic=True)
    conn.create_function("time_code", 2, time_code, deterministic=True)
    conn.execute(_TABLE.format(name="entities_coded"))
    conn.execute(
        "INSERT INTO entities_coded (rowid, id, type_code, name_code, alias_list, created_at, "
        f"updated_code, last_code, {_KEPT}) "
        "SELECT rowid, id, type_code, name_code(entity_type, canonical_name), "
        "alias_code(aliases), created_at, time_code(updated_at, created_at), "
        f"time_code(last_observation_at, created_at), {_KEPT} FROM entities ORDER BY rowid"
    )
    conn.execute("DROP TABLE entities")
    conn.execute("ALTER TABLE entities_coded RENAME TO entities")
    for sql in indexes:
        conn.execute(sql)
