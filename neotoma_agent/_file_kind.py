"""Which of the package's SQLite files a file is: a store, an outbox, or neither.

The store (``EmbeddedStore``) and the outbox (``OutboxTransport``) are both SQLite files
versioned with ``PRAGMA user_version``, so a version check alone would take one for an old
or new version of the other (and a store opened with write access would "upgrade" an
outbox into a store). Each opener asks :func:`file_kind` first and names the file for what
it is.
"""

from __future__ import annotations

import sqlite3
from typing import Literal

__all__ = ["WrongFileKind", "file_kind"]

FileKind = Literal["store", "outbox", "empty", "other"]


class WrongFileKind(sqlite3.DatabaseError):
    """The file is the package's other kind of SQLite file; ``hint`` says what to do."""

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
    if "entities" in tables and "observations" in tables:
        return "store"
    if "entries" in tables:
        return "outbox"
    return "other"


def outbox_not_store() -> WrongFileKind:
    """The error a store opener raises on an outbox file."""
    return WrongFileKind(
        "this is an outbox (the closing stores an HttpTransport queued), not a store",
        "read it with `neotoma-agent outbox status --outbox PATH`; --db takes a store file",
    )
