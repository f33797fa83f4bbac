"""The embedded store's first four schema versions: its tables, then the compact rows.

Version 1 creates the tables (``V1``), version 2 the conversation index
(``CONVERSATION_MESSAGES``); versions 3 and 4 are the compact row formats, each a script
(``COMPACT_ROWS``, ``SHARED_FIELDS``) and the Python that rewrites, in the same
transaction, the values SQL alone cannot (``compact_rewrite``, ``share_fields``).
``_schema.MIGRATIONS`` lists every version in order. A migration restates its tables as
they were, so old files migrate the same way forever.
"""

from __future__ import annotations

import json
import sqlite3

from ._rows import (
    decode_seen,
    decode_state,
    dumps,
    encode_entity,
    encode_id,
    encode_opt_time,
    encode_seen,
    encode_state,
    encode_word,
)

__all__ = [
    "COMPACT_ROWS",
    "CONVERSATION_MESSAGES",
    "SHARED_FIELDS",
    "V1",
    "compact_rewrite",
    "share_fields",
]

V1 = """
-- One row per idempotency key: the hash of its entities (a replay or a mismatch) and the
-- observations it wrote, newest first (what a replay lists).
CREATE TABLE idempotency_keys (
    key TEXT PRIMARY KEY,
    entities_hash TEXT NOT NULL,
    source_id TEXT NOT NULL,
    observations TEXT NOT NULL,
    created_at TEXT NOT NULL
);
-- An entity and its snapshot in one row: a write reads and rewrites one row, not two.
-- snapshot = {"f": fields, "p": provenance, "w": per-field winners, "top", "del"}.
CREATE TABLE entities (
    id TEXT PRIMARY KEY,
    entity_type TEXT NOT NULL,
    canonical_name TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    observation_count INTEGER NOT NULL,
    last_observation_at TEXT,
    message_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX entities_by_type ON entities (entity_type, id);
-- Observation ids are hashes that include the entity id, so (entity_id, id) is unique and
-- one index serves both the dedupe of a repeated observation and the reads of an entity's
-- observations; a second index on the random id alone would dirty another random page on
-- every write.
CREATE TABLE observations (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    entity_type TEXT NOT NULL,
    source_id TEXT,
    observed_at TEXT NOT NULL,
    source_priority INTEGER NOT NULL,
    observation_source TEXT,
    specificity_score REAL NOT NULL DEFAULT 1.0,
    fields TEXT NOT NULL,
    idempotency_key TEXT,
    identity_basis TEXT,
    identity_rule TEXT
);
CREATE UNIQUE INDEX observations_by_entity ON observations (entity_id, id);
-- One row per edge (type:source:target); seen = the relationship observations folded in.
CREATE TABLE relationships (
    source_entity_id TEXT NOT NULL,
    relationship_type TEXT NOT NULL,
    target_entity_id TEXT NOT NULL,
    metadata TEXT NOT NULL,
    provenance TEXT NOT NULL,
    seen TEXT NOT NULL,
    observation_count INTEGER NOT NULL,
    last_observation_at TEXT NOT NULL,
    computed_at TEXT NOT NULL,
    PRIMARY KEY (source_entity_id, relationship_type, target_entity_id)
) WITHOUT ROWID;
CREATE INDEX relationships_by_target ON relationships (target_entity_id, relationship_type);
CREATE TABLE field_values (
    entity_id TEXT NOT NULL,
    field TEXT NOT NULL,
    value TEXT NOT NULL,
    first_token TEXT NOT NULL,
    PRIMARY KEY (entity_id, field)
) WITHOUT ROWID;
CREATE INDEX field_values_by_value ON field_values (value);
CREATE INDEX field_values_by_first_token ON field_values (first_token);
-- How many indexed texts hold each trigram (an upper bound: never decremented). A lookup
-- intersects only the rarest trigrams of its needle, then checks the whole needle, so its
-- cost follows the rarest trigram instead of the commonest.
CREATE TABLE trigram_df (
    gram TEXT PRIMARY KEY,
    n INTEGER NOT NULL
) WITHOUT ROWID;
CREATE VIRTUAL TABLE name_index USING fts5 (
    text, entity_id UNINDEXED, kind UNINDEXED, tokenize = 'trigram'
);
-- Names of conversations, messages and turn records: many, alike, and written on every
-- turn, so they skip trigram_df (whose upkeep would double a turn's cost). Natural-language
-- identifiers share few trigrams with them, which keeps a plain phrase query cheap.
CREATE VIRTUAL TABLE bookkeeping_names USING fts5 (
    text, entity_id UNINDEXED, kind UNINDEXED, tokenize = 'trigram'
);
"""

