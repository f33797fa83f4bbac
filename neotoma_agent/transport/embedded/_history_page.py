"""A history page on the embedded store: two SQL statements, whatever the length.

``GET /recent_conversations/{id}?limit=&before=`` (the paging extension that
:mod:`._conversations` describes) is what every turn's enter reads: the last ``limit``
messages of a conversation before a message, each with its edges, the records of their
turns and the tool calls those records REFER_TO. :func:`history_page` reads it in two
statements, every part a seek of an index:

1. the page (``_PAGE_SQL``): the conversation's row by id; the last ``limit`` rows of the
   conversation index before ``before``'s place (a range of its primary key) and whether
   one more precedes them (``has_more``); each message's row by its rowid (the index
   holds the entity rows' numbers, ``_conversation_index``), its snapshot as
   stored (decoded in Python once per stored state, :func:`._page_rows.page_entry`); each
   message's edges but PART_OF (the edges' primary key, led by the source);
2. the records (``_RECORDS_SQL``): each turn record of the page's turns, by the id the
   identity rules derive from the conversation's id and the turn id in a message's
   ``turn_key`` (memoised: a record is on the page of the next few turns), and the
   ``tool_invocation`` entities those records REFER_TO.

Rows of each kind come back tagged, in one result per statement; the answer is the one
the seven statements before these built, field for field
(``tests/transport/embedded/test_history_page.py`` checks it against the generic reads).
:func:`history_page` is a function of the connection (``fn(conn, body)``, as every
action): a job of the store's thread may call it beside others.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any, Final

from .._packed_calls import TOOL_CALLS, pack_tool_calls
from . import _scope
from ._close_row import CLOSE_SEQ
from ._close_row import at_sql as close_at_sql
from ._codec import fields_sql
from ._codec import forget as forget_coded
from ._conversation_index import row_of
from ._errors import invalid_format, not_found
from ._id_prefix import id_is
from ._page_rows import (
    conversation_item,
    decode_fields,
    page_entry,
    related_entry,
    turn_record,
)
from ._page_rows import forget as forget_rows
from ._row_metas import ROW_META
from ._rows import FIRST_META, LIVE, SEQ_META, encode_entity, entity_text, owned_entity

__all__ = ["forget", "history_page", "turn_record_id"]

_ASSISTANT_SUFFIX: Final = ":assistant"

# The kinds of the rows the statements answer (their first column).
_CONVERSATION, _MESSAGE, _EDGE, _RECORD, _CALL = range(5)

# The conversation's entity row number, as the conversation index holds it (an uncorrelated
# subquery: SQLite reads it once a statement).
_CONV_ROW: Final = row_of("?2")

# Nine columns after the kind; each part pads with NULLs. ``?1`` the conversation's entity
# id, ``?2`` it as the entity rows store it (``encode_entity``), ``?3`` the ``before``
# message so (NULL: the last message; the index holds their rows' numbers), ``?4``
# the messages to read (``limit``), ``?5`` the running user's number (``_scope.uid``: a
# parameter, not ``current_uid()``, which SQLite would call back into Python for on every
# row it checks).
_PAGE_SQL: Final = f"""
WITH conv AS (
    SELECT ?1 AS id, canonical_name, created_at, updated_at, last_observation_at,
        {fields_sql()} AS f, json_extract(snapshot, '$.d') AS d, message_count
    FROM entities WHERE {id_is("?2")} AND entity_type = 'conversation' AND +uid = ?5
),
page AS (
    SELECT seq, message_row FROM conversation_messages
    WHERE conversation_row = {_CONV_ROW} AND seq < coalesce(
        (SELECT seq FROM conversation_messages
            WHERE conversation_row = {_CONV_ROW} AND message_row = {row_of("?3")}),
        4611686018427387904)
    ORDER BY seq DESC LIMIT ?4
),
msgs AS (
    SELECT page.seq, {entity_text("m.id")} AS id, m.canonical_name, m.created_at,
        m.updated_at, m.last_observation_at, m.snapshot
    FROM page
    CROSS JOIN entities m ON m.rowid = page.message_row
    WHERE m.entity_type = 'conversation_message' AND +m.uid = ?5
)
SELECT {_CONVERSATION}, id, canonical_name, created_at, updated_at, last_observation_at, f, d,
    message_count, EXISTS (SELECT 1 FROM conversation_messages
        WHERE conversation_row = {_CONV_ROW} AND seq < (SELECT min(seq) FROM page)) FROM conv
