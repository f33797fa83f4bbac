"""The turn state the hook processes of a coding agent share: one SQLite file.

A harness runs one process per event (a prompt submitted, a tool used, the agent
stopping), often several at once (Claude Code runs the hooks of parallel tool calls
together). What one process learns and the next needs lives here, each change one
transaction, so concurrent hooks never lose each other's updates (the Neotoma project's own
hooks keep unlocked JSON files and do).

The file is also the hooks' write-ahead log. Each turn row says what the harness reported
(the prompt, how the turn ended, the reply) and what has been delivered to the store
(``phase``: ``pending`` until the user store landed, ``open`` until the closing store did,
then ``done``). Every hook process first records what its event says, then delivers what
is still due for its session, so a store that failed (a killed hook, an unreachable store)
is delivered by a later event; the idempotency keys turn a repeated delivery into a replay.

Tables: ``turns`` (one row per harness turn), ``tools`` (tool calls waiting for their
turn's closing store, as the tool-call API's plain JSON), ``fired`` (when each event last
ran, for ``hooks status``), ``pruned`` (closed turns no longer kept, counted for status).

What is kept, and for how long (each turn's closing store prunes, in its transaction):

- a turn still to deliver keeps everything (it is the write-ahead log);
- once a completed turn's closing store landed (or went to the outbox, which keeps its own
  copy), its prompt, reply, context, retrieved ids and tool calls go: no later event reads
  them. The row itself stays (ids, how it ended): it makes a repeated prompt or Stop a
  no-op and counts in ``hooks status``;
- an abandoned turn keeps, for :data:`LATE_STOP_WINDOW`, what a Stop that comes after the
  next prompt needs to complete it (the reply so far, the ids, the tool calls); after
  that a late Stop changes nothing;
- the closed rows themselves: a session keeps its newest :data:`KEEP_PER_SESSION`, and none
  older than :data:`KEEP_SECONDS` (a repeated event comes within seconds). Deleted rows are
  counted in ``pruned``, so ``hooks status`` still says how many turns were stored.

Freed space is zeroed (``secure_delete``): a pruned text is not left in the file's free
pages. A file an earlier version wrote (everything kept) is pruned when first opened.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple

from ..files import private_dir, private_file

__all__ = [
    "KEEP_PER_SESSION",
    "KEEP_SECONDS",
    "LATE_STOP_WINDOW",
    "Ending",
    "HookState",
    "PendingTurn",
    "Phase",
]

Phase = Literal["pending", "open", "done"]
Ending = Literal["completed", "abandoned"]

#: seconds a hook waits for another hook's write lock before giving up
BUSY_TIMEOUT_MS: Final = 5000
#: seconds an abandoned turn keeps what a late Stop needs to complete it (a Stop that
#: races the next prompt's hook comes within seconds)
LATE_STOP_WINDOW: Final = 3600.0
#: closed turns kept per session (the newest), and for how long at most
KEEP_PER_SESSION: Final = 50
KEEP_SECONDS: Final = 7 * 86400.0
#: ``PRAGMA user_version`` of a file whose closed turns are pruned (0: an earlier version's)
_VERSION: Final = 1

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS turns (
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    harness TEXT NOT NULL,
    seq INTEGER NOT NULL,
    user_message TEXT NOT NULL,
    model TEXT,
    phase TEXT NOT NULL DEFAULT 'pending',
    ending TEXT,
    reply TEXT,
    error_class TEXT,
    user_message_id TEXT,
    retrieved_ids TEXT,
    context TEXT,
    context_sent INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, turn_id)
);
CREATE INDEX IF NOT EXISTS turns_due ON turns (conversation_id, phase, seq);
-- what a prompt looks for in other sessions (HookState.stale): a few rows of a table that
-- grows with every turn, so only the undelivered ones are indexed
CREATE INDEX IF NOT EXISTS turns_undelivered ON turns (harness, seq)
    WHERE phase = 'pending' OR (phase = 'open' AND ending IS NOT NULL);
-- the closed rows the pruning reads: by age, and those still holding a payload
CREATE INDEX IF NOT EXISTS turns_done ON turns (updated_at) WHERE phase = 'done';
CREATE TABLE IF NOT EXISTS tools (
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    call_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (conversation_id, turn_id, call_key)
);
CREATE TABLE IF NOT EXISTS fired (
    harness TEXT NOT NULL,
    event TEXT NOT NULL,
    last_at REAL NOT NULL,
    count INTEGER NOT NULL,
    problems INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (harness, event)
);
CREATE TABLE IF NOT EXISTS pruned (
    harness TEXT PRIMARY KEY,
    turns INTEGER NOT NULL
);
"""

