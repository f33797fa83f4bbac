"""A whole table read a batch at a time: what the migrations build or rewrite from.

A migration that builds a table from every entity row (the summaries, the search index) or
rewrites the rows it reads (version 4's snapshots) holds one batch in memory, however large
the file, and reads each row once: a keyset scan, each batch starting after the last key
of the one before (an offset would read all the rows before it again).

Only a migration, and a purge rebuilding a full-text index, scan so: the functions that do
import this module when they run, so a hook process on a file already up to date never
loads it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any, Final

__all__ = ["BATCH", "keyset_rows", "rows_of_types"]

#: rows a batch holds
BATCH: Final = 1000


def keyset_rows(conn: sqlite3.Connection, sql: str, start: object) -> Iterator[Any]:
    """Every row of ``sql``, a keyset scan whose first column is its key (``SELECT key, ...
    WHERE key > ? ORDER BY key LIMIT ?``), from the first key after ``start``, read
    :data:`BATCH` rows at a time. Each batch is read whole before its rows are yielded, so
    the caller may write to the rows it is given."""
    last = start
    while rows := conn.execute(sql, (last, BATCH)).fetchall():
        yield from rows
        last = rows[-1][0]


def rows_of_types(conn: sqlite3.Connection, columns: str, types: tuple[str, ...]) -> Iterator[Any]:
    """``columns`` (the first of them ``rowid``) of every entity row of these types, in
    rowid order (:func:`keyset_rows`). ``types`` are the store's own words, written into the
    statement (``keyset_rows`` binds only the key and the batch's size)."""
    listed = ",".join(f"'{t}'" for t in types)
    sql = (
        f"SELECT {columns} FROM entities WHERE rowid > ? AND entity_type IN ({listed}) "
        "ORDER BY rowid LIMIT ?"
    )
    return keyset_rows(conn, sql, 0)
