"""An edge's answer shape: the JSON a server answers for a relationship snapshot."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from . import _scope
from ._rows import decode_time

__all__ = ["REL_COLUMNS", "relationship_json", "relationship_row_json"]


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
        "user_id": _scope.user_id(),
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
        decode_time(row[6]),
        decode_time(row[6] if row[7] is None else row[7]),  # NULL: as last observed
    )


REL_COLUMNS = (
    "source_entity_id, relationship_type, target_entity_id, metadata, provenance, "
    "observation_count, last_observation_at, computed_at"
)