UNION ALL
SELECT {_MESSAGE}, seq, id, canonical_name, created_at, updated_at, last_observation_at,
    snapshot, NULL, NULL FROM msgs
UNION ALL
SELECT {_EDGE}, r.source_entity_id, r.relationship_type, r.target_entity_id, e.entity_type,
    e.canonical_name, {fields_sql("e.snapshot", "e.canonical_name")}, NULL, NULL, NULL
FROM msgs CROSS JOIN relationships r ON r.source_entity_id = msgs.id
CROSS JOIN entities e ON {id_is("entity_key(r.target_entity_id)", "e.id")}
WHERE r.relationship_type != 'PART_OF' AND {LIVE.replace("snapshot", "e.snapshot")}
    AND +e.uid = ?5 AND +r.uid = ?5
"""

# The turn records of a page (``?1`` the user's number; then each record's id and its id as
# the entity rows hold it, ``encode_entity``, in pairs: a list of values, so that no id is
# packed by a call back into Python for each row), each once with each observation row its
# snapshot may list by seq (its close: ``_row_metas``; its columns as stored, NULLs for a
# record with none: no JSON built for them), the close its row holds as such a row
# (``_close_row``), and the ``tool_invocation`` entities they
# REFER_TO: the second statement, when the page holds turns (a record's id is derived from
# its turn's id, which the first one reads). A call's first observation's id is read as
# stored, not derived (``_first_id``: an empty blob where it is): the page answers a
# call's fields alone (``pack_tool_calls``), never its provenance.
_RECORDS_SQL: Final = f"""
WITH records AS (
    SELECT wanted.column1 AS id, t.rowid AS row, t.entity_type, t.snapshot,
        t.observation_count, t.last_observation_at, t.close_id, {close_at_sql("t")} AS close_at,
        t.first_priority, t.first_osource, t.first_specificity
    FROM (VALUES {{pairs}}) AS wanted CROSS JOIN entities t
        ON {id_is("wanted.column2", "t.id")}
    WHERE t.entity_type = 'conversation_turn' AND +t.uid = ?1
)
SELECT {_RECORD}, records.id, records.entity_type, records.snapshot,
    records.observation_count, records.last_observation_at, o.{ROW_META.replace(", ", ", o.")}
FROM records LEFT JOIN observations o ON o.entity_row = records.row
UNION ALL
SELECT {_RECORD}, id, entity_type, snapshot, observation_count, last_observation_at,
    {CLOSE_SEQ}, close_id, close_at, first_priority, first_osource, first_specificity
FROM records WHERE close_id IS NOT NULL
UNION ALL
SELECT {_CALL}, records.id, r.target_entity_id, e.entity_type, e.snapshot,
    e.observation_count, e.last_observation_at, e.first_id, e.created_at, e.first_priority,
    e.first_osource, e.first_specificity
FROM records CROSS JOIN relationships r
    ON r.source_entity_id = records.id AND r.relationship_type = 'REFERS_TO'
