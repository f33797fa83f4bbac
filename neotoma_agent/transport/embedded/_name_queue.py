"""New ``bookkeeping_names`` documents queued, and written into the index a batch at a time
(schema version 22).

Every transaction that writes a document into an FTS5 table writes a new segment of it at
its commit, and merges segments as they pile up: for the bookkeeping names' trigram index
(``_name_index``), one document a turn (``_turn_names``), whose names embed the turn's id,
that was most of what the index cost a turn (its instructions and its WAL pages). A new
document now goes into ``bookkeeping_names_queue`` (a plain table: the entity row's rowid
and the document's text), and when the queue holds ``QUEUE_DOCUMENTS`` of them the
transaction that adds the last one moves them all into the index, in rowid order, as one
segment.

Every read answers as if each document were in the index: a search's candidates are the
index's matches and the queued documents that hold the needle, merged in rowid order
(:func:`queued_sql`), and every candidate is checked against its entity row's names, as
before (the index finds a superset of the answers; the queue exactly the documents that
hold the needle, a subset of what the index would find for them). Taking a document out
(a rename, an erasure) takes it from the queue when it is there (:func:`take`), else from
the index; a purge and the migrations that build the index again empty the queue first
(:func:`clear`). An entity has at most one document, in one place.
"""

from __future__ import annotations

import sqlite3
from typing import Final

__all__ = [
    "NAME_QUEUE",
    "QUEUE_DOCUMENTS",
    "clear",
    "has_queued",
    "index_queued",
    "put",
    "queued_sql",
    "take",
    "unqueue",
]

#: the migration's script: the queue, empty (every document of an older file is indexed;
#: a test's file set back to an older version keeps its queue, consistent with its index)
NAME_QUEUE: Final = """
CREATE TABLE IF NOT EXISTS bookkeeping_names_queue (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL
);
"""

#: queued documents moved into the index at once (a turn writes one): the index's new
#: segments and merges are paid once a batch, and the queue stays a page or two
QUEUE_DOCUMENTS = 32

# Each a statement that needs no statement journal: one that does (an INSERT of a SELECT,
# or with RETURNING) opens a savepoint, at which SQLite's FTS5 writes the pending words of
# every full-text table the transaction wrote as a segment of its own, so that a
# transaction holding many turns (an import, callers' stores committed together) would cut
# the search index's segment into many.
_FULL: Final = "SELECT 1 FROM bookkeeping_names_queue LIMIT 1 OFFSET ?"
_QUEUED: Final = "SELECT id, text FROM bookkeeping_names_queue ORDER BY id"
_INDEX: Final = "INSERT INTO bookkeeping_names (rowid, text) VALUES (?, ?)"


def put(conn: sqlite3.Connection, rowid: int, text: str) -> None:
    """Queue the document ``text`` of the entity row ``rowid``; a full queue goes into the
    index."""
    conn.execute("INSERT INTO bookkeeping_names_queue (id, text) VALUES (?, ?)", (rowid, text))
    if conn.execute(_FULL, (QUEUE_DOCUMENTS - 1,)).fetchone() is not None:
        index_queued(conn)


def index_queued(conn: sqlite3.Connection) -> None:
    """Move every queued document into the index (in rowid order: one segment)."""
    conn.executemany(_INDEX, conn.execute(_QUEUED).fetchall())
    conn.execute("DELETE FROM bookkeeping_names_queue")


def take(conn: sqlite3.Connection, rowid: int, text: str) -> None:
    """Take out the document ``text`` of the entity row ``rowid``: from the queue when it is
    there, else from the index (a contentless document goes by its text)."""
    gone = conn.execute("DELETE FROM bookkeeping_names_queue WHERE id = ?", (rowid,))
    if gone.rowcount == 0:
        conn.execute(
            "INSERT INTO bookkeeping_names (bookkeeping_names, rowid, text) "
            "VALUES ('delete', ?, ?)",
            (rowid, text),
        )


def has_queued(conn: sqlite3.Connection, rowid: int) -> bool:
    """Whether the entity row ``rowid`` has a document in the queue."""
    found = conn.execute("SELECT 1 FROM bookkeeping_names_queue WHERE id = ?", (rowid,))
    return found.fetchone() is not None


def unqueue(conn: sqlite3.Connection) -> None:
    """The file as the version before the queue held it: every queued document in the
    index, and no queue (a test's copy of a file at an older version)."""
    index_queued(conn)
    conn.execute("DROP TABLE bookkeeping_names_queue")


def clear(conn: sqlite3.Connection) -> None:
    """Empty the queue (the index is about to be built again from the entity rows)."""
    conn.execute("DELETE FROM bookkeeping_names_queue")


def queued_sql(columns: str) -> str:
    """A SELECT of ``columns`` (of the entity row ``e``) for each queued document that holds
    the needle (its one parameter), in rowid order."""
    return (
        f"SELECT {columns} FROM bookkeeping_names_queue q "
        "CROSS JOIN entities e ON e.rowid = q.id WHERE instr(q.text, ?) > 0"
    )