# What a closed turn no longer needs (a completed one: everything but its ids and ending).
_SETTLE_COMPLETED: Final = (
    "UPDATE turns SET user_message = '', reply = NULL, context = NULL, retrieved_ids = NULL, "
    "user_message_id = NULL WHERE phase = 'done' AND ending = 'completed'"
)
# An abandoned one keeps what a late Stop needs (reply so far, ids, tool calls) for now.
_SETTLE_ABANDONED: Final = (
    "UPDATE turns SET user_message = '', context = NULL WHERE phase = 'done' "
    "AND ending IS NOT 'completed'"
)
# The tool calls of closed turns that no Stop can reopen any more (``end``).
_DEAD_TOOLS: Final = (
    "DELETE FROM tools WHERE (conversation_id, turn_id) IN (SELECT conversation_id, turn_id "
    "FROM turns WHERE phase = 'done' AND user_message_id IS NULL{})"
)


class PendingTurn(NamedTuple):
    """A turn row with something still to deliver (or the current turn of a prompt).

    A named tuple: every hook process builds the class, and attrs costs more.
    """

    conversation_id: str
    turn_id: str
    harness: str
    user_message: str
    phase: Phase
    ending: Ending | None
    reply: str | None
    error_class: str | None
    user_message_id: str | None
    retrieved_ids: tuple[str, ...] | None
    context: str | None
    context_sent: bool
    model: str | None = None


_COLUMNS: Final = (
    "conversation_id, turn_id, harness, user_message, phase, ending, reply, error_class, "
    "user_message_id, retrieved_ids, context, context_sent, model"
)


def _row(row: Sequence[Any]) -> PendingTurn:
    ids = None if row[9] is None else tuple(json.loads(row[9]))
    return PendingTurn(
        conversation_id=row[0],
        turn_id=row[1],
        harness=row[2],
        user_message=row[3],
        phase=row[4],
        ending=row[5],
        reply=row[6],
        error_class=row[7],
        user_message_id=row[8],
        retrieved_ids=ids,
        context=row[10],
        context_sent=bool(row[11]),
        model=row[12],
    )


