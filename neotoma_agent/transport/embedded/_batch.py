"""Many stores in one job: :meth:`EmbeddedStore.store_many` and ``replay_status``.

The DB thread already commits queued stores together, but each store still costs its
caller a job, a wake-up and an answer to parse, on the event loop that also prepares the
next ones. A transcript import has hundreds of stores ready at once: here they go to the
thread as one job and are committed in one transaction. Each keeps what makes a store a
store: its own idempotency key and its own atomicity (a savepoint per store, so one that
fails rolls back alone and the others still commit). A crash before the commit loses the
whole job and nothing else, which a resumed import writes again.

``replay_status`` answers, for a list of store bodies, which ones a store would only
replay: their key is stored with the same entities. A re-import asks it once per batch
and skips what is already stored, without writing (or parsing) a replay per turn.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._key_digest import stored_sources
from ._rows import encode_id
from ._store_source import source_id_of
from ._validate import check_entities

__all__ = ["replay_statuses", "store_each"]

#: SQLite's default limit on ``?`` parameters is 32,766; stay well below it.
_KEYS_PER_QUERY = 500

#: What a body may hold for ``replay_status`` to answer for it: with any other option
#: (``source_priority``, ``strict``, ...) a store might refuse before it replays.
_PLAIN_KEYS = frozenset({"entities", "relationships", "idempotency_key"})


def store_each(
    store: Callable[[sqlite3.Connection, Mapping[str, Any]], dict[str, Any]],
    conn: sqlite3.Connection,
    body: Mapping[str, Any],
) -> list[dict[str, Any] | Exception]:
    """Run ``store`` on every body of ``body["stores"]``, each atomic on its own.

    A store that raises leaves nothing behind and its error takes its place in the list. If
    SQLite itself rolled the whole transaction back (disk full, I/O error), the stores
    before it are lost too: then the job fails as a whole and every caller sees the error.

    A store checks everything before its first write, so one that fails nearly always
    fails having written nothing: the batch runs under one savepoint, not one per store
    (each costs two statements and journals the pages its store touches). Only a store
    that fails after writing makes the batch roll back and run again with a savepoint per
    store; a store is a function of the database alone, so the rerun is the same.
    """
    stores: Sequence[Mapping[str, Any]] = body["stores"]
    conn.execute("SAVEPOINT batch")
    results = _run_plain(store, conn, stores)
    if results is None:
        conn.execute("ROLLBACK TO batch")
        conn.execute("RELEASE batch")
        return _run_careful(store, conn, stores)
    conn.execute("RELEASE batch")
    return results


def _run_plain(
    store: Callable[[sqlite3.Connection, Mapping[str, Any]], dict[str, Any]],
    conn: sqlite3.Connection,
    stores: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any] | Exception] | None:
    """The results, or None once a store failed after writing (the caller rolls back)."""
    results: list[dict[str, Any] | Exception] = []
    for item in stores:
        before = conn.total_changes
        try:
            results.append(store(conn, item))
        except Exception as exc:  # delivered to the caller, in the store's place
            if not conn.in_transaction:
                raise
            if conn.total_changes != before:
                return None
            results.append(exc)
    return results


def _run_careful(
    store: Callable[[sqlite3.Connection, Mapping[str, Any]], dict[str, Any]],
    conn: sqlite3.Connection,
    stores: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any] | Exception]:
    results: list[dict[str, Any] | Exception] = []
    for item in stores:
        conn.execute("SAVEPOINT batch_store")
        try:
            results.append(store(conn, item))
        except Exception as exc:  # delivered to the caller, in the store's place
            if not conn.in_transaction:
                raise
            conn.execute("ROLLBACK TO batch_store")
            results.append(exc)
        conn.execute("RELEASE batch_store")
    return results


def replay_statuses(conn: sqlite3.Connection, body: Mapping[str, Any]) -> list[bool | None]:
    """For each body of ``body["stores"]``: True if storing it would replay, False if its
    key is stored with other entities (a store would be refused), None if its key is new or
    the body is not one this can answer for (a store decides)."""
    stores: Sequence[Mapping[str, Any]] = body["stores"]
    hashes: list[tuple[str, str | bytes | None] | None] = []
    for item in stores:
        key = item.get("idempotency_key")
        if not isinstance(key, str) or not key or not _PLAIN_KEYS.issuperset(item):
            hashes.append(None)
            continue
        try:
            hashes.append((key, encode_id(source_id_of(check_entities(item.get("entities"))))))
        except Exception:  # a store will refuse it, with the right error
            hashes.append(None)
    keys = list({pair[0] for pair in hashes if pair is not None})
    stored: dict[str, str | bytes] = {}
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        stored.update(stored_sources(conn, keys[start : start + _KEYS_PER_QUERY]))
    statuses: list[bool | None] = []
    for pair in hashes:
        seen = None if pair is None else stored.get(pair[0])
        statuses.append(None if seen is None or pair is None else seen == pair[1])
    return statuses
