"""A turn record's close, held in its entity row (a schema step: ``CLOSE_ROW``).

A short turn writes two observation rows: its conversation's and its turn record's close
(about 100 bytes with its entry in the unique index by entity). The close is kept in the
turn record's row instead, as its first observation is (``_first``): four columns,
``close_id`` (the observation's id), ``close_source`` (its source), ``close_at`` (its time,
in milliseconds after the row's ``created_at``, or as it is where either time is not
milliseconds) and ``close_fields`` (its fields, NULL where they are the snapshot's, as a
row's). The rest of the observation is the first one's (its type, priority, source word,
specificity, identity basis and rule; no key of its own): a close is kept so only where it
is, where its record holds no observation row yet, and where its source
is not the first one's; any other is a row, as before, and every read handles both.

- *Its seq* within its entity is :data:`CLOSE_SEQ`, a half: above the first one's 0 and
  below every row's (a row's seq is its rowid, 1 or more), so every order of an entity's
  observations (a page of them, ties of time, the reducer's tie-break) is the one a row
  taken at the close gave. The snapshot lists it so (its metas and ``"s"``); its meta is
  read from the row (:func:`metas_sql`, beside the rows' metas).
- *In a key's list* it is minus its row's rowid, as the first one is: the two are told
  apart by the key's source (a key lists what its source wrote, and the close's source is
  never the first's), so a list is as long as before (``_rows.replayed_observations``).
- *A later observation* (a correction, a second close with other fields, a user's store
  or deletion) writes the close as a row first (:func:`materialize`), then its own, as
  before: a row holds its close only while the record has no observation row; a repeat
  of it is found in the row (``_first.first_of``); a fold that moves the snapshot it
  shared gives its fields to ``close_fields`` (``_first.set_fields``).

The migration (:func:`move_closes`, in its transaction) moves each turn record's one
observation row into its row where the row can give it back so, renumbered in its
snapshot and in the key lists.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final

from ._codec import encode_fields, first_fields_sql, install
from ._id_prefix import id_is
from ._key_rows import SOURCE_PREFIX, key_seqs, pack_seqs
from ._reducer import SnapshotState, renumber
from ._restatement import marked
from ._words import encode_word

__all__ = [
    "CLOSE_ROW",
    "CLOSE_SEQ",
    "CLOSE_SET",
    "COLUMNS",
    "TURN",
    "at_sql",
    "holds",
    "materialize",
    "meta_sql",
    "move_closes",
    "set_at",
]

#: the seq of the close a turn record's row holds, within its entity
CLOSE_SEQ: Final = 0.5

#: the entity type whose rows hold their close (``_row_metas.BY_SEQ``)
TURN: Final = "conversation_turn"

#: the migration: the four columns, NULL (one byte of a row's header each) in every row
CLOSE_ROW: Final = """
ALTER TABLE entities ADD COLUMN close_id;
ALTER TABLE entities ADD COLUMN close_source;
ALTER TABLE entities ADD COLUMN close_at;
ALTER TABLE entities ADD COLUMN close_fields TEXT;
"""

#: the columns of the close in ``observation_json``'s order, for ``_first.OBSERVATIONS``
COLUMNS: Final = "close_id, close_source, close_fields"


def at_sql(table: str = "entities") -> str:
    """SQL of the close's time as its row holds it (``close_at``) read back."""
    return (
        f"CASE WHEN typeof({table}.close_at) = 'integer' "
        f"AND typeof({table}.created_at) = 'integer' "
        f"THEN {table}.created_at + {table}.close_at ELSE {table}.close_at END"
    )


def meta_sql(table: str = "entities") -> str:
    """SQL of the close's meta as ``_row_metas.metas_sql`` lists a row's: ``[seq, id,
    observed_at, priority, observation_source, specificity]``, from its entity row."""
    ident = (
        f"CASE WHEN typeof({table}.close_id) = 'blob' THEN lower(hex({table}.close_id)) "
        f"ELSE '~' || {table}.close_id END"
    )
    return (
        f"json_array({CLOSE_SEQ}, {ident}, {at_sql(table)}, {table}.first_priority, "
        f"{table}.first_osource, {table}.first_specificity)"
    )


def set_at(at: str) -> str:
    """SQL of the ``SET`` of ``close_at`` for the close's time ``at`` (SQL, as coded)."""
    return (
        f"close_at = CASE WHEN typeof({at}) = 'integer' AND typeof(created_at) = 'integer' "
        f"THEN {at} - created_at ELSE {at} END"
    )


#: the ``SET`` of a close into its row (``?6`` its id, ``?7`` its source, ``?4`` its time;
#: its fields are settled after: ``_shared_fields``)
CLOSE_SET: Final = ", close_id = ?6, close_source = ?7, " + set_at("?4")


def holds(
    close: tuple[Any, ...] | None,
    state: SnapshotState | None,
    key: str | None,
    source: Any,
    rest: tuple[Any, ...],
) -> bool:
    """Whether a turn record's row as loaded (``close``: ``_rows.CLOSE_HELD``'s columns
    and the first's; ``state``: its snapshot) can hold an observation of ``source`` and
    the ``rest`` (priority, source word, specificity, identity basis and rule) as its
    close: the row holds its first and nothing else yet (no observation row: its count
    1), and the observation is the first's but for its source (never the first's: a
    key's list tells them apart by it) and has no key of its own (``key``)."""
    return (
        close is not None
        and close[0] == b""
        and state is not None
        and state.observation_count == 1
        and key is None
        and close[1] != source
        and close[2:] == rest
    )