class HookState:
    """The state file (created on first use); one instance per hook process.

    Every method is one short transaction (``BEGIN IMMEDIATE`` where it reads then writes),
    so concurrent hook processes serialise on SQLite's lock instead of overwriting each
    other; the file is in WAL mode so readers never wait.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # Owner-only: it holds prompts, replies and tool calls until they are delivered.
        private_dir(self.path.parent)
        private_file(self.path)
        self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # What a pruning frees is zeroed: a pruned text must not stay in a free page.
        self._db.execute("PRAGMA secure_delete=ON")
        # IF NOT EXISTS throughout: a second process creating the file at once is harmless.
        self._db.executescript(_SCHEMA)
        if self._db.execute("PRAGMA user_version").fetchone()[0] < _VERSION:
            self._migrate()

    def _migrate(self) -> None:
        """Prune what an earlier version kept of every closed turn (once per file)."""
        with self._write() as db:
            if db.execute("PRAGMA user_version").fetchone()[0] >= _VERSION:
                return  # another process did it first
            db.execute(_SETTLE_COMPLETED)
            db.execute(_SETTLE_ABANDONED)
            db.execute(_DEAD_TOOLS.format(""))
            _sweep(db, time.time())
            db.execute(f"PRAGMA user_version={_VERSION}")

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> HookState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ---------------------------------------------------------------- what the harness said

    def fired(self, harness: str, event: str, *, problem: bool = False) -> None:
        """Note that ``event`` ran now (and whether its input was a problem)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO fired (harness, event, last_at, count, problems) "
                "VALUES (?, ?, ?, 1, ?) ON CONFLICT (harness, event) DO UPDATE SET "
                "last_at = excluded.last_at, count = count + 1, "
                "problems = problems + excluded.problems",
                (harness, event, time.time(), int(problem)),
            )

    def prompt(
        self,
        conversation_id: str,
        turn_id: str,
        harness: str,
        user_message: str,
        *,
        model: str | None = None,
        abandon_others_as: str,
    ) -> list[str]:
        """Record a submitted prompt; the session's earlier unended turns are abandoned.

        A turn that never got its Stop (the person interrupted it, the model API failed)
        ends when the session's next prompt arrives. A prompt seen before (a repeated
        event) changes nothing. Returns the ids of the turns abandoned here.
        """
        now = time.time()
        with self._write() as db:
            abandoned = _abandon_unended(db, conversation_id, abandon_others_as, now, turn_id)
            seq = db.execute("SELECT coalesce(max(seq), 0) + 1 FROM turns").fetchone()[0]
            db.execute(
                "INSERT OR IGNORE INTO turns (conversation_id, turn_id, harness, seq, "
                "user_message, model, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, turn_id, harness, seq, user_message, model, now, now),
            )
        return abandoned

    def latest_turn(self, conversation_id: str) -> str | None:
        """The session's newest turn id (for a harness event that names no turn)."""
        row = self._db.execute(
            "SELECT turn_id FROM turns WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
            (conversation_id,),
        ).fetchone()
        return None if row is None else str(row[0])

    def knows(self, conversation_id: str, turn_id: str) -> bool:
        """Whether a prompt was recorded for this turn."""
        row = self._db.execute(
            "SELECT 1 FROM turns WHERE conversation_id = ? AND turn_id = ?",
            (conversation_id, turn_id),
        ).fetchone()
        return row is not None

    def reply(self, conversation_id: str, turn_id: str, text: str) -> bool:
        """Keep the reply text seen so far (Cursor's ``afterAgentResponse``); not an ending."""
        with self._write() as db:
            changed = db.execute(
                "UPDATE turns SET reply = ?, updated_at = ? WHERE conversation_id = ? "
                "AND turn_id = ? AND ending IS NULL",
                (text, time.time(), conversation_id, turn_id),
            ).rowcount
        return bool(changed)

    def end(
        self,
        conversation_id: str,
        turn_id: str,
        ending: Ending,
        *,
        reply: str | None,
        error_class: str | None = None,
    ) -> bool:
        """Record how a turn ended; ``False`` when that changes nothing.

        The first ending wins, with one exception: a completion that arrives after the
        turn was abandoned (its Stop came late, after the next prompt) is recorded, since
        the turn did complete; but not for a turn whose prompt the store refused (dropped
        before its user message was stored): its reply would be stored with no user
        message, or beside another prompt stored under the same turn id. A repeated Stop
        changes nothing. ``reply=None`` keeps the reply already recorded (Cursor's
        ``stop`` carries none).
        """
        now = time.time()
        with self._write() as db:
            if ending == "completed":
                changed = db.execute(
                    "UPDATE turns SET ending = 'completed', reply = coalesce(?, reply, ''), "
                    "error_class = NULL, phase = CASE phase WHEN 'done' THEN 'open' "
                    "ELSE phase END, updated_at = ? WHERE conversation_id = ? AND turn_id = ? "
                    "AND (ending IS NULL OR (ending = 'abandoned' "
                    "AND (phase != 'done' OR user_message_id IS NOT NULL)))",
                    (reply, now, conversation_id, turn_id),
                ).rowcount
            else:
                changed = db.execute(
                    "UPDATE turns SET ending = 'abandoned', reply = coalesce(?, reply), "
                    "error_class = ?, updated_at = ? WHERE conversation_id = ? "
                    "AND turn_id = ? AND ending IS NULL",
                    (reply, error_class, now, conversation_id, turn_id),
                ).rowcount
        return bool(changed)

    def end_session(self, conversation_id: str, error_class: str) -> list[str]:
        """Abandon every unended turn of a session that ended; returns their ids."""
        with self._write() as db:
            return _abandon_unended(db, conversation_id, error_class, time.time())

    def explain(
        self, conversation_id: str, turn_id: str, *, reply: str, error_class: str | None
    ) -> bool:
        """What the session file says of an abandoned turn still to deliver: the reply the
        person saw (an empty one keeps what was recorded) and why it ended."""
        with self._write() as db:
            changed = db.execute(
                "UPDATE turns SET reply = coalesce(nullif(?, ''), reply), "
                "error_class = coalesce(?, error_class), updated_at = ? "
                "WHERE conversation_id = ? AND turn_id = ? AND ending = 'abandoned' "
                "AND phase != 'done'",
                (reply, error_class, time.time(), conversation_id, turn_id),
            ).rowcount
        return bool(changed)

    def add_tool(
        self, conversation_id: str, turn_id: str, call_key: str, record: Mapping[str, Any]
    ) -> bool:
        """Keep a tool call for its turn's closing store; a repeated call key is a no-op."""
        with self._write() as db:
            seq = db.execute("SELECT coalesce(max(seq), 0) + 1 FROM tools").fetchone()[0]
            # Not for a closed turn no Stop can reopen (``end``): no store would read it.
            added = db.execute(
                "INSERT OR IGNORE INTO tools (conversation_id, turn_id, call_key, seq, record) "
                "SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM turns WHERE "
                "conversation_id = ? AND turn_id = ? AND phase = 'done' "
                "AND user_message_id IS NULL)",
                (
                    conversation_id,
                    turn_id,
                    call_key,
                    seq,
                    json.dumps(record, sort_keys=True),
                    conversation_id,
                    turn_id,
                ),
            ).rowcount
        return bool(added)

    def tools(self, conversation_id: str, turn_id: str) -> list[dict[str, Any]]:
        """The turn's tool calls, in the order they were recorded."""
        rows = self._db.execute(
            "SELECT record FROM tools WHERE conversation_id = ? AND turn_id = ? ORDER BY seq",
            (conversation_id, turn_id),
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    # ---------------------------------------------------------------- what was delivered

    def due(self, conversation_id: str) -> list[PendingTurn]:
        """The session's turns with a store still to deliver, oldest first."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM turns WHERE conversation_id = ? AND "
            "(phase = 'pending' OR (phase = 'open' AND ending IS NOT NULL)) ORDER BY seq",
            (conversation_id,),
        ).fetchall()
        return [_row(r) for r in rows]

    def stale(self, harness: str, *, besides: str, idle: float, limit: int) -> list[PendingTurn]:
        """Other sessions' turns of ``harness`` with a store due and untouched for ``idle``
        seconds, oldest first: what no later event of their own session will deliver (the
        harness killed its last hook as it exited, as Codex does to ``SessionEnd``)."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM turns WHERE harness = ? AND conversation_id != ? AND "
            "(phase = 'pending' OR (phase = 'open' AND ending IS NOT NULL)) "
            "AND updated_at < ? ORDER BY seq LIMIT ?",
            (harness, besides, time.time() - idle, limit),
        ).fetchall()
        return [_row(r) for r in rows]

    def get(self, conversation_id: str, turn_id: str) -> PendingTurn | None:
        """One turn row."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM turns WHERE conversation_id = ? AND turn_id = ?",
            (conversation_id, turn_id),
        ).fetchone()
        return None if row is None else _row(row)

    def opened(
        self,
        conversation_id: str,
        turn_id: str,
        *,
        user_message_id: str,
        retrieved_ids: Sequence[str],
        context: str,
    ) -> None:
        """The user store landed: keep what the closing store (in another process) needs."""
        with self._write() as db:
            db.execute(
                "UPDATE turns SET phase = 'open', user_message_id = ?, retrieved_ids = ?, "
                "context = ?, updated_at = ? WHERE conversation_id = ? AND turn_id = ? "
                "AND phase = 'pending'",
                (
                    user_message_id,
                    json.dumps(list(retrieved_ids)),
                    context,
                    time.time(),
                    conversation_id,
                    turn_id,
                ),
            )

    def closed(self, conversation_id: str, turn_id: str, ending: Ending) -> None:
        """The closing store for ``ending`` landed (or was queued in the outbox): what the
        turn kept for it goes, and the closed turns past their keep are pruned."""
        now = time.time()
        with self._write() as db:
            db.execute(
                "UPDATE turns SET phase = 'done', updated_at = ? WHERE conversation_id = ? "
                "AND turn_id = ? AND ending = ?",
                (now, conversation_id, turn_id, ending),
            )
            _settle(db, conversation_id, turn_id, now)

    def drop(self, conversation_id: str, turn_id: str) -> None:
        """The store refused this turn for good (its content): stop delivering it."""
        now = time.time()
        with self._write() as db:
            db.execute(
                "UPDATE turns SET phase = 'done', ending = coalesce(ending, 'abandoned'), "
                "error_class = coalesce(error_class, 'Refused'), updated_at = ? "
                "WHERE conversation_id = ? AND turn_id = ?",
                (now, conversation_id, turn_id),
            )
            _settle(db, conversation_id, turn_id, now)

    def forget(self, conversation_id: str) -> int:
        """Drop everything kept of a conversation (``forget --purge``); the turns dropped.

        Its undelivered turns too: a later event would otherwise store the forgotten
        conversation again. The WAL is truncated, so no copy of a page stays there.
        """
        with self._write() as db:
            db.execute("DELETE FROM tools WHERE conversation_id = ?", (conversation_id,))
            dropped = db.execute(
                "DELETE FROM turns WHERE conversation_id = ?", (conversation_id,)
            ).rowcount
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(dropped)

    def failed(self, conversation_id: str, turn_id: str) -> int:
        """A delivery failed (a later event tries again); the failures so far."""
        with self._write() as db:
            db.execute(
                "UPDATE turns SET attempts = attempts + 1, updated_at = ? "
                "WHERE conversation_id = ? AND turn_id = ?",
                (time.time(), conversation_id, turn_id),
            )
            row = db.execute(
                "SELECT attempts FROM turns WHERE conversation_id = ? AND turn_id = ?",
                (conversation_id, turn_id),
            ).fetchone()
        return 0 if row is None else int(row[0])

    def take_context(self, conversation_id: str, turn_id: str) -> str | None:
        """The turn's context block, once (Cursor gets it on the first tool use)."""
        with self._write() as db:
            row = db.execute(
                "SELECT context FROM turns WHERE conversation_id = ? AND turn_id = ? "
                "AND context_sent = 0 AND phase != 'pending'",
                (conversation_id, turn_id),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE turns SET context_sent = 1 WHERE conversation_id = ? AND turn_id = ?",
                (conversation_id, turn_id),
            )
        return None if row[0] is None else str(row[0])

    # ---------------------------------------------------------------- status

    def last_fired(self, harness: str) -> dict[str, tuple[float, int, int]]:
        """``{event: (last run as a Unix time, runs, runs with a problem)}``."""
        rows = self._db.execute(
            "SELECT event, last_at, count, problems FROM fired WHERE harness = ?", (harness,)
        ).fetchall()
        return {r[0]: (float(r[1]), int(r[2]), int(r[3])) for r in rows}

    def counts(self, harness: str) -> dict[str, int]:
        """Turns by state: ``open`` (waiting for their end), ``undelivered``, ``done``
        (closed, the pruned ones included)."""
        row = self._db.execute(
            "SELECT sum(ending IS NULL AND phase = 'open'), "
            "sum(phase = 'pending' OR (phase = 'open' AND ending IS NOT NULL)), "
            "sum(phase = 'done'), (SELECT turns FROM pruned WHERE harness = ?) "
            "FROM turns WHERE harness = ?",
            (harness, harness),
        ).fetchone()
        done = (row[2] or 0) + (row[3] or 0)
        return {"open": row[0] or 0, "undelivered": row[1] or 0, "done": done}


