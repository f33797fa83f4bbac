"""Relationships: observing an edge, the two create actions, and the related-entities walk."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from ..._neotoma.identity import (
    hash_uuid,
    js_json,
)
from . import _scope
from ._conversation_index import row_of
from ._edge_json import REL_COLUMNS, relationship_json, relationship_row_json
from ._errors import (
    invalid_format,
    not_found,
    now_iso,
)
from ._id_prefix import id_is, ids_in, one_row
from ._part_of import DERIVED, pair
from ._part_of import edges as edge_rows
from ._rows import (
    decode_seen,
    decode_time,
    dumps,
    dumps_acyclic,
    encode_entity,
    encode_seen,
    encode_time,
    entity_json,
)
from ._validate import check_relationship

__all__ = [
    "create_relationship",
    "create_relationships",
    "index_message",
    "relate",
    "retrieve_related_entities",
]


def _entity_type_of(
    conn: sqlite3.Connection, entity_id: str, known: Mapping[str, str]
) -> str | None:
    if entity_id in known:
        return known[entity_id]
    row = conn.execute(
        f"SELECT entity_type FROM entities WHERE {id_is('?1')} AND {_scope.owned()}",
        (encode_entity(entity_id),),
    ).fetchone()
    return str(row[0]) if row else None


def relate(
    conn: sqlite3.Connection,
    rtype: str,
    src: str,
    dst: str,
    metadata: Mapping[str, Any],
    source_id: str | None,
    now: str,
    known_types: Mapping[str, str],
    counts: dict[str, int] | None = None,
    fresh: AbstractSet[str] = frozenset(),
) -> dict[str, Any]:
    """Observe one edge: one row per key, duplicates collapse, metadata last-write.

    ``counts`` collects the new message count of a conversation gaining a message;
    ``fresh``: the entities this store created (from ``source_id``, at ``now``), whose
    PART_OF edge to their conversation is derived from the conversation index
    (``_part_of``) rather than written as a row.
    """
    key = f"{rtype}:{src}:{dst}"
    meta_json = js_json(dict(sorted(metadata.items()))) if metadata else "{}"
    if source_id is None:
        # No source: the server hashes a synthetic one from key, user and sorted metadata.
        source_id = hash_uuid(f"relationship:{_scope.user_id()}:{key}:{meta_json}")
    rel_obs_id = hash_uuid(f"{source_id}:{key}:{meta_json}")
    if rtype == DERIVED:
        if (
            not metadata
            and src in fresh
            and known_types.get(src) == "conversation_message"
            and known_types.get(dst, "conversation") == "conversation"
            and _index_new(conn, src, dst, counts)
        ):
            return relationship_json(key, rtype, src, dst, {}, {}, 1, now, now)
        derived = pair(conn, src, dst)
        if derived is not None:
            return _observe_derived(conn, key, src, dst, metadata, rel_obs_id, now, derived)
    merged = {k: v for k, v in metadata.items() if v is not None}
    provenance = dict.fromkeys(merged, rel_obs_id)
    # Most edges are new: try the insert first, and read the row only when it exists.
    cur = conn.execute(
        "INSERT INTO relationships (source_entity_id, relationship_type, target_entity_id, "
        "metadata, provenance, seen, observation_count, last_observation_at, computed_at, uid) "
        "VALUES (?, ?, ?, ?, ?, ?, 1, ?, NULL, ?) ON CONFLICT DO NOTHING",
        (
            src,
            rtype,
            dst,
            dumps_acyclic(merged) if merged else "{}",
            dumps_acyclic(provenance) if provenance else "{}",
            encode_seen([rel_obs_id]),
            encode_time(now),
            _scope.uid(),
        ),
    )
    if cur.rowcount:
        if (
            rtype == "PART_OF"
            and known_types.get(dst, "conversation") == "conversation"
            and _entity_type_of(conn, src, known_types) == "conversation_message"
        ):
            # The entity_type test stands in for reading the target's type first.
            # (RETURNING here costs several times a plain UPDATE plus a later SELECT.)
            counted = conn.execute(
                "UPDATE entities SET message_count = message_count + 1 "
                f"WHERE {one_row('?1')} AND entity_type = 'conversation' AND {_scope.owned()}",
                (encode_entity(dst),),
            )
            if counted.rowcount:
                _index(conn, src, dst, counts)
        return relationship_json(key, rtype, src, dst, merged, provenance, 1, now, now)
    row = conn.execute(
        "SELECT metadata, provenance, seen, observation_count, last_observation_at, uid "
        "FROM relationships WHERE source_entity_id = ? AND relationship_type = ? "
        "AND target_entity_id = ?",
        (src, rtype, dst),
    ).fetchone()
    if row[5] != _scope.uid():
        # Another user's edge between the same ids: as if its ends were unknown here.
        raise not_found()
    merged = json.loads(row[0])
    provenance = json.loads(row[1])
    seen = decode_seen(row[2])
    count, last = int(row[3]), decode_time(row[4])
    if rel_obs_id not in seen:
        # Same source, key and metadata is the same observation: a repeat is skipped.
        seen.append(rel_obs_id)
        for k, v in metadata.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
            provenance[k] = rel_obs_id
        count += 1
        last = now
        # computed_at NULL: computed when last observed (``relationship_row_json``).
        conn.execute(
            "UPDATE relationships SET metadata = ?, provenance = ?, seen = ?, "
            "observation_count = ?, last_observation_at = ?, computed_at = NULL "
            "WHERE source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?",
            (
                dumps(merged),
                dumps(provenance),
                encode_seen(seen),
                count,
                encode_time(last),
                src,
                rtype,
                dst,
            ),
        )
    return relationship_json(key, rtype, src, dst, merged, provenance, count, last, now)


@functools.lru_cache(maxsize=4)
def _insert_sql(conversation_held: bool, message_held: bool) -> str:
    """The INSERT of an index row, each end bound as its rowid where the store holds it
    (``held``), else as its id (as the entity rows hold it), found by a subquery. (VALUES,
    not a SELECT: an INSERT that selects from its own table first copies the rows it
    selects into a temporary table.) The next position in the conversation: one seek to its
    last row (a bare max(seq) over the range would read every message of the conversation).
    """
    conversation = "?1" if conversation_held else row_of("?1")
    message = "?2" if message_held else row_of("?2")
    return (
        "INSERT INTO conversation_messages (conversation_row, seq, message_row, restated) "
        f"VALUES ({conversation}, coalesce((SELECT seq FROM conversation_messages "
        f"WHERE conversation_row = {conversation} ORDER BY seq DESC LIMIT 1), 0) + 1, "
        f"{message}, ?3)"
    )


def _index(
    conn: sqlite3.Connection,
    src: str,
    dst: str,
    counts: dict[str, int] | None,
    rows: Mapping[str, tuple[int, Any]] | None = None,
    restated: bool = False,
) -> None:
    """The message ``src`` as the next of conversation ``dst`` in the index
    (``_conversation_index``): both are entity rows (the conversation counted the message,
    the message's type was read or written). ``rows``: the rowids (first) of the entity
    rows the store holds, by id; ``restated``: the store's restatement of the conversation
    is derived from the message (``_derived_restatement``)."""
    conversation = None if rows is None else rows.get(dst)
    message = None if rows is None else rows.get(src)
    conn.execute(
        _insert_sql(conversation is not None, message is not None),
        (
            encode_entity(dst) if conversation is None else conversation[0],
            encode_entity(src) if message is None else message[0],
            1 if restated else None,
        ),
    )
    if counts is not None:
        counts[dst] = counts.get(dst, 0) + 1


def _index_new(conn: sqlite3.Connection, src: str, dst: str, counts: dict[str, int] | None) -> bool:
    """A new message's PART_OF edge as its index row alone; False when ``dst`` is not the
    user's conversation, or the edge is there already (written earlier in the same store).

    A message this store created has no edge but those this store wrote: to a conversation
    they are in the index (a row or derived), to anything else a row.
    """
    there = conn.execute(
        f"SELECT 1 FROM conversation_messages WHERE message_row = {row_of('?1')} "
        f"AND conversation_row = {row_of('?2')}",
        (encode_entity(src), encode_entity(dst)),
    ).fetchone()
    if there is not None:
        return False
    return index_message(conn, src, dst, counts, False)


def index_message(
    conn: sqlite3.Connection,
    src: str,
    dst: str,
    counts: dict[str, int] | None,
    counted: bool,
    rows: Mapping[str, tuple[int, Any]] | None = None,
    restated: bool = False,
) -> bool:
    """The new message ``src`` as the next of conversation ``dst`` in the index, its edge
    known to be new (a store's first edge from a message it created: ``_write``), and
    ``dst``'s message count one more; False (nothing written) when ``dst`` is not the
    user's conversation. ``counted``: the store added the message to the conversation's
    count as it wrote its row (no UPDATE of its own); ``rows``: the rowids (first) of the
    entity rows the store loaded or created, by id (the index holds them); ``restated``:
    the store's restatement of ``dst`` is derived from ``src`` (``_derived_restatement``)."""
    if not counted:
        cur = conn.execute(
            "UPDATE entities SET message_count = message_count + 1 "
            f"WHERE {one_row('?1')} AND entity_type = 'conversation' AND {_scope.owned()}",
            (encode_entity(dst),),
        )
        if not cur.rowcount:
            return False
    _index(conn, src, dst, counts, rows, restated)
    return True


def _observe_derived(
    conn: sqlite3.Connection,
    key: str,
    src: str,
    dst: str,
    metadata: Mapping[str, Any],
    rel_obs_id: str,
    now: str,
    derived: tuple[int, Any, str],
) -> dict[str, Any]:
    """Observe an edge that is derived (``_part_of``): a repeat of its one observation
    changes nothing; any other writes its row, with both observations, which then wins."""
    uid, created, derived_id = derived
    if uid != _scope.uid():
        raise not_found()  # another user's edge between the same ids (as for a row)
    if rel_obs_id == derived_id:
        return relationship_json(key, DERIVED, src, dst, {}, {}, 1, decode_time(created), now)
    merged: dict[str, Any] = {}
    provenance: dict[str, Any] = {}
    for k, v in metadata.items():
        if v is not None:
            merged[k] = v
        provenance[k] = rel_obs_id
    conn.execute(
        "INSERT INTO relationships (source_entity_id, relationship_type, target_entity_id, "
        "metadata, provenance, seen, observation_count, last_observation_at, computed_at, uid) "
        "VALUES (?, ?, ?, ?, ?, ?, 2, ?, NULL, ?)",
        (
            src,
            DERIVED,
            dst,
            dumps(merged),
            dumps(provenance),
            encode_seen([derived_id, rel_obs_id]),
            encode_time(now),
            uid,
        ),
    )
    return relationship_json(key, DERIVED, src, dst, merged, provenance, 2, now, now)


def _source_id(body: Mapping[str, Any]) -> str | None:
    source_id = body.get("source_id")
    return source_id if isinstance(source_id, str) else None


def create_relationship(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /create_relationship``: one edge between two entity ids."""
    rtype, src, dst, metadata = check_relationship(body, [])
    return relate(conn, rtype, src, dst, metadata, _source_id(body), now_iso(), {})


def create_relationships(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /create_relationships``: several edges; each is checked before any is written."""
    rels = body.get("relationships")
    if not isinstance(rels, list) or not rels:
        raise invalid_format("relationships must be a non-empty list", ["relationships"])
    checked = [check_relationship(rel, ["relationships", i]) for i, rel in enumerate(rels)]
    now = now_iso()
    source_id = _source_id(body)
    out = [
        {"index": i, **relate(conn, rtype, src, dst, metadata, source_id, now, {})}
        for i, (rtype, src, dst, metadata) in enumerate(checked)
    ]
    return {
        "success": True,
        "requested": len(rels),
        "created_count": len(out),
        "error_count": 0,
        "relationships": out,
        "errors": [],
    }


def retrieve_related_entities(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /retrieve_related_entities``: breadth-first over edges, outbound then inbound."""
    start = body.get("entity_id")
    if not isinstance(start, str) or not start:
        raise invalid_format("entity_id is required", ["entity_id"])
    types = body.get("relationship_types")
    if types is not None and not (
        isinstance(types, list) and all(isinstance(t, str) for t in types)
    ):
        raise invalid_format("relationship_types must be a list of strings", ["relationship_types"])
    direction = body.get("direction", "both")
    if direction not in ("inbound", "outbound", "both"):
        raise invalid_format("direction must be inbound, outbound or both", ["direction"])
    max_hops = body.get("max_hops", 1)
    if not isinstance(max_hops, int) or isinstance(max_hops, bool) or max_hops < 1:
        raise invalid_format("max_hops must be a positive integer", ["max_hops"])
    visited = {start}
    frontier = [start]
    edges: dict[str, dict[str, Any]] = {}
    for _ in range(max_hops):
        nxt: list[str] = []
        for node in frontier:
            # Outbound edges, then inbound, each in key (type:source:target) order.
            for column, near, far in (
                ("source_entity_id", "source_entity_id", 2),
                ("target_entity_id", "target_entity_id", 0),
            ):
                if (column == "source_entity_id" and direction == "inbound") or (
                    column == "target_entity_id" and direction == "outbound"
                ):
                    continue
                other_end = "target_entity_id" if near == "source_entity_id" else "source_entity_id"
                if column == "source_entity_id":
                    sub, params = edge_rows(source=node, rtypes=types)
                else:
                    sub, params = edge_rows(target=node, rtypes=types)
                rows = conn.execute(
                    f"SELECT {REL_COLUMNS} FROM ({sub}) ORDER BY relationship_type, {other_end}",
                    params,
                ).fetchall()
                for row in rows:
                    edge = relationship_row_json(row)
                    edges.setdefault(edge["relationship_key"], edge)
                    other = row[far]
                    if other not in visited:
                        visited.add(other)
                        nxt.append(other)
        frontier = nxt
    visited.discard(start)
    rows = conn.execute(
        "SELECT id, entity_type, canonical_name, aliases, created_at, updated_at FROM entities "
        f"WHERE {ids_in('?1')} AND {_scope.owned()} "
        "ORDER BY canonical_name, id",
        (dumps(sorted(visited)),),
    ).fetchall()
    entities = [entity_json(row) for row in rows]
    return {"relationships": list(edges.values()), "entities": entities}