CROSS JOIN entities e ON {id_is("entity_key(r.target_entity_id)", "e.id")}
WHERE e.entity_type = 'tool_invocation' AND +e.uid = ?1 AND +r.uid = ?1
"""


@functools.lru_cache(maxsize=64)
def _records_sql(count: int) -> str:
    """``_RECORDS_SQL`` for ``count`` records (a page holds a few: a few statements)."""
    pairs = ", ".join(f"(?{2 * i + 2}, ?{2 * i + 3})" for i in range(count))
    return _RECORDS_SQL.replace("{pairs}", pairs)


@functools.lru_cache(maxsize=256)
def _session(fields: str | None) -> str | None:
    """The conversation's id as its turns' keys and records name it (its ``conversation_id``,
    else its ``session_id``), from its ``$.f`` text; ``None`` when it has none."""
    decoded = decode_fields(fields)
    session = decoded.get("conversation_id") or decoded.get("session_id")
    return session if isinstance(session, str) and session else None


@functools.lru_cache(maxsize=4096)
def turn_record_id(session: str, turn_id: str, tenant: str | None) -> str:
    """The id of the ``conversation_turn`` record of turn ``turn_id`` (memoised: a turn's
    record is on the page of each of the next few turns)."""
    from ..._neotoma.identity import resolve_identity_cached
    from ..._neotoma.js import js_trim

    fields = {"session_id": session, "turn_id": turn_id}
    if js_trim(session) and js_trim(turn_id):
        # Its schema's rule (session_id + turn_id) decides it whatever else is given: named
        # with the turn_key its turn's store gave it (the ids joined, as the codec derives
        # it), it is the identity that store resolved, memoised already (a hit, not a run
        # of the rules; test_turn_record_id).
        fields["turn_key"] = f"{session}:{turn_id}"
    return resolve_identity_cached("conversation_turn", fields).in_tenant(tenant).entity_id


def _turn_id(session: str | None, turn_key: object) -> str | None:
    """The turn a message's key names in the conversation ``session`` (``None``: none)."""
    if session is None or not isinstance(turn_key, str) or not turn_key.startswith(session):
        return None
    rest = turn_key[len(session) :]
    if rest[:1] != ":":
        return None
    return rest[1:].removesuffix(_ASSISTANT_SUFFIX) or None


def forget() -> None:
    """Empty the page's memos (a store closing: its texts are not kept past it)."""
    _session.cache_clear()
    _record_of.cache_clear()
    forget_rows()
    forget_coded()


def history_page(
    conn: sqlite3.Connection,
    body: Mapping[str, Any],
    typed: list[tuple[Any, ...]] | None = None,
) -> dict[str, Any]:
    """``GET /recent_conversations/{entity_id}`` with ``limit`` (1-1000, checked by the
    caller) and ``before`` (a message id or ``None``): the page, in two statements.
    ``typed``: a list to append each listed message's typed values to
    (``_page_rows.page_entry``), in the page's order.

    Raises the route's errors: 404 for an id that is no conversation of the running user,
    400 for a ``before`` that is not a text."""
    entity_id, limit, before = body.get("entity_id"), body["limit"], body.get("before")
    if not isinstance(entity_id, str) or not entity_id:
        raise not_found("Conversation not found")
    if before is not None and not isinstance(before, str):
        raise invalid_format("before must be a message id", ["before"])
    bound = None if before is None else encode_entity(before)
    uid = _scope.uid()
    rows = conn.execute(_PAGE_SQL, (entity_id, encode_entity(entity_id), bound, limit, uid))
    conversation: tuple[Any, ...] | None = None
    more = 0
    found: list[tuple[Any, ...]] = []
    edges: list[tuple[Any, ...]] = []
    for row in rows:
        kind = row[0]
        if kind == _MESSAGE:
            found.append(row)
        elif kind == _CONVERSATION:
            conversation, more = row[1:9], row[9]
        else:
            edges.append(row)
    if conversation is None or conversation[6]:
        raise not_found("Conversation not found")
    found.sort(key=itemgetter(1))
    related = _related(edges) if edges else {}
    messages = []
    for _, _, mid, canonical, created, updated, observed, snapshot, _, _ in found:
        entry = page_entry(mid, canonical, created, updated, observed, snapshot)
        if entry is not None:
            message = entry[0]
            message["related_entities"] = related.get(mid, [])
            messages.append(message)
            if typed is not None:
                typed.append(entry[1])
    item = conversation_item(conversation, messages, decode_fields(conversation[5]))
    item["has_more"] = bool(more)
    records, tool_calls = _records(conn, uid, _wanted(conversation[5], messages))
    item["turn_records"] = records
    if tool_calls:  # only then: a page without calls answers as before tool calls were stored
        # Packed (one row per call): each call rides on the next few turns' pages.
        item[TOOL_CALLS] = pack_tool_calls(tool_calls)
    return item