def _abandon_unended(
    db: sqlite3.Connection,
    conversation_id: str,
    error_class: str,
    now: float,
    besides: str | None = None,
) -> list[str]:
    """Mark the session's unended turns (all but ``besides``) abandoned with
    ``error_class``, in ``db``'s open transaction; returns their ids."""
    where = "conversation_id = ? AND ending IS NULL AND turn_id IS NOT ?"
    rows = db.execute(f"SELECT turn_id FROM turns WHERE {where}", (conversation_id, besides))
    abandoned = [str(r[0]) for r in rows]
    db.execute(
        f"UPDATE turns SET ending = 'abandoned', error_class = ?, updated_at = ? WHERE {where}",
        (error_class, now, conversation_id, besides),
    )
    return abandoned


def _settle(db: sqlite3.Connection, conversation_id: str, turn_id: str, now: float) -> None:
    """A turn was closed (in ``db``'s open transaction): drop what it no longer needs,
    then prune the closed turns past their keep."""
    where = " AND conversation_id = ? AND turn_id = ?"
    db.execute(_SETTLE_COMPLETED + where, (conversation_id, turn_id))
    db.execute(_SETTLE_ABANDONED + where, (conversation_id, turn_id))
    db.execute(_DEAD_TOOLS.format(where), (conversation_id, turn_id))
    # The session's closed turns beyond its newest KEEP_PER_SESSION.
    edge = db.execute(
        "SELECT seq FROM turns WHERE conversation_id = ? AND phase = 'done' "
        "ORDER BY seq DESC LIMIT 1 OFFSET ?",
        (conversation_id, KEEP_PER_SESSION),
    ).fetchone()
    if edge is not None:
        _delete(
            db, "conversation_id = ? AND phase = 'done' AND seq <= ?", (conversation_id, edge[0])
        )
    _sweep(db, now)


