"""The observation rows by entity row number (a schema step, ``_schema``).

An observation row names its entity by the entity row's rowid (``entity_row``: 1 to 4
bytes) where it held the entity's 12-byte id, and its unique index by entity,
``observations_by_entity``, is ``(entity_row, id)``: an entity's observations are one range
of it, and the pair is unique as ``(entity id, id)`` was (an ``INSERT OR IGNORE`` of an
observation an entity already holds writes nothing). An entity's observations are found
from its id by one seek of the id index (:func:`~._conversation_index.row_of`, evaluated
once a statement), then the range; a statement that holds the entity row already (the
fields an observation shares with its snapshot, the entities of an ``identity_basis``
filter, a derived PART_OF edge's source) joins by the rowid, one seek where the id took two.

Entity rows keep their rowids, but SQLite hands the largest rowid out again once its row is
deleted: every deletion of entity rows (``_purge``, the only one) deletes their
observations first, so that no observation names a later entity.
"""

from __future__ import annotations

from typing import Final

from ._key_rows import SOURCE_INDEX

__all__ = ["OBSERVATION_ROWS"]

#: the migration's script: the rows renumbered by their entity rows (an observation whose
#: entity has no row, which no read can reach, is dropped), seqs kept (the key lists and
#: the snapshots name them), in seq order; the unique index built on the number. And, in
#: the same step, the keys' index by source on a shorter prefix (``_key_rows``).
OBSERVATION_ROWS: Final = (
    """
CREATE TABLE observations_numbered (
    seq INTEGER PRIMARY KEY,
    id NOT NULL,
    entity_row INTEGER NOT NULL,
    entity_type NOT NULL,
    source_id,
    observed_at NOT NULL,
    source_priority INTEGER NOT NULL,
    observation_source,
    specificity_score REAL NOT NULL DEFAULT 1.0,
    fields TEXT,
    idempotency_key TEXT,
    identity_basis,
    identity_rule
);
INSERT INTO observations_numbered (seq, id, entity_row, entity_type, source_id, observed_at,
        source_priority, observation_source, specificity_score, fields, idempotency_key,
        identity_basis, identity_rule)
    SELECT o.seq, o.id, e.rowid, o.entity_type, o.source_id, o.observed_at,
        o.source_priority, o.observation_source, o.specificity_score, o.fields,
        o.idempotency_key, o.identity_basis, o.identity_rule
    FROM observations o JOIN entities e ON e.id = o.entity_id
    ORDER BY o.seq;
DROP TABLE observations;
ALTER TABLE observations_numbered RENAME TO observations;
CREATE UNIQUE INDEX observations_by_entity ON observations (entity_row, id);
"""
    + SOURCE_INDEX
)
