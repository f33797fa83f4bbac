"""``POST /delete_entity`` and ``POST /restore_entity``: one entity, soft-deleted as Neotoma does.

A deletion is one observation on the entity, ``{_deleted: true, deleted_at, deleted_by}``
(``deletion_reason`` when given) at ``source_priority`` 1000 with no source
(``services/deletion.ts``): it wins the entity's deletion order, so the snapshot is marked
deleted and the name, field and full-text indexes drop the entity, as every other write
keeps them. The entity's other observations and its edges stay (a message still REFERS_TO
it; readers skip the deleted end), so :func:`restore_entity`, an observation with
``_deleted: false``, brings everything back.

One difference from a real server, on purpose: the restoring observation is written at
priority 1000 too, not 1001, so the newer of a deletion and a restore decides and an entity
can be deleted again after a restore (on the server a restore outranks every later
deletion). It is the priority :mod:`neotoma_agent._neotoma.forget` writes at.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from ..._neotoma.identity import ENTITY_ID_RE
from ..._neotoma.js import hash_uuid
from . import _scope
from ._errors import invalid_format, not_found, now_iso
from ._rows import owned_entity
from ._write import _observe

__all__ = ["DELETION_PRIORITY", "delete_entity", "restore_entity"]

#: the ``source_priority`` of a deletion (and, here, of a restore)
DELETION_PRIORITY = 1000


def _mark(conn: sqlite3.Connection, body: Mapping[str, Any], *, deleted: bool) -> dict[str, Any]:
    entity_id = body.get("entity_id")
    if not isinstance(entity_id, str) or not ENTITY_ID_RE.match(entity_id):
        raise invalid_format("entity_id must be a Neotoma entity id", ["entity_id"])
    for name in ("entity_type", "reason"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise invalid_format(f"{name} must be a string", [name])
    row = owned_entity(conn, "entity_type", entity_id)
    if row is None:
        raise not_found()
    at = now_iso()
    verb = "deleted" if deleted else "restored"
    fields: dict[str, Any] = {
        "_deleted": deleted,
        f"{verb}_at": at,
        f"{verb}_by": _scope.user_id(),
    }
    if body.get("reason"):
        fields["deletion_reason" if deleted else "restoration_reason"] = body["reason"]
    obs_id = hash_uuid(f"{entity_id}:{'deletion' if deleted else 'restoration'}:{at}")
    _observe(
        conn,
        entity_id=entity_id,
        entity_type=str(row[0]),  # the stored type: a wrong one in the body changes nothing
        fields=fields,
        source_id=None,
        priority=DELETION_PRIORITY,
        obs_source=None,
        identity=None,
        now=at,
        obs_id=obs_id,
    )
    return {"success": True, "entity_id": entity_id, "observation_id": obs_id}


def delete_entity(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /delete_entity``: a deletion observation; 404 for an unknown entity."""
    return _mark(conn, body, deleted=True)


def restore_entity(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /restore_entity``: a restoring observation; 404 for an unknown entity."""
    return _mark(conn, body, deleted=False)
