"""The ``correct`` action: one high-priority observation of one field (``POST /correct``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from ..._neotoma.identity import ENTITY_ID_RE, hash_uuid, js_json, resolve_entity_type, schema_for
from ...exceptions import ValidationError
from . import _write
from ._errors import flat_error, invalid_format, not_found
from ._rows import observation_seq, owned_entity

__all__ = ["correct"]


def correct(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /correct``: one high-priority observation of one field."""
    entity_id = body.get("entity_id")
    field = body.get("field")
    key = body.get("idempotency_key")
    entity_type = body.get("entity_type") or "unknown"
    if not isinstance(entity_id, str) or not ENTITY_ID_RE.match(entity_id):
        raise invalid_format("entity_id must be a Neotoma entity id", ["entity_id"])
    if not isinstance(field, str) or not field:
        raise invalid_format("field is required", ["field"])
    if not isinstance(key, str) or not key:
        raise invalid_format("idempotency_key is required", ["idempotency_key"])
    if not isinstance(entity_type, str):
        raise invalid_format("entity_type must be a string", ["entity_type"])
    etype = resolve_entity_type(entity_type)
    row = owned_entity(conn, "entity_type", entity_id)
    if row is None:
        raise not_found()
    if schema_for(etype) is None:
        raise flat_error(
            ValidationError,
            400,
            "ERR_NO_SCHEMA_FOR_ENTITY_TYPE",
            f"No schema for entity_type {entity_type!r}",
        )
    value = body.get("value")
    fields = {field: value}
    try:
        obs_id = hash_uuid(js_json([entity_id, fields, key]))
    except ValueError as exc:
        raise invalid_format(f"value is not JSON: {exc}", ["value"]) from None
    before = observation_seq(conn, entity_id, obs_id) is not None
    _, snapshot = _write._observe(
        conn,
        entity_id=entity_id,
        entity_type=str(row[0]),
        fields=fields,
        source_id=None,
        priority=1000,
        obs_source="human",
        identity=None,
        now=_write.write_time(),
        obs_id=obs_id,
        idempotency_key=key,
    )
    return {
        "success": True,
        "snapshot": None if before else snapshot,
        "observation_id": obs_id,
        "entity_id": entity_id,
        "field": field,
        "value": value,
        "message": "Correction recorded" if not before else "Correction already recorded",
    }