#: a turn record's close its row holds (``?1``: its packed id), as a row's columns
_HELD_ROW: Final = (
    f"SELECT rowid, close_id, type_code, close_source, {at_sql()}, first_priority, "
    f"first_osource, first_specificity, {first_fields_sql('close_fields')}, first_basis, "
    f"first_rule FROM entities WHERE {id_is('?1')} AND close_id IS NOT NULL"
)
_INSERT: Final = (
    "INSERT INTO observations (id, entity_row, entity_type, source_id, observed_at, "
    "source_priority, observation_source, specificity_score, fields, idempotency_key, "
    f"identity_basis, identity_rule) VALUES (?2, ?1, ?3, ?4, ?5, ?6, ?7, ?8, "
    f"{marked('?9', 'rowid = ?1')}, NULL, ?10, ?11)"
)
#: the key rows of a source (as rows hold it: ``?1``), each found by the index by source
_KEYS_OF: Final = (
    "SELECT uid, digest, slot, observations FROM idempotency_keys "
    f"WHERE substr(source_id, 1, {SOURCE_PREFIX}) = substr(?1, 1, {SOURCE_PREFIX}) "
    "AND source_id = ?1"
)


def materialize(conn: sqlite3.Connection, packed: Any, state: SnapshotState) -> None:
    """Before another observation of the turn record whose packed id is ``packed`` (its
    ``state``, as the store holds it): the close its row holds, if any, written as a row of
    ``observations`` (its seq after every row's, as a close written as a row before the
    later one), named by that seq in ``state`` and in its key's list, the row's columns
    cleared. A row holds its close only while it is its record's one observation besides
    the first (so a copy of the file with every close a row, the tests' undo, gives every
    row its seq back)."""
    found = conn.execute(_HELD_ROW, (packed,)).fetchone()
    if found is None:
        return
    rowid, *columns = found
    seq = int(conn.execute(_INSERT, (rowid, *columns)).lastrowid or 0)
    conn.execute(
        "UPDATE entities SET close_id = NULL, close_source = NULL, close_at = NULL, "
        "close_fields = NULL WHERE rowid = ?",
        (rowid,),
    )
    renumber(state, CLOSE_SEQ, seq)
    for uid, digest, slot, listed in conn.execute(_KEYS_OF, (columns[2],)).fetchall():
        values = key_seqs(listed)
        renamed = [seq if v == -rowid else v for v in values]
        if renamed != values:
            conn.execute(
                "UPDATE idempotency_keys SET observations = ? "
                "WHERE uid = ? AND digest = ? AND slot = ?",
                (pack_seqs(renamed), uid, digest, slot),
            )


def _numbered(doc: str, seq: int) -> str:
    """Snapshot ``doc`` with observation ``seq`` listed as :data:`CLOSE_SEQ` (its metas, by
    seq or in full, and ``"s"``)."""
    data = json.loads(doc)
    data["o"] = [
        CLOSE_SEQ
        if type(m) is int and m == seq
        else [m[0], CLOSE_SEQ, *m[2:]]
        if type(m) is list and m[1] == seq
        else m
        for m in data["o"]
    ]
    if data.get("s") == seq:
        data["s"] = CLOSE_SEQ
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def move_closes(conn: sqlite3.Connection) -> None:
    """The migration: each turn record's one observation row into its entity row, where
    the row gives it back exactly (a mark, ``_restatement``, as the fields it names)."""
    install(conn)  # (the field codec's SQL function: a marked row's fields as JSON)
    found = conn.execute(
        "SELECT e.rowid, o.seq, o.id, o.source_id, o.observed_at, "
        f"CASE WHEN o.fields = X'' THEN {first_fields_sql('e.first_fields', 'e.canonical_name')} "
        f"ELSE {first_fields_sql('o.fields', 'e.canonical_name')} END, e.snapshot, "
        "e.canonical_name "
        "FROM entities e JOIN observations o ON o.seq = "
        "(SELECT min(seq) FROM observations WHERE entity_row = e.rowid) "
        "WHERE e.type_code = ?1 AND e.first_id IS NOT NULL AND o.entity_type = e.type_code "
        "AND o.source_priority = e.first_priority "
        "AND o.observation_source IS e.first_osource "
        "AND o.specificity_score IS e.first_specificity "
        "AND o.identity_basis IS e.first_basis AND o.identity_rule IS e.first_rule "
        "AND o.idempotency_key IS NULL AND o.source_id IS NOT e.first_source "
        "AND NOT EXISTS (SELECT 1 FROM observations l WHERE l.entity_row = e.rowid "
        "AND l.seq > o.seq)",
        (encode_word(TURN),),
    ).fetchall()
    moved: dict[int, int] = {}
    for rowid, seq, ident, source, observed, text, doc, name in found:
        # (its fields coded as a write codes them: ``_shared_fields``)
        fields = None if text is None else encode_fields(TURN, json.loads(text), text, name)
        conn.execute(
            f"UPDATE entities SET close_id = ?1, close_source = ?2, {set_at('?3')}, "
            "close_fields = ?4, snapshot = ?5 WHERE rowid = ?6",
            (ident, source, observed, fields, _numbered(doc, int(seq)), rowid),
        )
        conn.execute("DELETE FROM observations WHERE seq = ?", (seq,))
        moved[int(seq)] = -int(rowid)
    if not moved:
        return
    conn.create_function(
        "close_seqs",
        1,
        lambda packed: pack_seqs([moved.get(n, n) for n in key_seqs(packed)]),
        deterministic=True,
    )
    conn.execute("UPDATE idempotency_keys SET observations = close_seqs(observations)")
