"""What every write of an observation or a new entity's row derives the same way: the
observation's id, and a new entity's row.

The store's general write (``_write``) and the plan per type of the protocol's own records
(``_type_plan``) both write them through here, so that their rows are one layout.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ..._neotoma.identity import Identity
from . import _scope
from ._first import COLUMNS as FIRST_COLUMNS
from ._ids import observation_id
from ._row_codes import encode_name, time_code
from ._rows import encode_entity, encode_opt_time
from ._words import encode_word

__all__ = ["insert_row", "observation_id"]  # (observation_id: _ids', re-exported)

_INSERT = (
    "INSERT INTO entities (id, type_code, name_code, created_at, snapshot, "
    "observation_count, last_code, message_count, uid, room, "
    f"{FIRST_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,?,?,?,?,?,?,?,?)"
)


def insert_row(
    conn: sqlite3.Connection,
    entity_id: str,
    create: Identity,
    at: str | int,
    doc: str,
    observation_count: int,
    last_observation_at: str | None,
    messages: int,
    first: tuple[Any, ...],
    room: bytes | None = None,
) -> int:
    """Insert a new entity's row (its snapshot ``doc``, its times as stored: ``at`` its
    creation's) with its first observation's columns (``first``: ``FIRST_COLUMNS``'
    values) and ``room`` (``_close_room.room_for``'s), and return its rowid."""
    inserted = conn.execute(
        _INSERT,
        (
            encode_entity(entity_id),
            encode_word(create.entity_type),
            encode_name(create.entity_type, create.canonical_name),
            at,
            doc,
            observation_count,
            time_code(encode_opt_time(last_observation_at), at),
            messages,
            _scope.uid(),
            room,
            *first,
        ),
    )
    return int(inserted.lastrowid or 0)