# The messages of each conversation in the order their PART_OF edge was first written
# (seq), so that the last N messages of a conversation are read by one index range scan
# whatever its length. Kept by ``_edges.relate``; filled here for files written before it,
# in the order the messages were created.
CONVERSATION_MESSAGES = """
CREATE TABLE conversation_messages (
    seq INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL
);
CREATE INDEX conversation_messages_by_conversation
    ON conversation_messages (conversation_id, seq, message_id);
INSERT INTO conversation_messages (conversation_id, message_id)
    SELECT r.target_entity_id, r.source_entity_id
    FROM relationships r
    JOIN entities m ON m.id = r.source_entity_id AND m.entity_type = 'conversation_message'
    JOIN entities c ON c.id = r.target_entity_id AND c.entity_type = 'conversation'
    WHERE r.relationship_type = 'PART_OF'
    ORDER BY m.created_at, m.id;
"""


# Version 3: the compact row formats of ``_rows`` (fewer bytes per short turn).
#
# - ``entities.snapshot``: the snapshot doc of ``encode_state`` (one list of winning
#   observations; provenance rebuilt on read; the fields still at ``$.f``, where the
#   queries' sorts and filters read them);
# - ``observations``: ``id`` and ``source_id`` as 16 bytes, ``observed_at`` as integer
#   milliseconds (``encode_id``, ``encode_time``): untyped columns, since a TEXT column would
#   turn the milliseconds back into text; ``entities``: its three times as milliseconds too
#   (untyped columns);
# - ``idempotency_keys``: keyed by the key alone (no rowid, so no second copy of every key in
#   an index), the source id (a digest of the entities hash, so it decides a mismatch as the
#   hash did) as 16 bytes and indexed (an observation's ``source`` is the first key that
#   wrote its source), the seqs of the observations written instead of their ids (a replay
#   reads the rest from the observation rows), ``created_at`` as milliseconds;
# - the two FTS5 name indexes without token positions or sizes (``detail = none``,
#   ``columnsize = 0``): every query is an AND of single trigrams whose rows are then
#   checked for the whole needle (``_name_index``), and nothing ranks, so neither was read.
#
# The script moves the rows into the new tables as they are; ``compact_rewrite`` then
# rewrites the values SQL alone cannot (it runs right after the script, in the same
# transaction).
_COMPACT_TABLES = """
CREATE TABLE observations_v3 (
    seq INTEGER PRIMARY KEY,
    id NOT NULL,
    entity_id TEXT NOT NULL,
    entity_type TEXT NOT NULL,
    source_id,
    observed_at NOT NULL,
    source_priority INTEGER NOT NULL,
    observation_source TEXT,
    specificity_score REAL NOT NULL DEFAULT 1.0,
    fields TEXT NOT NULL,
    idempotency_key TEXT,
    identity_basis TEXT,
    identity_rule TEXT
);
INSERT INTO observations_v3 SELECT seq, id, entity_id, entity_type, source_id, observed_at,
    source_priority, observation_source, specificity_score, fields, idempotency_key,
    identity_basis, identity_rule FROM observations ORDER BY seq;
DROP TABLE observations;
ALTER TABLE observations_v3 RENAME TO observations;
CREATE UNIQUE INDEX observations_by_entity ON observations (entity_id, id);
CREATE TABLE idempotency_keys_v3 (
    key TEXT PRIMARY KEY,
    source_id BLOB NOT NULL,
    observations TEXT NOT NULL,
    created_at NOT NULL
) WITHOUT ROWID;
INSERT INTO idempotency_keys_v3 SELECT key, source_id, observations, created_at
    FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_v3 RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_source ON idempotency_keys (source_id);
CREATE TABLE entities_v3 (
    id TEXT PRIMARY KEY,
    entity_type TEXT NOT NULL,
    canonical_name TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '[]',
    created_at NOT NULL,
    updated_at NOT NULL,
    snapshot TEXT NOT NULL,
    observation_count INTEGER NOT NULL,
    last_observation_at,
    message_count INTEGER NOT NULL DEFAULT 0
);
INSERT INTO entities_v3 SELECT id, entity_type, canonical_name, aliases, created_at,
    updated_at, snapshot, observation_count, last_observation_at, message_count
    FROM entities ORDER BY rowid;
DROP TABLE entities;
ALTER TABLE entities_v3 RENAME TO entities;
CREATE INDEX entities_by_type ON entities (entity_type, id);
"""


