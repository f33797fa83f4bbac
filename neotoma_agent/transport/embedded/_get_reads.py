"""The reads behind a server's GET routes: one entity, its observations, its edges, an edge.

Each answers as ``GET /entities/{id}``, ``/entities/{id}/observations``,
``/entities/{id}/relationships``, ``/relationships/{key}`` and ``GET /relationships`` do on a
real server (the recorded samples k20-k32); ``GET /entities`` is
:func:`~neotoma_agent.transport.embedded._read.query_entities`, as it is on the server. An
unknown id and a malformed one are both a 404: no route checks the id's format (group n).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from . import _derived_restatement as derived
from . import _scope
from ._edge_json import REL_COLUMNS, relationship_row_json
from ._errors import invalid_format, not_found
from ._id_prefix import id_is
from ._key_rows import first_key
from ._part_of import edges
from ._read import observations_page
from ._rows import (
    QUERY_COLUMNS,
    decode_time,
    encode_entity,
    encode_id,
    live_state,
    query_item,
    snapshot_record,
)
from ._validate import bounded_int

__all__ = [
    "get_entity",
    "get_entity_observations",
    "get_entity_relationships",
    "get_relationship",
    "get_relationships",
    "type_label",
]

# The server's labels of the built-in types (``entity_type_label``); others are title-cased.
_TYPE_LABELS = {
    "conversation_message": "Chat Message",
    "conversation_turn": "Conversation Turn",
}
# The fields a server lists first among ``primary_fields``: what names an entity.
_NAME_FIELDS = ("name", "title", "full_name")
_MAX_OBSERVATIONS_PAGE = 10_000
_MAX_RELATIONSHIPS_PAGE = 1000


def type_label(entity_type: str) -> str:
    """The server's ``entity_type_label``: ``Company``, ``Chat Message``, ``Conversation``."""
    return _TYPE_LABELS.get(entity_type) or entity_type.replace("_", " ").title()


def _primary_fields(snapshot: Mapping[str, Any]) -> list[str]:
    """The snapshot's fields, the naming ones first.

    The server orders the rest as its schema declares them; the embedded schemas do not list
    their fields yet, so they come in snapshot order here.
    """
    names = [f for f in _NAME_FIELDS if f in snapshot]
    return names + [f for f in snapshot if f not in names]


def _entity_id(body: Mapping[str, Any]) -> str:
    entity_id = body.get("entity_id")
    if not isinstance(entity_id, str):
        raise invalid_format("entity_id is required", ["entity_id"])
    return entity_id


def _require_entity(conn: sqlite3.Connection, entity_id: str) -> None:
    if live_state(conn, entity_id) is None:
        raise not_found()


