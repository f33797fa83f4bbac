"""``GET /recent_conversations`` and ``GET /recent_conversations/{id}`` on the embedded store.

The real server's shapes (reference/neotoma-semantics.md §10, recordings m1–m4): the path
parameter is the conversation's **entity id** (its ``conversation_id`` field, a message id or
an unknown id answer 404); the messages PART_OF it come back ordered by activity time
ascending (the latest of last observation, update and creation), each with its non-PART_OF
edges under ``related_entities``. Messages of the same millisecond come by turn (the order
the turns' first messages were written) and role (the prompt before its reply): a real
server breaks that tie by message id, a hash, so a turn's two stores landing in one
millisecond could put the reply before its prompt.

An extension a real server ignores: ``limit`` (1–1000) and ``before`` (a message id of the
conversation) read only the last ``limit`` messages in the order their PART_OF edge was
first written (the ``conversation_messages`` index, one range scan however long the
conversation), before ``before`` when given. Such a page adds ``has_more``, each message's
``turn_number``, ``turn_records``: the snapshots of the ``conversation_turn`` records
of the page's turns (identified, as Neotoma identifies them, by the conversation's id and
the turn id in the message's ``turn_key``), and, when there are any, ``tool_calls``: the
snapshots of the ``tool_invocation`` entities those records REFER_TO, packed one row per
call (:mod:`neotoma_agent.transport._packed_calls`), so that a reader of history needs one
request.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._neotoma.identity import resolve_identity_cached
from ..._neotoma.js import js_trim
from .._packed_calls import TOOL_CALLS, pack_tool_calls
from . import _scope
from ._errors import invalid_format, not_found
from ._page_rows import decode_fields, message_fields, turn_record
from ._rows import LIVE, decode_entity, decode_time, encode_entity
from ._summaries import SUMMARIES_ROUTE, conversation_summaries
from ._validate import bounded_int

__all__ = ["MAX_PAGE", "READS", "recent_conversation", "recent_conversations", "route"]

#: the most messages one extended page may ask for
MAX_PAGE = 1000
_ASSISTANT_SUFFIX = ":assistant"
_MESSAGE_COLUMNS = (
    "id, canonical_name, created_at, updated_at, last_observation_at, "
    "json_extract(snapshot, '$.f'), json_extract(snapshot, '$.d')"
)


def _activity(
    created: str | int | None, updated: str | int | None, observed: str | int | None
) -> str:
    """The latest of an entity row's times (as stored: ``_rows.encode_time``), as text."""
    if type(created) is int and type(updated) is int and type(observed) in (int, type(None)):
        # Times stored as epoch milliseconds order as their text does: decode one of them.
        return decode_time(max(created, updated, observed or created))
    return max(decode_time(t) for t in (created, updated, observed, "") if t is not None)


