"""The outbox: closing stores that could not reach the server, kept in a local SQLite file.

When the server is unreachable at the end of a turn (a deploy, a network blip longer than the
retry budget), the closing store (the reply, or the abandoned record) would be lost to memory.
With an outbox, :class:`~neotoma_agent.OutboxTransport` appends it here instead, same body
and same idempotency key, durably (WAL, ``synchronous=FULL``: once the append returned it survives
``kill -9`` and a power cut), and delivers it later.

The file is one table of entries in insertion order. Each entry belongs to a *lane* (the
conversation id): entries of one lane are delivered strictly in order, only the head of a lane
is ever sent, and an entry is deleted only after the server confirmed it. So a crash between
delivery and deletion re-delivers, which the idempotency key turns into a replay; two
processes sharing the file may both deliver a head, and the second delivery is a replay too.
No claim or lease is needed for correctness, and nothing is ever dropped: an entry the server
refuses for good (a 4xx on delivery) is kept as ``dead`` with its error, reported by
:func:`outbox_status`, and no longer holds its lane back.

Schema versioned with ``PRAGMA user_version``; a newer version is refused. The file is created
``0600`` (SQLite gives its ``-wal`` / ``-shm`` files the same mode). Its size is bounded by
``max_entries``: over it an append raises :class:`~neotoma_agent.OutboxFullError` (fail
loudly; never drop).

Everything here is blocking SQLite: callers run it off the event loop (``anyio.to_thread``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .._records.user_id import LOCAL_USER_ID
from .._util.file_kind import file_kind
from .._util.private import private_file
from ..exceptions import OutboxError, OutboxFullError
from ._base import StoreResult
from ._results import expected_entity

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "SCHEMA_VERSION",
    "LaneStatus",
    "Outbox",
    "OutboxEntry",
    "OutboxFlush",
    "OutboxStatus",
    "expected_result",
    "outbox_status",
    "owner_of",
]

#: the outbox schema this library writes (``PRAGMA user_version``)
SCHEMA_VERSION = 1

#: default bound on the number of entries (queued and dead) in one outbox file
DEFAULT_MAX_ENTRIES = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order, never reused
    lane TEXT NOT NULL,                    -- the conversation id: delivery order is per lane
    action TEXT NOT NULL,                  -- the REST action, 'store'
    idempotency_key TEXT NOT NULL,
    body TEXT NOT NULL,                    -- the exact JSON body that failed
    state TEXT NOT NULL DEFAULT 'queued',  -- queued | dead
    created_at REAL NOT NULL,              -- unix time of the append
    attempts INTEGER NOT NULL DEFAULT 0,   -- failed deliveries so far
    last_error TEXT,                       -- class, status and code only: never content
    last_attempt_at REAL
);
CREATE INDEX IF NOT EXISTS entries_lane ON entries (lane, state, id);
"""


@attrs.frozen
class OutboxEntry:
    """One queued request: its lane (conversation), key and exact body."""

    id: int
    lane: str
    action: str
    idempotency_key: str
    body: Mapping[str, Any] = attrs.field(repr=False)
    created_at: float
    attempts: int


@attrs.frozen
class LaneStatus:
    """One conversation's part of an outbox."""

    lane: str
    queued: int
    dead: int
    #: seconds since the oldest queued entry was appended (``None`` if none is queued)
    oldest_age_s: float | None
    last_error: str | None


