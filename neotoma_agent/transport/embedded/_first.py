"""An entity's first observation, held in its entity row (schema version 11).

A message is written once: its one observation lives in its entity row's ``first_*``
columns instead of a row of ``observations``. Within its entity that observation is seq 0
(its snapshot's metas and shared-fields pointer say 0: below every row's seq, as the first
one's always was); in an idempotency key's list it is minus its entity's rowid (a number no
row holds). Its time is the row's ``created_at``; its fields are ``first_fields``, or the
snapshot's "f" where it shares them (NULL). An entity whose row holds none keeps all its
observations as rows, so every read handles both.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from ._close_room import FIRST_SET
from ._close_row import CLOSE_SEQ
from ._close_row import at_sql as close_at_sql
from ._codec import fields_sql, first_fields_sql
from ._first_id import first_id_sql
from ._id_prefix import id_is, one_row
from ._key_rows import key_seqs
from ._reducer import renumber
from ._restatement import MARK_ROWS, marked
from ._rows import (
    FIRST_META,
    decode_entity,
    decode_state,
    decode_word,
    dumps_acyclic,
    encode_entity,
    encode_state,
)

__all__ = [
    "COLUMNS",
    "FIRST_SEQ",
    "OBSERVATIONS",
    "first_of",
    "merge_first",
    "number_first_metas",
    "set_fields",
]

#: the seq of the observation an entity row holds, within its entity
FIRST_SEQ: Final = 0

#: the entity row's columns of its first observation, in ``observation_json``'s order
#: after the first five (id, entity, type, source, time)
COLUMNS: Final = (
    "first_id, first_source, first_key, first_priority, first_osource, first_specificity, "
    "first_basis, first_rule, first_fields"
)

# An entity's observations as ``observation_json`` rows plus their seq, newest first: the
# rows of ``observations`` and the row's first one. ``?1`` the entity id as packed
# (``encode_entity``: since schema version 12 the entity row holds it so; the observation
# rows hold the entity row's number, ``_observation_index``).
OBSERVATIONS: Final = (
    "SELECT id, ?1 AS entity_id, entity_type, source_id, observed_at, source_priority, "
    "observation_source, specificity_score, {fields}, idempotency_key, identity_basis, "
    "identity_rule, seq FROM observations "
    f"WHERE entity_row = (SELECT rowid FROM entities WHERE {id_is('?1')}) "
    f"UNION ALL SELECT {first_id_sql()}, ?1, entity_type, first_source, created_at, "
    "first_priority, first_osource, first_specificity, "
    f"coalesce({first_fields_sql()}, {fields_sql()}), first_key, first_basis, first_rule, 0 "
    f"FROM entities WHERE {id_is('?1')} "
    "AND first_id IS NOT NULL "
    # the close a turn record's row holds (``_close_row``): the first's but for its id,
    # source, time and fields
    f"UNION ALL SELECT close_id, ?1, entity_type, close_source, {close_at_sql()}, "
    "first_priority, first_osource, first_specificity, "
    f"coalesce({first_fields_sql('close_fields')}, {fields_sql()}), NULL, first_basis, "
    f"first_rule, {CLOSE_SEQ} "
    f"FROM entities WHERE {id_is('?1')} AND close_id IS NOT NULL"
)


def first_of(conn: sqlite3.Connection, entity_id: str, obs_id: Any) -> int | None:
    """Minus the rowid of ``entity_id`` when its row holds observation ``obs_id`` (packed):
    its first, or its close (``_close_row``)."""
    row = conn.execute(
        f"SELECT rowid FROM entities WHERE {id_is('?1')} "
        f"AND ({first_id_sql()} = ?2 OR close_id = ?2)",
        (encode_entity(entity_id), obs_id),
    ).fetchone()
    return None if row is None else -int(row[0])


#: the ``UPDATE`` of a row's fields (``?1``; marked where they restate the first's:
#: ``_restatement``) by its seq (``?2``)
_ROW_SET: Final = (
    f"UPDATE observations SET fields = {marked('?1', 'rowid = observations.entity_row')} "
    "WHERE seq = ?2"
)


def set_fields(
    conn: sqlite3.Connection, entity_id: str, seq: float, text: str | None, mark: bool = True
) -> None:
    """Observation ``seq`` of ``entity_id`` holds ``text`` as its fields (NULL: shared).
    ``mark=False``: no row of the entity holds ``text`` (the caller knows its rows), so
    none is looked for to be marked. A derived restatement's (a negative seq:
    ``_derived_restatement``) are its entity's first observation's, which it shares only
    while they are the snapshot's: nothing to set. A turn record's close its row holds
    (:data:`CLOSE_SEQ`, ``_close_row``) keeps them in ``close_fields``."""
    if seq < FIRST_SEQ:
        return
    if seq == CLOSE_SEQ:
        conn.execute(
            f"UPDATE entities SET close_fields = ?1 WHERE {one_row('?2')}",
            (text, encode_entity(entity_id)),
        )
    elif seq == FIRST_SEQ:
        packed = encode_entity(entity_id)
        conn.execute(f"UPDATE entities SET {FIRST_SET} WHERE {one_row('?2')}", (text, packed))
        if text is not None and mark:  # (a row that restates them is marked: ``_restatement``)
            conn.execute(MARK_ROWS, (packed, text))
    else:
        conn.execute(_ROW_SET, (text, seq))


def merge_first(conn: sqlite3.Connection) -> None:
    """Schema version 11's step: each entity's lowest-seq observation moved into its row
    where the row gives it back exactly (its time ``created_at``, its type the row's),
    renumbered to 0 in its snapshot and to minus the rowid in the key lists."""
    from ._scan import keyset_rows  # a migration's: never a hook's (see there)

    find = (
        "SELECT seq, id, entity_type, source_id, observed_at, source_priority, "
        "observation_source, specificity_score, fields, idempotency_key, identity_basis, "
        "identity_rule FROM observations WHERE entity_id = ? ORDER BY seq LIMIT 1"
    )
    moved: dict[int, int] = {}
    entities = keyset_rows(
        conn,
        "SELECT rowid, id, entity_type, created_at, snapshot, observation_count, "
        "last_observation_at FROM entities WHERE rowid > ? ORDER BY rowid LIMIT ?",
        -1,
    )
    for rowid, entity_id, entity_type, created, doc, count, observed in entities:
        o = conn.execute(find, (encode_entity(decode_entity(entity_id)),)).fetchone()
        if o is None or o[4] != created or decode_word(o[2]) != entity_type:
            continue
        state = decode_state(doc, count, observed, None)  # a file before version 11's
        renumber(state, int(o[0]), FIRST_SEQ)
        conn.execute(
            "UPDATE entities SET first_id = ?, first_source = ?, first_key = ?, "
            "first_priority = ?, first_osource = ?, first_specificity = ?, first_basis = ?, "
            "first_rule = ?, first_fields = ?, snapshot = ? WHERE rowid = ?",
            (o[1], o[3], o[9], o[5], o[6], o[7], o[10], o[11], o[8], encode_state(state), rowid),
        )
        conn.execute("DELETE FROM observations WHERE seq = ?", (o[0],))
        moved[int(o[0])] = -int(rowid)
    conn.create_function(
        "first_seqs",
        1,
        # (key_seqs: a list a later version packed, in a file written back to this version
        # by hand, reads as its JSON would)
        lambda text: dumps_acyclic([moved.get(n, n) for n in key_seqs(text)]),
        deterministic=True,
    )
    conn.execute("UPDATE idempotency_keys SET observations = first_seqs(observations)")


def number_first_metas(conn: sqlite3.Connection) -> None:
    """Schema version 13's step: every snapshot that lists its row's first observation
    written again (``encode_state`` writes its meta as 0)."""
    from ._scan import keyset_rows  # a migration's: never a hook's (see there)

    entities = keyset_rows(
        conn,
        f"SELECT rowid, snapshot, observation_count, last_observation_at, {FIRST_META} "
        "FROM entities WHERE rowid > ? AND first_id IS NOT NULL ORDER BY rowid LIMIT ?",
        -1,
    )
    for rowid, doc, count, observed, *first in entities:
        state = decode_state(doc, count, observed, first)
        text = encode_state(state)
        if text != doc:
            conn.execute("UPDATE entities SET snapshot = ? WHERE rowid = ?", (text, rowid))
