"""PART_OF edges derived from the conversation index (schema version 10).

A message's PART_OF edge to its conversation, written by the store that created the
message (at the message's time, without metadata), is the message's row in
``conversation_messages`` (``_conversation_index``) and nothing else: no ``relationships``
row. Its snapshot is fixed by that row: metadata and provenance empty, one observation
(the relationship observation's hash of the same inputs, the source being the message's
first observation's), last observed at the message's ``created_at``, the message's user's. An
edge written otherwise (a later ``create_relationship``, with metadata, to a target not
yet a conversation) keeps its row, and a row always wins over the derived edge of the
same pair: a second observation of a derived edge writes its row (both observations).

:func:`edges` is every read's source of edges: the rows, and the derived edges of the
index rows without one, with the same columns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from ..._neotoma.identity import hash_uuid
from . import _scope
from ._conversation_index import row_of
from ._edge_json import REL_COLUMNS
from ._id_prefix import id_is
from ._rows import decode_id, encode_entity, encode_seen, entity_text

__all__ = ["DERIVED", "derived_seen_of", "edges", "observation_id", "pair"]

_CONVERSATION: Final = entity_text("c.id")
_MESSAGE: Final = entity_text("m.id")

#: the relationship type the conversation index holds
DERIVED: Final = "PART_OF"

# The derived edges of the index rows a WHERE picks (``cm``), as ``REL_COLUMNS, uid``: the
# message's row gives its id, time and user, the conversation's row its id (both by rowid,
# ``_conversation_index``); an edge with a row of its own is the row's.
_DERIVED_SQL: Final = (
    f"SELECT {_MESSAGE}, '{DERIVED}', {_CONVERSATION}, '{{}}', '{{}}', 1, m.created_at, NULL, "
    "m.uid FROM conversation_messages cm CROSS JOIN entities m ON m.rowid = cm.message_row "
    "CROSS JOIN entities c ON c.rowid = cm.conversation_row "
    "WHERE {where} AND NOT EXISTS (SELECT 1 FROM relationships r "
    f"WHERE r.source_entity_id = {_MESSAGE} AND r.relationship_type = '{DERIVED}' "
    f"AND r.target_entity_id = {_CONVERSATION})"
)


def observation_id(source_id: str | None, message_id: str, conversation_id: str) -> str:
    """The id of a derived edge's one observation: ``_edges.relate``'s hash of its inputs
    (the message's first observation's source, the edge's key, no metadata)."""
    return hash_uuid(f"{source_id}:{DERIVED}:{message_id}:{conversation_id}:{{}}")


def derived_seen_of(
    source: str | bytes | None, message_id: str, conversation_id: str
) -> str | bytes:
    """The ``seen`` column a derived edge's row would hold (its one observation), from the
    message's first observation's ``source_id`` as stored."""
    return encode_seen([observation_id(decode_id(source), message_id, conversation_id)])


def edges(
    *,
    source: str | None = None,
    target: str | None = None,
    rtypes: Sequence[str] | None = None,
    scoped: bool = True,
) -> tuple[str, list[Any]]:
    """A subquery of the edges from ``source``, to ``target``, of ``rtypes`` (None: any),
    the running user's (``scoped``), with the columns ``REL_COLUMNS, uid``; and its
    parameters. The rows and the derived edges; no order."""
    row_where: list[str] = []
    row_params: list[Any] = []
    cm_where: list[str] = []
    cm_params: list[Any] = []
    if source is not None:
        row_where.append("source_entity_id = ?")
        row_params.append(source)
        cm_where.append(f"cm.message_row = {row_of('?')}")
        cm_params.append(encode_entity(source))
    if target is not None:
        row_where.append("target_entity_id = ?")
        row_params.append(target)
        cm_where.append(f"cm.conversation_row = {row_of('?')}")
        cm_params.append(encode_entity(target))
    if rtypes:
        row_where.append(f"relationship_type IN ({','.join('?' * len(rtypes))})")
        row_params.extend(rtypes)
    if scoped:
        row_where.append(_scope.owned())
        cm_where.append(_scope.owned("m"))
    rows = f"SELECT {REL_COLUMNS}, uid FROM relationships"
    if row_where:
        rows += f" WHERE {' AND '.join(row_where)}"
    if rtypes and DERIVED not in rtypes:
        return rows, row_params
    derived = _DERIVED_SQL.replace("{where}", " AND ".join(cm_where) or "1")
    return f"{rows} UNION ALL {derived}", [*row_params, *cm_params]


def pair(
    conn: sqlite3.Connection, message_id: str, conversation_id: str
) -> tuple[int, Any, str] | None:
    """The derived edge from ``message_id`` to ``conversation_id``, if the index holds it
    without a row: its user, its time as stored and its observation's id."""
    found = conn.execute(
        f"SELECT m.uid, m.created_at, CASE WHEN m.first_id IS NOT NULL THEN m.first_source "
        f"ELSE (SELECT o.source_id FROM observations o "
        f"WHERE o.entity_row = m.rowid ORDER BY o.seq LIMIT 1) END "
        f"FROM entities m CROSS JOIN conversation_messages cm ON cm.message_row = m.rowid "
        f"WHERE {id_is('?2', 'm.id')} AND cm.conversation_row = {row_of('?3')} AND NOT EXISTS "
        f"(SELECT 1 FROM relationships r WHERE r.source_entity_id = ?1 "
        f"AND r.relationship_type = '{DERIVED}' AND r.target_entity_id = ?4)",
        (message_id, encode_entity(message_id), encode_entity(conversation_id), conversation_id),
    ).fetchone()
    if found is None:
        return None
    obs = observation_id(decode_id(found[2]), message_id, conversation_id)
    return int(found[0]), found[1], obs