def _related(edges: list[tuple[Any, ...]]) -> dict[str, list[dict[str, Any]]]:
    """Each message's edges but PART_OF, with the far end's type and names."""
    out: dict[str, list[dict[str, Any]]] = {}
    for _, src, rtype, dst, etype, canonical, fields, *_ in sorted(edges, key=lambda r: r[1:4]):
        out.setdefault(src, []).append(related_entry(rtype, dst, etype, canonical, fields))
    return out


def _wanted(fields: str | None, messages: list[dict[str, Any]]) -> list[str]:
    """The ids of the turn records of ``messages``' turns, in message order."""
    session = _session(fields)
    if session is None:
        return []
    tenant = _scope.tenant()
    wanted: dict[str, None] = {}
    for message in messages:
        key = message["turn_key"]
        if isinstance(key, str) and (rid := _record_of(session, key, tenant)) is not None:
            wanted[rid] = None
    return list(wanted)


@functools.lru_cache(maxsize=4096)
def _record_of(session: str, turn_key: str, tenant: str | None) -> str | None:
    # The record id of the turn a message's key names (memoised whole: a message is on the
    # page of the next few turns); ``None``: its key names no turn of this conversation.
    turn_id = _turn_id(session, turn_key)
    return None if turn_id is None else turn_record_id(session, turn_id, tenant)


def _first(conn: sqlite3.Connection, entity_id: str) -> Callable[[], tuple[Any, ...]]:
    """What reads a turn record's ``FIRST_META`` columns (and its ``SEQ_META``), when its
    snapshot lists its first observation (an open record: a closed one's close wins every
    field, so a page's statement leaves those columns out)."""
    return lambda: tuple(owned_entity(conn, f"{FIRST_META}, {SEQ_META}", entity_id) or (None,) * 6)


def _records(
    conn: sqlite3.Connection, uid: int, wanted: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The snapshots of the turn records ``wanted`` (in that order), and of the
    ``tool_invocation`` entities those that count calls REFER_TO (by id)."""
    if not wanted:
        return [], []
    found: dict[str, tuple[Any, ...]] = {}
    metas: dict[str, tuple[tuple[Any, ...], ...]] = {}
    calls: list[tuple[Any, ...]] = []
    params: list[Any] = [uid]
    for rid in wanted:
        params += (rid, encode_entity(rid))
    for row in conn.execute(_records_sql(len(wanted)), params):
        if row[0] == _RECORD:
            rid = row[1]
            found[rid] = row
            # (its observation rows' ``ROW_META``: ``_row_metas.row_metas`` takes them so)
            rows = metas.get(rid, ())
            metas[rid] = rows if row[6] is None else (*rows, row[6:12])
        else:
            calls.append(row)
    records = []
    for rid in wanted:
        row = found.get(rid)
        if row is not None:
            first = _first(conn, rid)
            record = turn_record(rid, row[2], row[3], row[4], row[5], first, metas[rid])
            if record is not None:
                records.append(record)
    if not calls:
        return records, []
    counting = {r["entity_id"] for r in records if r["snapshot"].get("tool_invocation_count")}
    kept = sorted((r for r in calls if r[1] in counting), key=lambda r: r[2])
    snapshots = (turn_record(r[2], r[3], r[4], r[5], r[6], r[7:12]) for r in kept)
    return records, [c for c in snapshots if c is not None]
