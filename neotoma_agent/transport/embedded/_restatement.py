"""An observation that restates its entity's first one, its fields held as a mark (a schema
step: ``RESTATED``).

Every turn's enter stores its conversation again (``{"conversation_id": ...}``, the fields
the conversation's first observation holds: a restatement) beside its user message: a row
of ``observations`` a turn, whose fields were a copy of its entity row's ``first_fields``,
byte for byte (about 32 of the row's 86 bytes). Such a row holds an empty blob in
``fields`` instead (:data:`MARK`: no JSON text is one), which a read gives back as its
entity's first observation's fields (:func:`fields_sql`). Nothing else of the row changes:
its id (still the digest of its source, entity and fields' JSON, so that its unique index
``(entity_row, id)`` dedupes a later store of the same source as before), source, time,
priority, source rank, identity basis and rule.

A row is marked where its fields' text equals the entity row's ``first_fields`` as stored
(:func:`marked`: SQL, in the statement that writes the row). ``first_fields`` is JSON text
or the field codec's array (``_codec``, a message's and a turn record's), and a row's fields
are JSON objects: equal text is the codec-free case, whose ``first_fields`` is read as it is.
An entity row's first observation never changes its fields once its row holds them (NULL,
shared with the snapshot, becomes text once, when the snapshot moves on: ``_shared_fields``),
so a mark reads the same fields for as long as its row lives, and a row's entity row (whose
``first_fields`` it names) is deleted only with it (``_purge``). A first observation whose
fields are NULL (the snapshot's) marks none: the row keeps its text, as before.

Every row whose text is its entity row's ``first_fields`` is marked (a file's rows are
one form, whichever way they were written): a row is marked as it is written (its text
set: :func:`marked`), and an entity's rows are as its first observation's fields become
``first_fields`` (:data:`MARK_ROWS`: its rows, one range of their index by entity, once in
the entity's life); the migration marks every such row of an older file (:data:`RESTATED`).
"""

from __future__ import annotations

from typing import Final

from ._codec import fields_sql as snapshot_fields_sql
from ._codec import first_fields_sql
from ._id_prefix import id_is

__all__ = ["MARK", "MARK_ROWS", "RESTATED", "fields_sql", "marked"]

#: the ``fields`` of a row that restates its entity's first observation's fields (an empty
#: blob: no JSON text, and no byte of the row's data)
MARK: Final = "X''"


def marked(text: str, entity: str) -> str:
    """SQL of what a row of ``observations`` holds in ``fields`` for the fields' text
    ``text`` (SQL; NULL: shared with the snapshot, held as NULL) on the entity row that
    ``entity`` (SQL: a ``WHERE`` of ``entities``) selects: :data:`MARK` where the text is
    its ``first_fields``."""
    return (
        f"CASE WHEN {text} = (SELECT first_fields FROM entities WHERE {entity}) "
        f"THEN {MARK} ELSE {text} END"
    )


def fields_sql(row: str = "observations") -> str:
    """SQL of the fields' JSON of an ``observations`` row (``row``: the table's name or
    alias in the statement): its ``fields``, or the snapshot's where NULL (shared), or its
    entity's first observation's where marked."""
    entity = f"FROM entities e WHERE e.rowid = {row}.entity_row"
    first = first_fields_sql("e.first_fields", "e.canonical_name")
    snapshot = snapshot_fields_sql("e.snapshot", "e.canonical_name")
    return (
        f"(CASE WHEN {row}.fields IS NULL THEN (SELECT {snapshot} {entity}) "
        f"WHEN {row}.fields = {MARK} THEN (SELECT coalesce({first}, {snapshot}) {entity}) "
        f"ELSE {row}.fields END)"
    )


#: the ``UPDATE`` that marks the rows of the entity whose packed id is ``?1`` as its row's
#: first observation's fields become the text ``?2`` (they were the snapshot's until then)
MARK_ROWS: Final = (
    f"UPDATE observations SET fields = {MARK} "
    f"WHERE entity_row = (SELECT rowid FROM entities WHERE {id_is('?1')}) AND fields = ?2"
)

#: the migration: every row whose fields' text is its entity row's ``first_fields``, marked
RESTATED: Final = (
    f"UPDATE observations SET fields = {MARK} WHERE fields = "
    "(SELECT e.first_fields FROM entities e WHERE e.rowid = observations.entity_row)"
)