def _without_positions(table: str) -> str:
    """Rebuild an FTS5 trigram name index without positions or sizes (rowids kept)."""
    return f"""
CREATE VIRTUAL TABLE {table}_v3 USING fts5 (
    text, entity_id UNINDEXED, kind UNINDEXED, tokenize = 'trigram', detail = none,
    columnsize = 0
);
INSERT INTO {table}_v3 (rowid, text, entity_id, kind)
    SELECT rowid, text, entity_id, kind FROM {table} ORDER BY rowid;
DROP TABLE {table};
ALTER TABLE {table}_v3 RENAME TO {table};
"""


COMPACT_ROWS = (
    _COMPACT_TABLES + _without_positions("bookkeeping_names") + _without_positions("name_index")
)


def _seqs(conn: sqlite3.Connection, written: str) -> str:
    """A version-2 list of [entity id, type, observation id] as the seqs of those rows."""
    find = "SELECT seq FROM observations WHERE entity_id = ? AND id = ?"
    return json.dumps([conn.execute(find, (e, o)).fetchone()[0] for e, _, o in json.loads(written)])


def compact_rewrite(conn: sqlite3.Connection) -> None:
    conn.create_function("seqs_of", 1, lambda written: _seqs(conn, written))
    conn.create_function("compact_id", 1, encode_id, deterministic=True)
    conn.create_function("compact_time", 1, encode_opt_time, deterministic=True)
    conn.create_function(
        "compact_snapshot",
        1,
        lambda doc: encode_state(decode_state(doc, 0, None, None)),
        deterministic=True,
    )
    # The seqs first: they are found by the observation ids still in text.
    conn.execute(
        "UPDATE idempotency_keys SET observations = seqs_of(observations), "
        "source_id = compact_id(source_id), created_at = compact_time(created_at)"
    )
    conn.execute(
        "UPDATE observations SET id = compact_id(id), source_id = compact_id(source_id), "
        "observed_at = compact_time(observed_at)"
    )
    conn.execute(
        "UPDATE entities SET snapshot = compact_snapshot(snapshot), "
        "created_at = compact_time(created_at), updated_at = compact_time(updated_at), "
        "last_observation_at = compact_time(last_observation_at)"
    )