@attrs.frozen
class OutboxStatus:
    """What an outbox file holds: counts, the oldest entry's age, errors, per conversation.

    :meth:`render` is the text ``neotoma-agent outbox status`` prints, :meth:`to_json` its
    ``--json`` shape.
    """

    path: str
    schema_version: int
    max_entries: int
    queued: int
    dead: int
    oldest_age_s: float | None
    last_error: str | None
    lanes: tuple[LaneStatus, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``conversations`` lists the lanes, oldest queued first)."""
        out = attrs.asdict(self, recurse=False, filter=lambda a, _: a.name != "lanes")
        return {
            **out,
            "oldest_age_s": _round(self.oldest_age_s),
            "conversations": [
                {
                    "conversation_id": lane.lane,
                    "queued": lane.queued,
                    "dead": lane.dead,
                    "oldest_age_s": _round(lane.oldest_age_s),
                    "last_error": lane.last_error,
                }
                for lane in self.lanes
            ],
        }

    def render(self) -> str:
        """A short human-readable report."""
        head = f"outbox {self.path}: {self.queued} queued, {self.dead} dead"
        if self.oldest_age_s is not None:
            head += f", oldest {_age(self.oldest_age_s)}"
        lines = [head]
        if self.last_error:
            lines.append(f"last error: {self.last_error}")
        for lane in self.lanes:
            line = f"  {lane.lane}: {lane.queued} queued"
            if lane.dead:
                line += f", {lane.dead} dead"
            if lane.oldest_age_s is not None:
                line += f", oldest {_age(lane.oldest_age_s)}"
            if lane.last_error:
                line += f" (last error: {lane.last_error})"
            lines.append(line)
        if not self.lanes:
            lines.append("  nothing queued")
        return "\n".join(lines)


@attrs.frozen
class OutboxFlush:
    """What one delivery round did (:meth:`OutboxTransport.flush`)."""

    #: entries the server confirmed (fresh or replayed) and that were removed
    delivered: int
    #: entries still queued (the server is still unreachable, or another process holds them)
    remaining: int
    #: entries the server refused for good in this round (kept as ``dead``)
    dead: int
    #: the transient error that stopped delivery, by class, status and code (never content)
    last_error: str | None = None


def expected_result(request_entities: Any) -> StoreResult:
    """The answer a server will give for ``request_entities``, computed locally: what a
    queued store is answered with (``queued=True``, no observation ids)."""
    expected = (expected_entity(e, i) for i, e in enumerate(request_entities))
    entries = [e for e in expected if e is not None]
    return StoreResult(
        replayed=False,
        source_id=None,
        entities=tuple(entries),
        entities_created=0,
        observations_created=0,
        raw={"queued": True},
        queued=True,
    )


class Outbox:
    """One outbox file, opened for appends and deliveries (blocking; thread-safe).

    Opening creates the file (``0600``) and its schema, or checks an existing one: a schema
    version newer than :data:`SCHEMA_VERSION` raises :class:`~neotoma_agent.OutboxError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.path = Path(path)
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._db = _connect(self.path)

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            self._db.close()

    def claim(self, owner: str) -> None:
        """Bind the file to ``owner`` (an :func:`owner_of` value) if nothing else has been;
        :class:`~neotoma_agent.OutboxError` if it is another user's. Its entries are sent
        through the transport that opens it, so one user's queued turns must never be
        delivered through another user's transport (into that user's memory)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("CREATE TABLE IF NOT EXISTS owner (user TEXT NOT NULL)")
                row = db.execute("SELECT user FROM owner LIMIT 1").fetchone()
                if row is None:
                    db.execute("INSERT INTO owner (user) VALUES (?)", (owner,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        if row is not None and not hmac.compare_digest(str(row[0]), owner):
            raise OutboxError(
                f"the outbox {self.path} keeps another user's queued stores: give each "
                "user's transport an outbox file of its own"
            )

    def append(self, lane: str, action: str, idempotency_key: str, body: Mapping[str, Any]) -> int:
        """Append one request durably; its entry id. An identical queued one is not repeated.

        Raises :class:`~neotoma_agent.OutboxFullError` when the file holds ``max_entries``.
        """
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")  # the bound holds across processes
            try:
                same = db.execute(
                    "SELECT id FROM entries WHERE lane = ? AND idempotency_key = ? AND body = ?"
                    " AND state = 'queued'",
                    (lane, idempotency_key, text),
                ).fetchone()
                if same is not None:
                    db.execute("COMMIT")
                    return int(same[0])
                (count,) = db.execute("SELECT count(*) FROM entries").fetchone()
                if count >= self.max_entries:
                    raise OutboxFullError(
                        f"the outbox {self.path} holds {count} entries, its maximum "
                        f"(max_entries={self.max_entries}); deliver them (flush) or raise it"
                    )
                cursor = db.execute(
                    "INSERT INTO entries (lane, action, idempotency_key, body, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (lane, action, idempotency_key, text, time.time()),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def has_lane(self, lane: str) -> bool:
        """Whether ``lane`` has queued entries (later stores of it must wait behind them)."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM entries WHERE lane = ? AND state = 'queued' LIMIT 1", (lane,)
            ).fetchone()
        return row is not None

    def lanes(self) -> list[str]:
        """The lanes with queued entries, the one with the oldest entry first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT lane, min(id) AS first FROM entries WHERE state = 'queued'"
                " GROUP BY lane ORDER BY first"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def head(self, lane: str) -> OutboxEntry | None:
        """The oldest queued entry of ``lane``: the only one of it that may be sent."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, lane, action, idempotency_key, body, created_at, attempts"
                " FROM entries WHERE lane = ? AND state = 'queued' ORDER BY id LIMIT 1",
                (lane,),
            ).fetchone()
        if row is None:
            return None
        return OutboxEntry(
            id=row[0],
            lane=row[1],
            action=row[2],
            idempotency_key=row[3],
            body=json.loads(row[4]),
            created_at=row[5],
            attempts=row[6],
        )

    def remove(self, entry_id: int) -> None:
        """Delete a delivered entry (a no-op if another process removed it first)."""
        with self._lock:
            self._db.execute("DELETE FROM entries WHERE id = ?", (entry_id,))

    def failed(self, entry_id: int, error: str, *, dead: bool) -> None:
        """Record a failed delivery; ``dead``: the server refused it for good."""
        with self._lock:
            self._db.execute(
                "UPDATE entries SET attempts = attempts + 1, last_error = ?,"
                " last_attempt_at = ?, state = CASE WHEN ? THEN 'dead' ELSE state END"
                " WHERE id = ?",
                (error, time.time(), dead, entry_id),
            )

    def count(self) -> int:
        """Entries queued (dead ones excluded)."""
        with self._lock:
            (n,) = self._db.execute(
                "SELECT count(*) FROM entries WHERE state = 'queued'"
            ).fetchone()
        return int(n)

    def status(self) -> OutboxStatus:
        """Counts, the oldest entry's age and the last error, overall and per lane."""
        now = time.time()
        with self._lock:
            rows = self._db.execute(
                "SELECT lane,"
                " sum(state = 'queued'), sum(state = 'dead'),"
                " min(CASE WHEN state = 'queued' THEN created_at END),"
                " (SELECT e2.last_error FROM entries e2 WHERE e2.lane = e.lane"
                "   AND e2.last_error IS NOT NULL ORDER BY e2.last_attempt_at DESC LIMIT 1),"
                " max(last_attempt_at)"
                " FROM entries e GROUP BY lane ORDER BY min(id)"
            ).fetchall()
        lanes = tuple(
            LaneStatus(
                lane=r[0],
                queued=int(r[1]),
                dead=int(r[2]),
                oldest_age_s=None if r[3] is None else max(0.0, now - r[3]),
                last_error=r[4],
            )
            for r in rows
        )
        oldest = [r[3] for r in rows if r[3] is not None]
        errors = [(r[5], r[4]) for r in rows if r[4] is not None and r[5] is not None]
        return OutboxStatus(
            path=str(self.path),
            schema_version=SCHEMA_VERSION,
            max_entries=self.max_entries,
            queued=sum(lane.queued for lane in lanes),
            dead=sum(lane.dead for lane in lanes),
            oldest_age_s=max(0.0, now - min(oldest)) if oldest else None,
            last_error=max(errors)[1] if errors else None,
            lanes=lanes,
        )


def outbox_status(
    path: str | os.PathLike[str], *, max_entries: int = DEFAULT_MAX_ENTRIES
) -> OutboxStatus:
    """The status of the outbox file at ``path`` (``neotoma-agent outbox status``).

    Raises :class:`FileNotFoundError` if there is no such file (a status never creates one).
    """
    if not Path(path).exists():
        raise FileNotFoundError(f"no outbox file at {os.fspath(path)}")
    outbox = Outbox(path, max_entries=max_entries)
    try:
        return outbox.status()
    finally:
        outbox.close()


def owner_of(user_id: str | None) -> str:
    """What an outbox file keeps of the user whose stores it queues: ``""`` for the default
    user (None, or :data:`~neotoma_agent.LOCAL_USER_ID`), else a digest of the user id (the
    id itself, personal data, is never written to the file)."""
    if user_id is None or user_id == LOCAL_USER_ID:
        return ""
    return hashlib.sha256(b"neotoma-agent outbox owner\0" + user_id.encode()).hexdigest()


def _kind(db: sqlite3.Connection, path: Path) -> str:
    """What the file holds; :class:`OutboxError` for anything but an outbox or nothing."""
    kind: str
    try:
        kind = file_kind(db)
    except sqlite3.DatabaseError as exc:
        if "not a database" not in str(exc):
            raise
        kind = "not a SQLite database"
    if kind == "store":
        raise OutboxError(
            f"{path} is a neotoma-agent store, not an outbox: pass it as --db (an "
            "outbox is the file given to OutboxTransport)"
        )
    if kind not in ("outbox", "empty"):
        what = kind if kind != "other" else "a SQLite database with other tables"
        raise OutboxError(f"{path} is not an outbox ({what}); it was left as it is")
    return kind


def _connect(path: Path) -> sqlite3.Connection:
    existed = path.exists()
    if not existed:
        # Owner-only before SQLite opens it: the bodies hold message content.
        private_file(path)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    try:
        db.execute("PRAGMA busy_timeout = 30000")
        # Before anything changes a byte or the mode of the file: another application's
        # database (or a store) is refused as it is.
        _kind(db, path)
        if existed:
            private_file(path)  # ours: an older version's 0644 file is set 0600
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise OutboxError(
                f"the outbox {path} has schema version {version}, newer than this library's "
                f"{SCHEMA_VERSION}; use a newer neotoma-agent to deliver it"
            )
        db.execute("PRAGMA journal_mode = WAL")
        # FULL: a commit is on disk before the append returns (kill -9, power cut).
        db.execute("PRAGMA synchronous = FULL")
        if version < SCHEMA_VERSION:
            db.execute("BEGIN IMMEDIATE")
            try:
                if int(db.execute("PRAGMA user_version").fetchone()[0]) < SCHEMA_VERSION:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
    except BaseException:
        db.close()
        raise
    return db


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
