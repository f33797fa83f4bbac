"""The per-conversation summary: one row per conversation, kept as turns are stored.

``conversation_summaries`` (schema version 5, :mod:`._schema`) holds, for each
conversation, what a list of conversations shows: its ``conversation_id``, title,
platform and last activity (the conversation entity's last observation time, as the
entity row stores it), and how many turn records it has, by status. :func:`summarize` keeps
it: ``_write._observe`` calls it for every observation folded into a ``conversation`` or a
``conversation_turn``, inside the store's own transaction, so the row changes with the
snapshot that changes it or not at all (a crash cannot leave it wrong). A soft deletion
(``forget``) and a restore are observations too, as is an audit's repair of a turn's status:
each moves the counts as it moves the snapshot. :func:`backfill` builds the rows of a file
written before version 5 (the migration runs it).

A turn counts in the conversation its record's ``session_id`` names (the history reader's
rule), by its ``status``: ``completed``, ``abandoned``, ``open``; any other status counts in
``turns`` only. A conversation is listed while its entity exists and is not deleted (the
row's ``live``); turn records stored before their conversation wait in a row that is not.

:func:`conversation_summaries` is the read behind ``GET /conversation_summaries``, an
extension of this store and the dev server (a real Neotoma server answers 404): a page of
conversations, newest activity first, by keyset on (last activity, conversation id) through
a partial index, so a deep page costs what the first one does.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from ..._neotoma.identity import resolve_identity_cached
from ..._records.payloads import stored_platform
from . import _scope
from ._codec import field_sql
from ._codec import install as install_codec
from ._errors import invalid_format
from ._reducer import SnapshotChange
from ._rows import decode_doc_fields, decode_entity, decode_time, encode_opt_time, encode_time
from ._validate import bounded_int

__all__ = [
    "MAX_SUMMARIES",
    "SUMMARIES_ROUTE",
    "SUMMARIZED_TYPES",
    "backfill",
    "conversation_summaries",
    "summarize",
]

#: the entity types whose observations move a summary
SUMMARIZED_TYPES: Final = frozenset(("conversation", "conversation_turn"))
#: the route's path (an extension: a real Neotoma server answers it 404)
SUMMARIES_ROUTE: Final = "/conversation_summaries"
#: the most conversations one page may ask for
MAX_SUMMARIES: Final = 100
#: the statuses counted in columns of their own (a column per status, same name)
_STATUSES: Final = ("completed", "abandoned", "open")
#: what separates the two parts of a cursor (an ISO time never holds it)
_CURSOR_SEP: Final = "|"

_UPSERT_CONVERSATION = (
    "INSERT INTO conversation_summaries (entity_id, live, conversation_id, last_activity, "
    "title, platform) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (entity_id) DO UPDATE SET "
    "live = excluded.live, conversation_id = excluded.conversation_id, "
    "last_activity = excluded.last_activity, title = excluded.title, "
    "platform = excluded.platform"
)
_ADD_TURNS = (
    "INSERT INTO conversation_summaries (entity_id, turns, completed, abandoned, open) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (entity_id) DO UPDATE SET "
    "turns = turns + excluded.turns, completed = completed + excluded.completed, "
    "abandoned = abandoned + excluded.abandoned, open = open + excluded.open"
)
_COLUMNS = (
    "entity_id, conversation_id, title, platform, last_activity, turns, completed, abandoned, open"
)


def _conversation_of(session_id: object) -> str | None:
    """The entity id of the conversation a turn record's ``session_id`` names (the running
    user's)."""
    if not isinstance(session_id, str) or not session_id:
        return None
    return _conversation_id(session_id, _scope.tenant())


@functools.lru_cache(maxsize=1024)  # a turn record is placed twice a turn, by the same id
def _conversation_id(session_id: str, tenant: str | None) -> str:
    identity = resolve_identity_cached("conversation", {"conversation_id": session_id})
    return identity.in_tenant(tenant).entity_id


