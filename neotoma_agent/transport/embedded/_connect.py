"""Opening a store file and running one action on it: shared by the store and the hook.

:class:`~neotoma_agent.transport.embedded.EmbeddedStore` runs its actions on a thread of its
own (``_db_thread``); a hook process on an embedded store runs the same actions on the same
connection settings in its own thread, one transaction each (:func:`run`), without the
event loop. Both open the file here, so they cannot differ in how.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..._util.file_kind import check_store_file
from ..._util.private import private_file
from ._errors import invalid_format
from ._name_index import install as install_names
from ._rows import install as install_rows
from ._schema import migrate
from ._scope import install as install_scope
from ._scope import run_as

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "TURN_INDEX_LEAF_BYTES",
    "busy_ms_of",
    "connect",
    "encodable",
    "run",
]

T = TypeVar("T")

#: seconds a store waits for another process's write lock on the file before it fails
#: with "database is locked"
DEFAULT_BUSY_TIMEOUT = 10.0

#: the largest leaf (bytes, FTS5's ``pgsz``) of the full-text indexes every turn writes
#: (the search index and the bookkeeping names'): FTS5's default (4,050) fills a 4 KiB page
#: with one leaf, so each leaf a commit writes or merges rebalances the B-tree pages around
#: it; leaves half that size share pages, and a turn writes about 7% fewer WAL pages
#: (docs/performance.md, "Where our turn goes today"). A setting of the file, kept in each
#: index's config row: the leaves already written stay as they are, the ones merged or
#: written from then on follow it.
TURN_INDEX_LEAF_BYTES = 2000
_TURN_INDEXES = ("search_text", "bookkeeping_names")


def connect(
    path: str, synchronous: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> Callable[[], sqlite3.Connection]:
    """A function opening (creating, upgrading) the store file at ``path`` for writing;
    ``busy_timeout``: the seconds it waits for another process's lock, opening included."""
    busy_ms = busy_ms_of(busy_timeout)

    def connect() -> sqlite3.Connection:
        existed = path != ":memory:" and os.path.exists(path)
        if path != ":memory:" and not existed:
            # Owner-only before SQLite opens it: it holds conversations.
            private_file(path)
        conn = sqlite3.connect(
            path, timeout=busy_ms / 1000, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
            if path != ":memory:":
                # Before anything changes a byte (WAL mode rewrites the header) or the mode
                # of the file: another application's database or an outbox is refused as
                # it is.
                check_store_file(conn, path)
                if existed:
                    private_file(path)  # ours: an older version's 0644 file is set 0600
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise sqlite3.OperationalError(f"could not enable WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            # Ids are hashes, so inserts land all over the B-trees: keep more pages hot.
            conn.execute("PRAGMA cache_size = -65536")
            # Each store runs in a savepoint, whose undo pages go to a temporary journal:
            # keep it in memory rather than in a temporary file.
            conn.execute("PRAGMA temp_store = MEMORY")
            # Hash-keyed B-trees dirty pages all over the file; checkpointing the WAL less
            # often writes each hot page back once per checkpoint, not once per 4 MB.
            conn.execute("PRAGMA wal_autocheckpoint = 10000")
            conn.execute("PRAGMA journal_size_limit = 67108864")
            conn.execute("PRAGMA foreign_keys = OFF")
            migrate(conn)
            _set_leaf_size(conn)
            install_scope(conn)
            install_names(conn)
            install_rows(conn)
            # Connect the FTS5 tables now (each reads its config on first use), so the first
            # lookup does not pay for it.
            for table in ("name_index", "bookkeeping_names", "search_text"):
                conn.execute(f"SELECT 1 FROM {table} WHERE rowid = 0").fetchall()
        except BaseException:
            conn.close()
            raise
        return conn

    return connect


def _set_leaf_size(conn: sqlite3.Connection) -> None:
    """Set ``TURN_INDEX_LEAF_BYTES`` on a file that does not hold it yet (a new file, an
    older release's, an index a migration built again): one transaction of its own."""
    stale = [
        table
        for table in _TURN_INDEXES
        if conn.execute(f"SELECT v FROM {table}_config WHERE k = 'pgsz'").fetchone()
        != (TURN_INDEX_LEAF_BYTES,)
    ]
    if not stale:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table in stale:
            conn.execute(
                f"INSERT INTO {table} ({table}, rank) VALUES ('pgsz', ?)", (TURN_INDEX_LEAF_BYTES,)
            )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def busy_ms_of(seconds: float) -> int:
    """``seconds`` as SQLite's ``busy_timeout`` (whole milliseconds, never negative)."""
    return max(0, int(seconds * 1000))


def encodable(
    fn: Callable[[sqlite3.Connection, Mapping[str, Any]], T],
    conn: sqlite3.Connection,
    body: Mapping[str, Any],
) -> T:
    """``fn(conn, body)``, with a text SQLite cannot hold refused as a typed 400."""
    # A lone surrogate cannot be encoded for SQLite or hashing. Refused as a typed 400 like
    # any bad request (the job's savepoint undoes what it wrote); `from None` drops the
    # UnicodeEncodeError, whose repr would carry the whole text.
    try:
        return fn(conn, body)
    except UnicodeEncodeError:
        raise invalid_format(
            "a string holds a lone UTF-16 surrogate, which cannot be stored (text must be "
            "well-formed Unicode)"
        ) from None


def run(
    conn: sqlite3.Connection,
    fn: Callable[[sqlite3.Connection, Mapping[str, Any]], T],
    body: Mapping[str, Any],
    *,
    writes: bool,
    user: str | None = None,
) -> T:
    """One action in a transaction of its own, as the store's thread runs a lone job: all
    of it committed, or (it failed) none of it. ``user``: the (checked) user it acts for,
    as ``EmbeddedStore.for_user(user)`` would (None: the local dev user)."""
    conn.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
    try:
        if user is None:
            result = encodable(fn, conn, body)
        else:
            result = run_as(user, functools.partial(encodable, fn), conn, body, writes=writes)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result
