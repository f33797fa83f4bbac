"""Canonical-name evolution: a snapshot that names its entity otherwise renames it.

After every observation a server re-derives the entity's name from its merged snapshot
(``maybeRederiveCanonicalName``, 0.22.0): the name is the one the snapshot's declared
fields give, not the one the write was resolved by. When that name differs from the
entity's and no other entity holds it (by id or by name), the entity is renamed and its
old name kept as an alias; the id never changes. So ``event {name: ..., notes: ...}``
(``name`` undeclared, out of the snapshot) ends up named after ``notes``, and a
``canonical_name`` field (never in a declared type's snapshot) names an entity only until
its first store ends.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from ..._neotoma.identity import (
    Identity,
    IdentityError,
    entity_id_for,
    identity_keys,
    resolve_identity_cached,
    undeclared_identity_keys,
)
from . import _scope
from ._codec import renamed
from ._id_prefix import id_among, id_is
from ._name_index import BOOKKEEPING, rename, substring_ids
from ._row_codes import encode_aliases, encode_name, set_time
from ._rows import dumps, encode_entity, encode_time, entity_exists

__all__ = ["rederive_name"]

_NAMES = frozenset({"name"})


def rederive_name(
    conn: sqlite3.Connection,
    entity_id: str,
    entity_type: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    now: str,
    created: Identity | None = None,
    written: Mapping[str, Any] | None = None,
) -> None:
    """Rename ``entity_id`` after its snapshot went from ``old`` to ``new``, as a server does.

    ``created`` is the identity this write inserted the entity's row with (the row is then
    not read again), ``written`` the fields it wrote.
    """
    if not new or old == new:
        return
    if created is not None and written is not None:
        if created.identity_basis != "heuristic_fallback" and undeclared_identity_keys(
            entity_type
        ).isdisjoint(written):
            # Every field that named it is in its snapshot: the snapshot names it the same.
            return
    elif old:
        keys = identity_keys(entity_type)
        if keys is not None and any(k in old for k in keys):
            changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
            if changed.isdisjoint(keys):
                # e.g. a turn record's status: the snapshot names the entity as it did.
                return
    try:
        derived = resolve_identity_cached(entity_type, new).canonical_name
    except IdentityError:
        return  # not enough in the snapshot yet: the name stays
    if created is not None:
        current, aliases = created.canonical_name, []
    else:
        row = conn.execute(
            f"SELECT canonical_name, aliases FROM entities WHERE {id_is('?1')}",
            (encode_entity(entity_id),),
        ).fetchone()
        if row is None:
            return
        current, aliases = row[0], json.loads(row[1])
    if not current or current == derived or _taken(conn, entity_id, entity_type, derived):
        return
    before = (current, tuple(aliases))
    if current not in aliases:
        aliases.append(current)
    conn.execute(
        f"UPDATE entities SET name_code = ?1, alias_list = ?2, {set_time('updated_at', 3)} "
        f"WHERE {id_is('?4')}",
        (
            encode_name(entity_type, derived),
            encode_aliases(dumps(aliases)),
            encode_time(now),
            encode_entity(entity_id),
        ),
    )
    renamed(conn, entity_type, encode_entity(entity_id), current, derived)
    rename(conn, entity_id, entity_type, before, (derived, aliases))


def _taken(conn: sqlite3.Connection, entity_id: str, entity_type: str, name: str) -> bool:
    """Whether another entity holds ``name``: the id it hashes to, or the name itself."""
    other = entity_id_for(entity_type, name, _scope.tenant())
    if other != entity_id and entity_exists(conn, other):
        return True
    candidates = [
        eid
        for eid in substring_ids(conn, name.lower(), _NAMES, bookkeeping=entity_type in BOOKKEEPING)
        if eid != entity_id
    ]
    if not candidates:
        return False
    row = conn.execute(
        f"SELECT 1 FROM entities WHERE {id_among(len(candidates))} AND entity_type = ? "
        f"AND canonical_name = ? AND {_scope.owned()} LIMIT 1",
        (*(encode_entity(c) for c in candidates), entity_type, name),
    ).fetchone()
    return row is not None