def _upsert(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> None:
    """Run one of the upserts for the running user: a row of another user than the local
    dev user (the column's default, and all a file had before users) names it."""
    uid = _scope.uid()
    if uid:
        sql = sql.replace("conversation_summaries (", "conversation_summaries (uid, ", 1)
        sql, params = sql.replace("VALUES (", "VALUES (?, ", 1), (uid, *params)
    conn.execute(sql, params)


def _turn_place(fields: Mapping[str, Any], deleted: bool) -> tuple[str, object] | None:
    """Where a turn record counts: its conversation and status (``None``: nowhere)."""
    if deleted:
        return None
    conversation = _conversation_of(fields.get("session_id"))
    return None if conversation is None else (conversation, fields.get("status"))


def _add_turn(conn: sqlite3.Connection, conversation: str, status: object, step: int) -> None:
    counts = [step if status == s else 0 for s in _STATUSES]
    _upsert(conn, _ADD_TURNS, (conversation, step, *counts))


def _move_turn(conn: sqlite3.Connection, conversation: str, before: object, after: object) -> None:
    """A turn of ``conversation`` from status ``before`` to ``after``: one upsert, whose
    row ends as the two of :func:`_add_turn` (-1, then +1) leave it."""
    counts = [(after == s) - (before == s) for s in _STATUSES]
    _upsert(conn, _ADD_TURNS, (conversation, 0, *counts))


def _conversation_row(
    entity_id: str, fields: Mapping[str, Any], deleted: bool, last: str | int | None
) -> tuple[Any, ...]:
    cid = fields.get("conversation_id") or fields.get("session_id")
    title = fields.get("title")
    return (
        entity_id,
        0 if deleted else 1,
        str(cid) if cid is not None else entity_id,
        last,
        title if isinstance(title, str) else None,
        stored_platform(fields),
    )


def summarize(conn: sqlite3.Connection, change: SnapshotChange) -> None:
    """Move the summary as one observation moved an entity's snapshot (``change``): a
    conversation's own row, or a turn's count."""
    if change.entity_type == "conversation":
        last = encode_opt_time(change.last_observation_at)
        row = _conversation_row(change.entity_id, change.fields, change.deleted, last)
        _upsert(conn, _UPSERT_CONVERSATION, row)
        return
    before = _turn_place(change.old_fields, change.old_deleted) if change.old_fields else None
    after = _turn_place(change.fields, change.deleted)
    if before == after:
        return
    if before is not None and after is not None and before[0] == after[0]:
        _move_turn(conn, before[0], before[1], after[1])  # a close: its status moves
        return
    if before is not None:
        _add_turn(conn, before[0], before[1], -1)
    if after is not None:
        _add_turn(conn, after[0], after[1], 1)


def backfill(conn: sqlite3.Connection) -> None:
    """The summary rows of a store written before them (the version-5 migration).

    Conversations are decoded row by row (few); turn records are counted by SQL, grouped by
    the two fields that place them, and placed as :func:`summarize` places one.
    """
    from ._scan import keyset_rows  # a migration's: never a hook's (see there)

    conversations = keyset_rows(
        conn,
        "SELECT id, snapshot, last_observation_at FROM entities "
        "WHERE entity_type = 'conversation' AND id > ? ORDER BY id LIMIT ?",
        "",
    )
    for entity_id, doc, observed in conversations:
        fields, deleted = decode_doc_fields(doc)
        conn.execute(
            _UPSERT_CONVERSATION,
            _conversation_row(decode_entity(entity_id), fields, deleted, observed),
        )
    install_codec(conn)  # a migration's connection: before ``_rows.install``
    groups = conn.execute(
        f"SELECT {field_sql('session_id')}, {field_sql('status')}, "
        "count(*) FROM entities WHERE entity_type = 'conversation_turn' "
        "AND json_extract(snapshot, '$.d') IS NULL AND "
        f"{field_sql('session_id', fn='json_type')} = 'text' GROUP BY 1, 2"
    ).fetchall()
    for session_id, status, n in groups:
        place = _turn_place({"session_id": session_id, "status": status}, False)
        if place is not None:
            _add_turn(conn, place[0], place[1], int(n))


def _cursor(last_activity: str | int, conversation_id: str) -> str:
    return f"{decode_time(last_activity)}{_CURSOR_SEP}{conversation_id}"


def _after(cursor: object) -> tuple[str | int, str]:
    if not isinstance(cursor, str) or _CURSOR_SEP not in cursor:
        raise invalid_format("after must be a cursor this route returned", ["after"])
    when, _, conversation_id = cursor.partition(_CURSOR_SEP)
    return encode_time(when), conversation_id


def _item(row: tuple[Any, ...]) -> dict[str, Any]:
    entity_id, cid, title, platform, last, turns, completed, abandoned, open_ = row
    return {
        "conversation_id": cid,
        "entity_id": entity_id,
        "title": title,
        "platform": platform,
        "last_activity": None if last is None else decode_time(last),
        "turns": turns,
        "completed": completed,
        "abandoned": abandoned,
        "open": open_,
    }


def conversation_summaries(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /conversation_summaries``: ``limit`` (1–100, default 25) conversations after
    the cursor ``after`` (a ``next`` this route returned), most recent activity first."""
    limit = bounded_int(body.get("limit", 25), "limit", 1, MAX_SUMMARIES)
    cursor = body.get("after")
    # The partial index's order, walked from the cursor: one seek, ``limit`` rows.
    mine = _scope.owned(index=True)
    sql = f"SELECT {_COLUMNS} FROM conversation_summaries WHERE {mine} AND live = 1"
    params: list[Any] = []
    if cursor is not None:
        sql += " AND (last_activity, conversation_id) < (?, ?)"
        params.extend(_after(cursor))
    sql += " ORDER BY last_activity DESC, conversation_id DESC LIMIT ?"
    rows = conn.execute(sql, (*params, limit + 1)).fetchall()
    total = conn.execute(
        f"SELECT count(*) FROM conversation_summaries WHERE {_scope.owned(index=True)} AND live = 1"
    ).fetchone()
    page = [tuple(r) for r in rows[:limit]]
    more = len(rows) > limit
    return {
        "items": [_item(r) for r in page],
        "total": int(total[0]),
        "limit": limit,
        "next": _cursor(page[-1][4], page[-1][1]) if more and page else None,
    }
