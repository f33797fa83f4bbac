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

import json
import sqlite3
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._neotoma.js import js_trim
from ...exceptions import ValidationError
from . import _scope
from ._codec import fields_sql
from ._conversation_index import row_of
from ._errors import invalid_format, not_found
from ._history_page import history_page
from ._id_prefix import id_is, ids_in
from ._page_rows import activity, conversation_item, message_fields, related_entry
from ._rows import LIVE, decode_entity, encode_entity, entity_text
from ._summaries import SUMMARIES_ROUTE, conversation_summaries
from ._type_index import of_type
from ._type_prefix import id_order
from ._validate import bounded_int

__all__ = ["MAX_PAGE", "READS", "recent_conversation", "recent_conversations", "route"]

#: the most messages one extended page may ask for
MAX_PAGE = 1000
_ASSISTANT_SUFFIX = ":assistant"
_MESSAGE_COLUMNS = (
    f"{entity_text('id')}, canonical_name, created_at, updated_at, last_observation_at, "
    f"{fields_sql()}, json_extract(snapshot, '$.d')"
)


def _related(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    # Each message's outbound edges but PART_OF, with the far end's type and names.
    rows = conn.execute(
        "SELECT r.source_entity_id, r.relationship_type, r.target_entity_id, e.entity_type, "
        f"e.canonical_name, {fields_sql('e.snapshot', 'e.canonical_name')} FROM relationships r "
        f"JOIN entities e ON {id_is('entity_key(r.target_entity_id)', 'e.id')} "
        "WHERE r.source_entity_id IN (SELECT value FROM json_each(?)) "
        f"AND r.relationship_type != 'PART_OF' AND {LIVE} "  # a deleted end is not listed
        f"AND {_scope.owned('e')} AND {_scope.owned('r')} "
        "ORDER BY r.source_entity_id, r.relationship_type, r.target_entity_id",
        (json.dumps(list(ids)),),
    ).fetchall()
    out: dict[str, list[dict[str, Any]]] = {}
    for src, rtype, dst, etype, canonical, fields in rows:
        out.setdefault(src, []).append(related_entry(rtype, dst, etype, canonical, fields))
    return out


def _messages(
    conn: sqlite3.Connection, ids: Sequence[str], *, extended: bool
) -> list[dict[str, Any]]:
    """The message items of ``ids`` (deleted or non-message entities left out), by id."""
    rows = conn.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM entities WHERE {_scope.owned(index=True)} "
        f"AND {of_type('conversation_message')} "
        f"AND {ids_in('?1')}",
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
            "activity_at": activity(created, updated, observed),
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
        f"SELECT {entity_text('id')}, canonical_name, created_at, updated_at, "
        f"last_observation_at, {fields_sql()}, json_extract(snapshot, '$.d'), "
        "message_count "
        f"FROM entities WHERE {id_is('?1')} AND entity_type = 'conversation' "
        f"AND {_scope.owned()}",
        (encode_entity(entity_id),),
    ).fetchone()
    if row is None or row[6]:
        raise not_found("Conversation not found")
    return tuple(row)


def _all_messages(conn: sqlite3.Connection, conversation_id: str) -> list[dict[str, Any]]:
    ids = [
        decode_entity(r[0])
        for r in conn.execute(
            "SELECT m.id FROM conversation_messages cm CROSS JOIN entities m "
            f"ON m.rowid = cm.message_row WHERE cm.conversation_row = {row_of('?')} "
            "ORDER BY cm.seq",
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


def recent_conversation(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /recent_conversations/{entity_id}`` (``body``: the id and the query options)."""
    limit, before = body.get("limit"), body.get("before")
    if limit is None and before is None:
        row = _conversation(conn, body.get("entity_id"))
        return conversation_item(row, _all_messages(conn, row[0]))
    try:
        limit = MAX_PAGE if limit is None else bounded_int(limit, "limit", 1, MAX_PAGE)
        if before is not None and not isinstance(before, str):
            raise invalid_format("before must be a message id", ["before"])
    except ValidationError:
        _conversation(conn, body.get("entity_id"))  # a conversation not found answers 404 first
        raise
    return history_page(conn, {**body, "limit": limit})


def recent_conversations(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /recent_conversations``: conversations, most recently active first, paged."""
    limit = bounded_int(body.get("limit", 25), "limit", 1, 100)
    offset = bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    after, before = body.get("activity_after"), body.get("activity_before")
    for name, value in (("activity_after", after), ("activity_before", before)):
        if value is not None and not isinstance(value, str):
            raise invalid_format(f"{name} must be an ISO timestamp", [name])
    rows = conn.execute(
        f"SELECT {entity_text('id')}, canonical_name, created_at, updated_at, "
        f"last_observation_at, {fields_sql()}, json_extract(snapshot, '$.d'), "
        "message_count "
        f"FROM entities WHERE {_scope.owned(index=True)} AND {of_type('conversation')} "
        f"ORDER BY {id_order()}"  # (the type index's order, as a sort's ties keep it)
    ).fetchall()
    items = []
    for row in rows:
        if row[6]:
            continue
        item = conversation_item(row, _all_messages(conn, row[0]))
        at = item["activity_at"]
        if (after is not None and at <= after) or (before is not None and at >= before):
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