def get_entity(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /entities/{id}``: the entity's snapshot record under its canonical name."""
    entity_id = _entity_id(body)
    if live_state(conn, entity_id) is None:
        raise not_found()
    row = conn.execute(
        f"SELECT {QUERY_COLUMNS}, created_at FROM entities WHERE {id_is('?1')} "
        f"AND {_scope.owned()}",
        (encode_entity(entity_id),),
    ).fetchone()
    item = query_item(row)
    item["entity_type_label"] = type_label(item["entity_type"])
    item["primary_fields"] = _primary_fields(item["snapshot"])
    item["created_at"] = decode_time(row[12])
    return item


def get_entity_observations(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /entities/{id}/observations``: newest first; ``source`` is the idempotency key."""
    entity_id = _entity_id(body)
    limit = bounded_int(body.get("limit", 100), "limit", 1, _MAX_OBSERVATIONS_PAGE)
    offset = bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    _require_entity(conn, entity_id)
    total = conn.execute(
        "SELECT (SELECT count(*) FROM observations "
        f"WHERE entity_row = (SELECT rowid FROM entities WHERE {id_is('?1')})) + "
        "(SELECT (first_id IS NOT NULL) + (close_id IS NOT NULL) "
        f"FROM entities WHERE {id_is('?1')}) + "
        f"{derived.COUNT}",
        (encode_entity(entity_id),),
    ).fetchone()[0]
    observations = observations_page(conn, entity_id, limit, offset)
    keys = _keys_of_sources(conn, {o["source_id"] for o in observations} - {None})
    for o in observations:
        source = o["source_id"]
        o["source"] = keys.get(source) if source is not None else o["idempotency_key"]
    return {"observations": observations, "total": int(total), "limit": limit, "offset": offset}


def _keys_of_sources(conn: sqlite3.Connection, source_ids: set[str]) -> dict[str, str]:
    """The idempotency key that first wrote each source (its observations' ``source``)."""
    if not source_ids:
        return {}
    keys: dict[str, str] = {}
    for source_id in sorted(source_ids):
        key = first_key(conn, encode_id(source_id))
        if key is not None:
            keys[source_id] = key
    return keys


def _edge(row: Sequence[Any]) -> dict[str, Any]:
    edge = relationship_row_json(row)
    edge["id"] = edge["relationship_key"]
    return edge


def _ends(conn: sqlite3.Connection, ids: set[str]) -> dict[str, dict[str, Any]]:
    """The snapshot record of each live entity among ``ids``, with its type label."""
    records: dict[str, dict[str, Any]] = {}
    for entity_id in sorted(ids):
        loaded = live_state(conn, entity_id)
        if loaded is not None:
            record = snapshot_record(entity_id, loaded[0], loaded[1])
            record["entity_type_label"] = type_label(loaded[0])
            records[entity_id] = record
    return records


def get_entity_relationships(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /entities/{id}/relationships``: outgoing, incoming, both, oldest first.

    With ``expand_entities`` each edge names its far end, and ``related_entities`` holds the
    far ends' snapshot records by id.
    """
    entity_id = _entity_id(body)
    _require_entity(conn, entity_id)
    sides: dict[str, list[dict[str, Any]]] = {}
    for side, (sub, params) in (
        ("outgoing", edges(source=entity_id)),
        ("incoming", edges(target=entity_id)),
    ):
        rows = conn.execute(
            f"SELECT {REL_COLUMNS} FROM ({sub}) "
            "ORDER BY last_observation_at, relationship_type, source_entity_id, "
            "target_entity_id",
            params,
        ).fetchall()
        sides[side] = [_edge(r) for r in rows]
    result: dict[str, Any] = {**sides, "relationships": sides["outgoing"] + sides["incoming"]}
    if body.get("expand_entities") is not True:
        return result
    far = {e["target_entity_id"] for e in sides["outgoing"]}
    far |= {e["source_entity_id"] for e in sides["incoming"]}
    related = _ends(conn, far - {entity_id})
    for side, near, other in (("outgoing", "source", "target"), ("incoming", "target", "source")):
        for edge in sides[side]:
            # The server names only the far end of each edge (sample k25b).
            record = related.get(edge[f"{other}_entity_id"])
            edge[f"{near}_entity_name"] = None
            edge[f"{near}_entity_type"] = None
            edge[f"{near}_entity_type_label"] = None
            edge[f"{other}_entity_name"] = record["canonical_name"] if record else None
            edge[f"{other}_entity_type"] = record["entity_type"] if record else None
            edge[f"{other}_entity_type_label"] = record["entity_type_label"] if record else None
    result["related_entities"] = related
    return result


def _decorated(conn: sqlite3.Connection, row: Sequence[Any]) -> dict[str, Any]:
    """An edge as ``GET /relationships`` lists it: with its ends' canonical names and types."""
    edge = _edge(row)
    for end in ("source", "target"):
        found = conn.execute(
            f"SELECT canonical_name, entity_type FROM entities WHERE {id_is('?1')} "
            f"AND {_scope.owned()}",
            (encode_entity(edge[f"{end}_entity_id"]),),
        ).fetchone()
        edge[f"{end}_canonical_name"] = found[0] if found else None
        edge[f"{end}_entity_type"] = found[1] if found else None
    edge["agent_attribution"] = None
    return edge


def get_relationship(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /relationships/{type:source:target}``; 404 for an unknown or malformed key."""
    key = body.get("relationship_key")
    if not isinstance(key, str):
        raise invalid_format("relationship_key is required", ["relationship_key"])
    rtype, _, rest = key.partition(":")
    src, _, dst = rest.partition(":")
    sub, params = edges(source=src, target=dst, rtypes=[rtype])
    row = conn.execute(f"SELECT {REL_COLUMNS} FROM ({sub})", params).fetchone()
    if row is None:
        # The server quotes the key it was given: ids and a type, never stored content.
        raise not_found(f"Relationship not found: {key}")
    return _decorated(conn, row)


def get_relationships(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /relationships``: edges by source, target and/or type, newest first."""
    filters: dict[str, str] = {}
    for name in ("source_entity_id", "target_entity_id", "relationship_type"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise invalid_format(f"{name} must be a string", [name])
        filters[name] = value
    limit = bounded_int(body.get("limit", 100), "limit", 1, _MAX_RELATIONSHIPS_PAGE)
    offset = bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    rtype = filters.get("relationship_type")
    sub, params = edges(
        source=filters.get("source_entity_id"),
        target=filters.get("target_entity_id"),
        rtypes=None if rtype is None else [rtype],
    )
    total = conn.execute(f"SELECT count(*) FROM ({sub})", params).fetchone()[0]
    rows = conn.execute(
        f"SELECT {REL_COLUMNS} FROM ({sub}) ORDER BY last_observation_at DESC, "
        "relationship_type, source_entity_id, target_entity_id LIMIT ? OFFSET ?",
        (*params, limit, offset),
    ).fetchall()
    return {
        "relationships": [_decorated(conn, r) for r in rows],
        "total": int(total),
        "limit": limit,
        "offset": offset,
    }
