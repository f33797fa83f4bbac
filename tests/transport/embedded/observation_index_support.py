"""The observation rows as the versions before ``BY_ROW`` held them (by the entities'
12-byte ids; the keys' index by source on 8 bytes of a source), for the copies of a file
"as the version before held it" that a format step's tests compare with: such a copy is
opened again from its older version, so its observation rows must be the ones that
version held (``_observation_index`` numbers them by entity rows)."""

from __future__ import annotations

import sqlite3

from neotoma_agent.transport.embedded._observation_index import OBSERVATION_ROWS
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["BY_ROW", "by_ids", "unnumber_observations"]

#: the version whose observation rows hold their entity rows' numbers
BY_ROW = MIGRATIONS.index(OBSERVATION_ROWS) + 1

# (the ids as the entity rows hold them: packed since version 12, as the rows held them)
_BY_IDS = """
CREATE TABLE observations_ids (
    seq INTEGER PRIMARY KEY,
    id NOT NULL,
    entity_id NOT NULL,
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
INSERT INTO observations_ids
    SELECT o.seq, o.id, e.id, o.entity_type, o.source_id, o.observed_at, o.source_priority,
        o.observation_source, o.specificity_score, o.fields, o.idempotency_key,
        o.identity_basis, o.identity_rule
    FROM observations o JOIN entities e ON e.rowid = o.entity_row ORDER BY o.seq;
DROP TABLE observations;
ALTER TABLE observations_ids RENAME TO observations;
CREATE UNIQUE INDEX observations_by_entity ON observations (entity_id, id);
DROP INDEX idempotency_keys_by_source;
CREATE INDEX idempotency_keys_by_source ON idempotency_keys (substr(source_id, 1, 8))
"""


def by_ids(conn: sqlite3.Connection) -> bool:
    """Whether the file of ``conn`` holds its observation rows by entity ids."""
    return "entity_id" in {r[1] for r in conn.execute("PRAGMA table_info(observations)")}


def unnumber_observations(conn: sqlite3.Connection, version: int = BY_ROW - 1) -> None:
    """The observation rows of the file of ``conn`` (in a transaction) as ``version`` held
    them: by entity ids before ``BY_ROW``. Call it before the entity rows' ids are unpacked
    (as version 11 held them), whose packed ids the rows held."""
    if version >= BY_ROW or by_ids(conn):
        return
    for statement in _BY_IDS.strip().split(";\n"):
        conn.execute(statement)