def _sweep(db: sqlite3.Connection, now: float) -> None:
    """Every session's closed turns: an abandoned one's late-Stop payload past its window,
    and the rows past :data:`KEEP_SECONDS` (both read from the ``turns_done`` index)."""
    late = (
        "phase = 'done' AND updated_at < ? AND "
        "(user_message_id IS NOT NULL OR reply IS NOT NULL OR retrieved_ids IS NOT NULL)"
    )
    cutoff = now - LATE_STOP_WINDOW
    db.execute(
        "DELETE FROM tools WHERE (conversation_id, turn_id) IN (SELECT conversation_id, "
        f"turn_id FROM turns WHERE {late})",
        (cutoff,),
    )
    db.execute(
        f"UPDATE turns SET reply = NULL, retrieved_ids = NULL, user_message_id = NULL WHERE {late}",
        (cutoff,),
    )
    _delete(db, "phase = 'done' AND updated_at < ?", (now - KEEP_SECONDS,))


def _delete(db: sqlite3.Connection, where: str, params: tuple[Any, ...]) -> None:
    """Delete the closed turns ``where`` says (and their calls), counting them per harness."""
    counted = db.execute(
        f"SELECT harness, count(*) FROM turns WHERE {where} GROUP BY harness", params
    ).fetchall()
    if not counted:
        return
    db.execute(
        "DELETE FROM tools WHERE (conversation_id, turn_id) IN "
        f"(SELECT conversation_id, turn_id FROM turns WHERE {where})",
        params,
    )
    db.execute(f"DELETE FROM turns WHERE {where}", params)
    db.executemany(
        "INSERT INTO pruned (harness, turns) VALUES (?, ?) "
        "ON CONFLICT (harness) DO UPDATE SET turns = turns + excluded.turns",
        counted,
    )
