"""Row <-> JSON: the shapes a server answers for entities, snapshots, edges and observations.

Readers of an entity row (its JSON, its snapshot state) live here too, so that every module
that answers with a row builds it the same way.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from ..._identity import schema_version
from .._wire import LOCAL_USER_ID
from ._reducer import SnapshotState

__all__ = [
    "DIRECT_COLUMNS",
    "REL_COLUMNS",
    "direct_item",
    "dumps",
    "entity_exists",
    "entity_json",
    "entity_row",
    "load_row",
    "load_state",
    "observation_json",
    "query_item",
    "relationship_json",
    "relationship_row_json",
    "snapshot_record",
]


dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def entity_row(conn: sqlite3.Connection, entity_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT id, entity_type, canonical_name, aliases, created_at, updated_at "
        "FROM entities WHERE id = ?",
        (entity_id,),
    ).fetchone()
    return entity_json(row) if row else None


def entity_json(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": row[0],
        "entity_type": row[1],
        "canonical_name": row[2],
        "aliases": [] if row[3] == "[]" else json.loads(row[3]),  # most have none
        "created_at": row[4],
        "updated_at": row[5],
        "user_id": LOCAL_USER_ID,
        "first_seen_at": None,
        "last_seen_at": None,
        "merged_to_entity_id": None,
        "merged_at": None,
        "merged_into": None,
    }


def load_row(conn: sqlite3.Connection, entity_id: str) -> tuple[SnapshotState, int] | None:
    """An entity's snapshot state and message count, or None if there is no such entity."""
    row = conn.execute(
        "SELECT snapshot, observation_count, last_observation_at, message_count "
        "FROM entities WHERE id = ?",
        (entity_id,),
    ).fetchone()
    if row is None:
        return None
    return SnapshotState.from_json(json.loads(row[0]), row[1], row[2]), int(row[3])


def load_state(conn: sqlite3.Connection, entity_id: str) -> SnapshotState | None:
    """An entity's snapshot state, or None if there is no such entity."""
    loaded = load_row(conn, entity_id)
    return None if loaded is None else loaded[0]


def entity_exists(conn: sqlite3.Connection, entity_id: str) -> bool:
    return conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity_id,)).fetchone() is not None


def _display_name(fields: Mapping[str, Any]) -> str | None:
    for key in ("name", "title", "full_name"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def snapshot_record(entity_id: str, entity_type: str, state: SnapshotState) -> dict[str, Any]:
    return _snapshot_json(
        entity_id,
        entity_type,
        state.fields,
        state.provenance,
        state.observation_count,
        state.last_observation_at,
    )


def _snapshot_json(
    entity_id: str,
    entity_type: str,
    fields: dict[str, Any],
    provenance: dict[str, str],
    observation_count: int,
    last_observation_at: str | None,
) -> dict[str, Any]:
    return {
        "entity_id": entity_id,
        "entity_type": entity_type,
        "schema_version": schema_version(entity_type),
        "canonical_name": _display_name(fields),
        "snapshot": fields,
        "computed_at": last_observation_at,
        "observation_count": observation_count,
        "last_observation_at": last_observation_at,
        "provenance": provenance,
        "user_id": LOCAL_USER_ID,
    }


# An entity row and what its snapshot record needs, read together: a direct hit costs one
# statement, not an entity read plus a snapshot read.
DIRECT_COLUMNS = (
    "id, entity_type, canonical_name, aliases, created_at, updated_at, "
    "snapshot, observation_count, last_observation_at"
)


def direct_item(row: Sequence[Any]) -> dict[str, Any]:
    """A pass-1/2 item from a ``DIRECT_COLUMNS`` row: the entity and its snapshot record."""
    item = entity_json(row)
    # Only fields and provenance: the winners and deletion order are the store's business.
    doc = json.loads(row[6])
    item["snapshot"] = _snapshot_json(
        row[0], row[1], doc.get("f", {}), doc.get("p", {}), row[7], row[8]
    )
    return item


def query_item(row: Sequence[Any]) -> dict[str, Any]:
    # Fields and provenance only: SQLite cuts them out of the snapshot doc, so the
    # per-field winners (most of the doc) are never decoded when paging through a store.
    entity_id, entity_type, canonical_name = row[0], row[1], row[2]
    return {
        "entity_id": entity_id,
        "entity_type": entity_type,
        "canonical_name": canonical_name,
        "schema_version": schema_version(entity_type),
        "snapshot": json.loads(row[3]),
        "observation_count": row[4],
        "last_observation_at": row[5],
        "provenance": json.loads(row[6]),
        "computed_at": row[5],
        "merged_to_entity_id": None,
        "merged_at": None,
    }


def relationship_json(
    key: str,
    rtype: str,
    src: str,
    dst: str,
    metadata: Mapping[str, Any],
    provenance: Mapping[str, Any],
    count: int,
    last: str,
    computed: str,
) -> dict[str, Any]:
    return {
        "relationship_key": key,
        "relationship_type": rtype,
        "source_entity_id": src,
        "target_entity_id": dst,
        "schema_version": "1.0",
        "snapshot": dict(metadata),
        "computed_at": computed,
        "observation_count": count,
        "last_observation_at": last,
        "provenance": dict(provenance),
        "user_id": LOCAL_USER_ID,
        "is_live": 1,
    }


def relationship_row_json(row: Sequence[Any]) -> dict[str, Any]:
    src, rtype, dst = row[0], row[1], row[2]
    return relationship_json(
        f"{rtype}:{src}:{dst}",
        rtype,
        src,
        dst,
        json.loads(row[3]),
        json.loads(row[4]),
        row[5],
        row[6],
        row[7],
    )


REL_COLUMNS = (
    "source_entity_id, relationship_type, target_entity_id, metadata, provenance, "
    "observation_count, last_observation_at, computed_at"
)


def observation_json(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": row[0],
        "entity_id": row[1],
        "entity_type": row[2],
        "schema_version": "1.0",  # observations say 1.0 even where snapshots say 1.4 (e5)
        "source_id": row[3],
        "interpretation_id": None,
        "observed_at": row[4],
        "specificity_score": row[7],
        "source_priority": row[5],
        "observation_source": row[6],
        "fields": json.loads(row[8]),
        "created_at": row[4],
        "user_id": LOCAL_USER_ID,
        "idempotency_key": row[9],
        "canonical_hash": None,
        "identity_basis": row[10],
        "identity_rule": row[11],
        "provenance": None,
        "source_peer_id": None,
        "canonical_key": None,
        "sighting_source_id": None,
    }