# Version 4: no value stored twice where it can be rebuilt (about a fifth fewer bytes per
# short turn than version 3).
#
# - ``observations``: one observation per entity may hold no fields (NULL): they are its
#   snapshot's (``_rows``: the snapshot doc's "s" names it); the entity type, observation
#   source, identity basis and rule as the index of a known word (``encode_word``), the
#   entity id as its 12 bytes (``encode_entity``), in untyped columns;
# - ``entities.snapshot``: the metas of the winning observations with the id as base64 and
#   the time as milliseconds;
# - ``relationships``: ``seen`` as the observation ids' 16 bytes end to end, the times as
#   milliseconds, ``computed_at`` NULL when it is the last observation's time (always, as
#   this store writes them);
# - ``conversation_messages``: keyed by (conversation, position in it) without a rowid, so
#   one B-tree instead of a table and its index; the position counts from 1 in each
#   conversation (renumbered here in the order of the old seqs); both ids as 12 bytes.
#
# As for version 3, the script moves the rows as they are, and ``share_fields`` rewrites
# the values SQL alone cannot.
SHARED_FIELDS = """
CREATE TABLE observations_v4 (
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
INSERT INTO observations_v4 SELECT seq, id, entity_id, entity_type, source_id, observed_at,
    source_priority, observation_source, specificity_score, fields, idempotency_key,
    identity_basis, identity_rule FROM observations ORDER BY seq;
DROP TABLE observations;
ALTER TABLE observations_v4 RENAME TO observations;
CREATE UNIQUE INDEX observations_by_entity ON observations (entity_id, id);
CREATE TABLE relationships_v4 (
    source_entity_id TEXT NOT NULL,
    relationship_type TEXT NOT NULL,
    target_entity_id TEXT NOT NULL,
    metadata TEXT NOT NULL,
    provenance TEXT NOT NULL,
    seen NOT NULL,
    observation_count INTEGER NOT NULL,
    last_observation_at NOT NULL,
    computed_at,
    PRIMARY KEY (source_entity_id, relationship_type, target_entity_id)
) WITHOUT ROWID;
INSERT INTO relationships_v4 SELECT source_entity_id, relationship_type, target_entity_id,
    metadata, provenance, seen, observation_count, last_observation_at,
    CASE WHEN computed_at = last_observation_at THEN NULL ELSE computed_at END
    FROM relationships;
DROP TABLE relationships;
ALTER TABLE relationships_v4 RENAME TO relationships;
CREATE INDEX relationships_by_target ON relationships (target_entity_id, relationship_type);
CREATE TABLE conversation_messages_v4 (
    conversation_id NOT NULL,
    seq INTEGER NOT NULL,
    message_id NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID;
INSERT INTO conversation_messages_v4 SELECT conversation_id,
    row_number() OVER (PARTITION BY conversation_id ORDER BY seq), message_id
    FROM conversation_messages;
DROP TABLE conversation_messages;
ALTER TABLE conversation_messages_v4 RENAME TO conversation_messages;
"""


def _compact_seen(value: str | bytes) -> str | bytes:
    return encode_seen(decode_seen(value))


def share_fields(conn: sqlite3.Connection) -> None:
    """The words, edge ids and times in their version-4 form; every snapshot doc rewritten,
    and the newest observation whose fields are exactly its entity's snapshot fields
    sharing them (``_rows``)."""
    from ._scan import keyset_rows  # a migration's: never a hook's (see there)

    conn.create_function("compact_word", 1, encode_word, deterministic=True)
    conn.create_function("compact_seen", 1, _compact_seen, deterministic=True)
    conn.create_function("compact_time", 1, encode_opt_time, deterministic=True)
    conn.create_function("compact_entity", 1, encode_entity, deterministic=True)
    conn.execute(
        "UPDATE conversation_messages SET conversation_id = compact_entity(conversation_id), "
        "message_id = compact_entity(message_id)"
    )
    conn.execute(
        "UPDATE observations SET entity_id = compact_entity(entity_id), "
        "entity_type = compact_word(entity_type), "
        "observation_source = compact_word(observation_source), "
        "identity_basis = compact_word(identity_basis), "
        "identity_rule = compact_word(identity_rule)"
    )
    conn.execute(
        "UPDATE relationships SET seen = compact_seen(seen), "
        "last_observation_at = compact_time(last_observation_at), "
        "computed_at = compact_time(computed_at)"
    )
    find = (
        "SELECT seq FROM observations WHERE entity_id = ? AND fields = ? ORDER BY seq DESC LIMIT 1"
    )
    entities = keyset_rows(
        conn,
        "SELECT rowid, id, snapshot, observation_count, last_observation_at FROM entities "
        "WHERE rowid > ? ORDER BY rowid LIMIT ?",
        -1,
    )
    for rowid, entity_id, doc, count, observed in entities:
        state = decode_state(doc, count, observed, None)  # a file before version 11's
        if state.shared is None:
            text = dumps(state.fields)
            found = conn.execute(find, (encode_entity(entity_id), text)).fetchone()
            if found is not None:
                state.shared = int(found[0])
                conn.execute("UPDATE observations SET fields = NULL WHERE seq = ?", found)
        conn.execute(
            "UPDATE entities SET snapshot = ? WHERE rowid = ?", (encode_state(state), rowid)
        )
