"""Forgetting a user: Neotoma's soft deletion of every entity the user owns.

:meth:`EmbeddedStore.forget_user` runs :func:`forget_user_rows` as one job acting for the
user (``_scope``): a deletion observation on each of the user's live entities, as
``/delete_entity`` writes one, in one transaction. No read finds them afterwards, through
any view; :func:`restore_user_rows` writes the restoring observations. Erasing the bytes is
:func:`~neotoma_agent.purge_user`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import attrs

from . import _scope
from ._delete import delete_entity, restore_entity
from ._rows import LIVE, decode_entity

__all__ = ["ForgottenUser", "forget_user_rows", "restore_user_rows"]


@attrs.frozen
class ForgottenUser:
    """What :meth:`~neotoma_agent.EmbeddedStore.forget_user` deleted (or
    :meth:`~neotoma_agent.EmbeddedStore.restore_user` brought back): the user and the ids
    of its entities. Holds ids only, never content or names."""

    #: the user whose entities these are
    user_id: str
    #: the entities deleted (or restored), in id order
    entity_ids: tuple[str, ...]


def forget_user_rows(conn: sqlite3.Connection, body: Mapping[str, Any]) -> list[str]:
    """Delete every live entity of the running user; their ids."""
    ids = [
        decode_entity(r[0])
        for r in conn.execute(
            f"SELECT id FROM entities WHERE {_scope.owned(index=True)} AND {LIVE}"
        )
    ]
    ids.sort()
    for entity_id in ids:
        delete_entity(conn, {"entity_id": entity_id, "reason": body.get("reason")})
    return ids


def restore_user_rows(conn: sqlite3.Connection, body: Mapping[str, Any]) -> list[str]:
    """Restore the running user's deleted entities among ``body["ids"]`` (None: all)."""
    deleted = {
        decode_entity(r[0])
        for r in conn.execute(
            f"SELECT id FROM entities WHERE {_scope.owned(index=True)} AND NOT ({LIVE})"
        )
    }
    wanted = deleted if body["ids"] is None else deleted.intersection(body["ids"])
    ids = sorted(wanted)
    for entity_id in ids:
        restore_entity(conn, {"entity_id": entity_id})
    return ids