def _display(fields: Mapping[str, Any], fallback: str | None) -> str | None:
    for key in ("title", "name", "full_name"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return fallback


def _related(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    # Each message's outbound edges but PART_OF, with the far end's type and names.
    rows = conn.execute(
        "SELECT r.source_entity_id, r.relationship_type, r.target_entity_id, e.entity_type, "
        "e.canonical_name, json_extract(e.snapshot, '$.f') FROM relationships r "
        "JOIN entities e ON e.id = r.target_entity_id "
        "WHERE r.source_entity_id IN (SELECT value FROM json_each(?)) "
        f"AND r.relationship_type != 'PART_OF' AND {LIVE} "  # a deleted end is not listed
        f"AND {_scope.owned('e')} AND {_scope.owned('r')} "
        "ORDER BY r.source_entity_id, r.relationship_type, r.target_entity_id",
        (json.dumps(list(ids)),),
    ).fetchall()
    out: dict[str, list[dict[str, Any]]] = {}
    for src, rtype, dst, etype, canonical, fields in rows:
        snapshot = decode_fields(fields)
        out.setdefault(src, []).append(
            {
                "entity_id": dst,
                "entity_type": etype,
                "canonical_name": canonical,
                "title": _display(snapshot, canonical),
                "relationship_type": rtype,
            }
        )
    return out


def _messages(
    conn: sqlite3.Connection, ids: Sequence[str], *, extended: bool
) -> list[dict[str, Any]]:
    """The message items of ``ids`` (deleted or non-message entities left out), by id."""
    rows = conn.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM entities WHERE {_scope.owned(index=True)} "
        "AND entity_type = 'conversation_message' AND id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)),),
    ).fetchall()
    related = _related(conn, [r[0] for r in rows])
    items = []
    for mid, canonical, created, updated, observed, fields, deleted in rows:
        if deleted:
            continue
        role, sender_kind, content, turn_key, turn_number = message_fields(fields)
        if not extended and isinstance(content, str):
            content = js_trim(content)  # as a real server's route gives it: trimmed
        item: dict[str, Any] = {
            "message_id": mid,
            "canonical_name": canonical,
            "role": role,
            "sender_kind": sender_kind,
            "content": content,
            "turn_key": turn_key,
            "activity_at": _activity(created, updated, observed),
            "related_entities": related.get(mid, []),
            "hook_summary": None,
        }
        if extended:
            item["turn_number"] = turn_number
        items.append(item)
    return items


def _conversation(conn: sqlite3.Connection, entity_id: object) -> tuple[Any, ...]:
    if not isinstance(entity_id, str) or not entity_id:
        raise not_found("Conversation not found")
    row = conn.execute(
        "SELECT id, canonical_name, created_at, updated_at, last_observation_at, "
        "json_extract(snapshot, '$.f'), json_extract(snapshot, '$.d'), message_count "
        f"FROM entities WHERE id = ? AND entity_type = 'conversation' AND {_scope.owned()}",
        (entity_id,),
    ).fetchone()
    if row is None or row[6]:
        raise not_found("Conversation not found")
    return tuple(row)


def _item(
    row: Sequence[Any], messages: list[dict[str, Any]], snapshot: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The conversation's item (``snapshot``: its fields, when the caller decoded them)."""
    cid, canonical, created, updated, observed, fields, _deleted, count = row
    if snapshot is None:
        snapshot = decode_fields(fields)
    latest = max((m["activity_at"] for m in messages), default="")
    title = snapshot.get("title")
    return {
        "conversation_id": cid,
        "canonical_name": canonical,
        "title": title if isinstance(title, str) else None,
        "activity_at": latest or _activity(created, updated, observed),
        "message_count": count,
        "latest_write_provenance": None,
        "messages": messages,
    }


def _all_messages(conn: sqlite3.Connection, conversation_id: str) -> list[dict[str, Any]]:
    ids = [
        decode_entity(r[0])
        for r in conn.execute(
            "SELECT message_id FROM conversation_messages WHERE conversation_id = ? ORDER BY seq",
            (encode_entity(conversation_id),),
        )
    ]
    return _in_activity_order(_messages(conn, ids, extended=False), ids)


def _in_activity_order(messages: list[dict[str, Any]], written: list[str]) -> list[dict[str, Any]]:
    """``messages`` by activity time; within a millisecond by turn, then the prompt first.

    ``written``: the message ids in the order their PART_OF edges were written; a turn's
    place is its first message's.
    """
    place = {mid: n for n, mid in enumerate(written)}
    turns: dict[str, int] = {}

    def key(m: dict[str, Any]) -> tuple[str, int, bool, int]:
        at = place.get(m["message_id"], len(place))
        turn_key = m["turn_key"]
        turn = turn_key.removesuffix(_ASSISTANT_SUFFIX) if isinstance(turn_key, str) else None
        first = at if turn is None else turns.setdefault(turn, at)
        return (m["activity_at"], first, m["role"] != "user", at)

    # Each turn's place is set by its first message in write order, before any key is read.
    by_place = sorted(messages, key=lambda m: place.get(m["message_id"], len(place)))
    keys = {id(m): key(m) for m in by_place}
    return sorted(by_place, key=lambda m: keys[id(m)])


@functools.lru_cache(maxsize=4096)
def _turn_record_id(session: str, turn_id: str, tenant: str | None) -> str:
    # Memoised: a turn's record is on the history page of each of the next few turns.
    fields = {"session_id": session, "turn_id": turn_id}
    return resolve_identity_cached("conversation_turn", fields).in_tenant(tenant).entity_id


def _turn_records(
    conn: sqlite3.Connection, conversation_fields: Mapping[str, Any], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The snapshots of the turn records of ``messages``' turns, in message order."""
    session = conversation_fields.get("conversation_id") or conversation_fields.get("session_id")
    if not isinstance(session, str) or not session:
        return []
    prefix = f"{session}:"
    turn_ids: dict[str, None] = {}
    for message in messages:
        key = message.get("turn_key")
        if isinstance(key, str) and key.startswith(prefix):
            turn_ids[key[len(prefix) :].removesuffix(_ASSISTANT_SUFFIX)] = None
    tenant = _scope.tenant()
    wanted = {_turn_record_id(session, turn_id, tenant): None for turn_id in turn_ids if turn_id}
    rows = conn.execute(
        "SELECT id, entity_type, snapshot, observation_count, last_observation_at FROM entities "
        f"WHERE {_scope.owned(index=True)} AND entity_type = 'conversation_turn' "
        "AND id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(wanted)),),
    ).fetchall()
    found = {}
    for rid, etype, snapshot, count, observed in rows:
        record = turn_record(rid, etype, snapshot, count, observed)
        if record is not None:
            found[rid] = record
    return [found[r] for r in wanted if r in found]


def _tool_calls(conn: sqlite3.Connection, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The snapshots of the ``tool_invocation`` entities ``records`` REFER_TO: the fields a
    history reader shows (name, status, duration, time, turn key), without the per-field
    provenance."""
    ids = [r["entity_id"] for r in records if r["snapshot"].get("tool_invocation_count")]
    if not ids:
        return []
    rows = conn.execute(
        "SELECT e.id, e.entity_type, e.snapshot, e.observation_count, e.last_observation_at "
        "FROM relationships r JOIN entities e ON e.id = r.target_entity_id "
        "WHERE r.source_entity_id IN (SELECT value FROM json_each(?)) "
        "AND r.relationship_type = 'REFERS_TO' AND e.entity_type = 'tool_invocation' "
        f"AND {_scope.owned('e')} AND {_scope.owned('r')} ORDER BY e.id",
        (json.dumps(ids),),
    ).fetchall()
    calls = (
        turn_record(rid, etype, snap, count, observed) for rid, etype, snap, count, observed in rows
    )
    return [c for c in calls if c is not None]


def recent_conversation(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /recent_conversations/{entity_id}`` (``body``: the id and the query options)."""
    row = _conversation(conn, body.get("entity_id"))
    limit, before = body.get("limit"), body.get("before")
    if limit is None and before is None:
        return _item(row, _all_messages(conn, row[0]))
    limit = MAX_PAGE if limit is None else bounded_int(limit, "limit", 1, MAX_PAGE)
    bound = 2**62
    if before is not None:
        if not isinstance(before, str):
            raise invalid_format("before must be a message id", ["before"])
        seq = conn.execute(
            "SELECT seq FROM conversation_messages WHERE conversation_id = ? AND message_id = ?",
            (encode_entity(row[0]), encode_entity(before)),
        ).fetchone()
        # A message not (yet) in the conversation is after all of it.
        bound = bound if seq is None else int(seq[0])
    page = conn.execute(
        "SELECT message_id FROM conversation_messages WHERE conversation_id = ? AND seq < ? "
        "ORDER BY seq DESC LIMIT ?",
        (encode_entity(row[0]), bound, limit + 1),
    ).fetchall()
    ids = [decode_entity(r[0]) for r in reversed(page[:limit])]
    by_id = {m["message_id"]: m for m in _messages(conn, ids, extended=True)}
    messages = [by_id[i] for i in ids if i in by_id]
    fields = decode_fields(row[5])
    item = _item(row, messages, fields)
    item["has_more"] = len(page) > limit
    records = item["turn_records"] = _turn_records(conn, fields, messages)
    calls = _tool_calls(conn, records)
    if calls:  # only then: a page without calls answers as before tool calls were stored
        # Packed (one row per call): each call rides on the next few turns' pages.
        item[TOOL_CALLS] = pack_tool_calls(calls)
    return item


def recent_conversations(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /recent_conversations``: conversations, most recently active first, paged."""
    limit = bounded_int(body.get("limit", 25), "limit", 1, 100)
    offset = bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    after, before = body.get("activity_after"), body.get("activity_before")
    for name, value in (("activity_after", after), ("activity_before", before)):
        if value is not None and not isinstance(value, str):
            raise invalid_format(f"{name} must be an ISO timestamp", [name])
    rows = conn.execute(
        "SELECT id, canonical_name, created_at, updated_at, last_observation_at, "
        "json_extract(snapshot, '$.f'), json_extract(snapshot, '$.d'), message_count "
        f"FROM entities WHERE {_scope.owned(index=True)} AND entity_type = 'conversation'"
    ).fetchall()
    items = []
    for row in rows:
        if row[6]:
            continue
        item = _item(row, _all_messages(conn, row[0]))
        activity = item["activity_at"]
        if (after is not None and activity <= after) or (before is not None and activity >= before):
            continue
        items.append(item)
    items.sort(key=lambda i: (i["activity_at"], i["conversation_id"]), reverse=True)
    page = items[offset : offset + limit]
    return {
        "items": page,
        "has_more": offset + limit < len(items),
        "limit": limit,
        "offset": offset,
    }


_LIST = "/recent_conversations"
Read = Callable[[sqlite3.Connection, Mapping[str, Any]], dict[str, Any]]
#: this module's actions (all read-only)
READS: frozenset[Read] = frozenset(
    (recent_conversation, recent_conversations, conversation_summaries)
)


def route(path: str, query: Mapping[str, Any]) -> tuple[Read, dict[str, Any]]:
    """The action and body of ``GET {path}``; :class:`ValueError` for another path."""
    if path == _LIST:
        return recent_conversations, dict(query)
    if path == SUMMARIES_ROUTE:
        return conversation_summaries, dict(query)
    head, sep, tail = path.rpartition("/")
    if head == _LIST and sep and tail:
        return recent_conversation, {**query, "entity_id": urllib.parse.unquote(tail)}
    raise ValueError(f"unknown route GET {path}")
