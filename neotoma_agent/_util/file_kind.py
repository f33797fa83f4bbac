"""Which of the package's SQLite files a file is: a store, an outbox, or neither.

The store (``EmbeddedStore``) and the outbox (``OutboxTransport``) are both SQLite files
versioned with ``PRAGMA user_version``, so a version check alone would take one for an old
or new version of the other (and a store opened with write access would "upgrade" an
outbox into a store, or any application's database into one). Each opener asks
:func:`file_kind` first, before it sets anything on the file, and names the file for what
it is: only a store (of any schema version: every version has the tables
:data:`STORE_TABLES`) or an empty file is opened as a store.
"""

from __future__ import annotations

import sqlite3
from typing import Literal

__all__ = ["STORE_TABLES", "WrongFileKind", "check_store_file", "file_kind"]

#: the tables every schema version of the store has had since its first (``_schema._V1``)
STORE_TABLES = frozenset(
    ("entities", "observations", "relationships", "field_values", "idempotency_keys")
)

FileKind = Literal["store", "outbox", "empty", "other"]


class WrongFileKind(sqlite3.DatabaseError):
    """The file is not a store: an outbox file, or another program's SQLite database.

    Raised by :meth:`EmbeddedStore.open <neotoma_agent.EmbeddedStore.open>` (and by the
    outbox for a store file) before a byte of the file changes. The message names the
    file and what it holds; ``hint`` says what to do instead. Also a
    ``sqlite3.DatabaseError``, as the error for a file that is no database at all is.
    """

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def file_kind(conn: sqlite3.Connection) -> FileKind:
    """What the open SQLite file ``conn`` holds, by its tables (one read of the schema)."""
    tables = {
        str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if not tables:
        return "empty"
    if tables >= STORE_TABLES:
        return "store"
    if "entries" in tables:
        return "outbox"
    return "other"


def outbox_not_store(path: str) -> WrongFileKind:
    """The error a store opener raises on an outbox file."""
    return WrongFileKind(
        f"{path} is an outbox (the closing stores an HttpTransport queued), not a store",
        "read it with `neotoma-agent outbox status --outbox PATH`; --db takes a store file",
    )


def not_a_store(path: str, what: str) -> WrongFileKind:
    """The error a store opener raises on a file that is not a store (``what`` it is)."""
    return WrongFileKind(
        f"{path} is not a neotoma-agent store ({what}); it was left as it is",
        "--db takes a store file, or a new or empty file to make one",
    )


def check_store_file(conn: sqlite3.Connection, path: str) -> FileKind:
    """``"store"`` or ``"empty"``: what the file at ``path`` (open as ``conn``) holds, or
    :class:`WrongFileKind` naming it when it is anything else. Reads only: run it before
    any setting or migration changes a byte of the file."""
    try:
        kind = file_kind(conn)
    except sqlite3.DatabaseError as exc:
        # SQLITE_NOTADB, by its fixed text (sqlite_errorname is Python 3.11's)
        if "not a database" not in str(exc):
            raise
        raise not_a_store(path, "not a SQLite database") from None
    if kind == "outbox":
        raise outbox_not_store(path)
    if kind == "other":
        raise not_a_store(path, "a SQLite database with other tables")
    return kind
