"""The embedded store's SQLite schema, versioned with ``PRAGMA user_version``.

Each entry of ``MIGRATIONS`` takes the file from version ``i`` to ``i + 1``; opening a file
runs the missing ones in one transaction. A file written by a newer release is refused
rather than misread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ._close_room import CLOSE_ROOM
from ._close_row import CLOSE_ROW, move_closes
from ._codec_migration import FIELD_CODEC, code_fields
from ._conversation_index import NUMBERED_INDEX
from ._derived_restatement import DERIVED_RESTATEMENTS, derive_rows
from ._early_schema import (
    COMPACT_ROWS,
    CONVERSATION_MESSAGES,
    SHARED_FIELDS,
    V1,
    compact_rewrite,
    share_fields,
)
from ._first import merge_first, number_first_metas
from ._first_id import DERIVED_FIRST_IDS, derive_ids
from ._first_id import install as install_first_id
from ._id_prefix import ID_PREFIX, drop_key
from ._key_digest import KEY_DIGESTS, key_digest
from ._key_rows import PACKED_KEYS, pack_keys
from ._name_index import backfill_book_names
from ._name_queue import NAME_QUEUE
from ._observation_index import OBSERVATION_ROWS
from ._part_of import derived_seen_of
from ._restatement import RESTATED
from ._row_codes import ROW_CODES, recode_rows
from ._row_metas import SEQ_METAS, number_rows
from ._rows import encode_entity
from ._search_detail import SEARCH_PRESENCE, index_presence
from ._search_rowid import SEARCH_BY_ROWID, key_search_by_rowid
from ._summaries import backfill
from ._turn_names import GROUPED_NAMES, rebuild_book_names
from ._type_index import TYPE_CODES
from ._type_prefix import TYPE_PREFIX

__all__ = ["SCHEMA_VERSION", "migrate"]

# Version 5: one summary row per conversation (``_summaries``): what a list of conversations
# shows, kept by every store that changes it, so that the list is one indexed read
# (``live``: listed; the partial index holds only the listed rows, in the list's order). The
# rows of an older file are built by ``_summaries.backfill`` right after the script. And the
# conversation index gets a second way in, by message: a page ``before`` a message finds its
# position with one seek instead of walking the conversation's positions (a long
# conversation's deep page read every position before it). Nothing else changes, so every
# other read of an older file answers as before.
_SUMMARIES = """
CREATE TABLE conversation_summaries (
    entity_id TEXT PRIMARY KEY,
    live INTEGER NOT NULL DEFAULT 0,
    conversation_id TEXT,
    last_activity,
    title TEXT,
    platform TEXT,
    turns INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    abandoned INTEGER NOT NULL DEFAULT 0,
    open INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX conversation_summaries_by_activity
    ON conversation_summaries (last_activity, conversation_id) WHERE live = 1;
CREATE INDEX conversation_messages_by_message ON conversation_messages (message_id);
"""

# Version 6: full-text search over what was said (``_search``): one FTS5 row per live
# message (its text) and per live entity of a type the turn protocol does not write (its
# text fields), whole words with case and accents folded, kept by every store that changes
# them; ``search_docs`` finds an entity's row (to replace or drop it) by the entity's id, in
# its 12 bytes as ``conversation_messages`` holds it. Version 8 replaces both tables and
# builds their rows (``_search.backfill``); nothing else changes.
_SEARCH = """
CREATE VIRTUAL TABLE search_text USING fts5 (
    text, entity_id UNINDEXED, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE search_docs (
    entity_id PRIMARY KEY,
    doc INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Version 7: every row belongs to a user (``_scope``). ``users`` maps a user id to a small
# integer (never reused: AUTOINCREMENT), and ``uid`` on the rows a scan starts from holds it;
# 0 is the local dev user, so every row of an older file stays the unscoped store's. The
# indexes that serve scans lead with it (a user's reads never walk another's rows), and an
# idempotency key is a user's own (two users may store the same conversation id).
_USERS = """
CREATE TABLE users (
    uid INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL UNIQUE
);
ALTER TABLE entities ADD COLUMN uid INTEGER NOT NULL DEFAULT 0;
DROP INDEX entities_by_type;
CREATE INDEX entities_by_type ON entities (uid, entity_type, id);
ALTER TABLE conversation_summaries ADD COLUMN uid INTEGER NOT NULL DEFAULT 0;
DROP INDEX conversation_summaries_by_activity;
CREATE INDEX conversation_summaries_by_activity
    ON conversation_summaries (uid, last_activity, conversation_id) WHERE live = 1;
ALTER TABLE relationships ADD COLUMN uid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE field_values ADD COLUMN uid INTEGER NOT NULL DEFAULT 0;
DROP INDEX field_values_by_value;
DROP INDEX field_values_by_first_token;
CREATE INDEX field_values_by_value ON field_values (uid, value);
CREATE INDEX field_values_by_first_token ON field_values (uid, first_token);
CREATE TABLE idempotency_keys_v7 (
    uid INTEGER NOT NULL DEFAULT 0,
    key TEXT NOT NULL,
    source_id BLOB NOT NULL,
    observations TEXT NOT NULL,
    created_at NOT NULL,
    PRIMARY KEY (uid, key)
) WITHOUT ROWID;
INSERT INTO idempotency_keys_v7 (uid, key, source_id, observations, created_at)
    SELECT 0, key, source_id, observations, created_at FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_v7 RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_source ON idempotency_keys (source_id);
"""

# Version 8: the compact format's first steps (docs/storage.md).
#
# - ``search_text`` keeps no copy of the texts it indexes (FTS5 ``content = ''``): a hit's
#   text is read from its entity's snapshot, which holds it anyway (a third of a short
#   turn's bytes were that copy). ``search_docs`` numbers the indexed entities (its rowid
#   is the entity's ``search_text`` rowid; found by entity through its unique index, by
#   number through its key; version 15 drops it and keys the index by the entity rowid, and
#   its step builds the index from the entity rows: ``_search_rowid``);
# - ``idempotency_keys``: keyed by (user, the key's 16-byte digest: ``key_digest``), the
#   key's text once, in its row (an observation's ``source`` reads it back), not again in
#   the key's B-tree pages and in every entry of the index by source (about 100 bytes less
#   per key). The script moves the rows with a stand-in digest (unique as the key is);
#   ``_compact_format`` writes the digests right after it.
_COMPACT_FORMAT = """
CREATE TABLE idempotency_keys_v8 (
    uid INTEGER NOT NULL DEFAULT 0,
    digest BLOB NOT NULL,
    key TEXT NOT NULL,
    source_id BLOB NOT NULL,
    observations TEXT NOT NULL,
    created_at NOT NULL,
    PRIMARY KEY (uid, digest)
) WITHOUT ROWID;
INSERT INTO idempotency_keys_v8 (uid, digest, key, source_id, observations, created_at)
    SELECT uid, x'00' || CAST(key AS BLOB), key, source_id, observations, created_at
    FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_v8 RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_source ON idempotency_keys (source_id);
DROP TABLE search_text;
DROP TABLE search_docs;
CREATE VIRTUAL TABLE search_text USING fts5 (
    text, content = '', tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE search_docs (
    doc INTEGER PRIMARY KEY,
    entity_id NOT NULL UNIQUE
);
"""


def _compact_format(conn: sqlite3.Connection) -> None:
    """The keys' digests (the search index is built by version 15's step)."""
    conn.create_function("key_digest", 1, key_digest, deterministic=True)
    conn.execute("UPDATE idempotency_keys SET digest = key_digest(key)")


# Version 9: the compact format's next steps (docs/performance.md).
#
# - ``bookkeeping_names`` keeps no copy of the names it indexes (FTS5 ``content = ''``):
#   one row per conversation, message and turn record, its rowid the entity row's, its
#   text the entity's name and aliases (``_name_index.book_text``); a search checks its
#   candidates' names on their entity rows, which it reads anyway. (A real server finds
#   these names by any substring, as any other name: the index stays.) Built again from
#   the entity rows right after the script (``_name_index.backfill_book_names``). It keeps
#   its rows' sizes (``columnsize``, a few bytes a row), as ``search_text`` does: a
#   contentless table without them cannot be scanned, which ``iterdump`` does.
_COMPACT_NEXT = """
DROP TABLE bookkeeping_names;
CREATE VIRTUAL TABLE bookkeeping_names USING fts5 (
    text, content = '', tokenize = 'trigram', detail = none
);
"""


# Version 10: a message's PART_OF edge to its conversation, written by the store that
# created the message (at its time, without metadata), is derived from the conversation
# index (``_part_of``), not stored as a row. No table changes: ``_derive_part_of`` drops
# the rows exactly derivable right after the script. Any other edge keeps its row, and
# every read answers as before.
_DERIVED_PART_OF = """
-- version 10: PART_OF edges derived from conversation_messages (_part_of)
"""

# The rows ``_part_of`` derives: PART_OF, no metadata, one observation (the one it derives:
# the hash of the message's first observation's source and the edge's key), at the
# message's time, the message's user's, in the conversation index.
_DERIVABLE = """
DELETE FROM relationships
WHERE relationship_type = 'PART_OF' AND metadata = '{}' AND provenance = '{}'
    AND observation_count = 1 AND computed_at IS NULL
    AND EXISTS (SELECT 1 FROM conversation_messages cm
        WHERE cm.message_id = entity_key(relationships.source_entity_id)
        AND cm.conversation_id = entity_key(relationships.target_entity_id))
    AND last_observation_at = (SELECT m.created_at FROM entities m
        WHERE m.id = relationships.source_entity_id AND m.uid = relationships.uid)
    AND seen = derived_seen((SELECT o.source_id FROM observations o
        WHERE o.entity_id = entity_key(relationships.source_entity_id)
        ORDER BY o.seq LIMIT 1), source_entity_id, target_entity_id)
"""


def _derive_part_of(conn: sqlite3.Connection) -> None:
    """The PART_OF rows the conversation index now holds, dropped."""
    conn.create_function("entity_key", 1, encode_entity, deterministic=True)
    conn.create_function("derived_seen", 3, derived_seen_of, deterministic=True)
    conn.execute(_DERIVABLE)


# Version 11: an entity's first observation in its entity row (``_first``): a message,
# written once, is one row. ``_merge_first`` moves each entity's lowest-seq observation
# into its row where the row gives its time (``created_at``) and type back exactly, and
# renumbers it: seq 0 in its snapshot, minus the rowid in the key lists.
_FIRST_IN_ROW = """
ALTER TABLE entities ADD COLUMN first_id;
ALTER TABLE entities ADD COLUMN first_source;
ALTER TABLE entities ADD COLUMN first_key;
ALTER TABLE entities ADD COLUMN first_priority INTEGER;
ALTER TABLE entities ADD COLUMN first_osource;
ALTER TABLE entities ADD COLUMN first_specificity REAL;
ALTER TABLE entities ADD COLUMN first_basis;
ALTER TABLE entities ADD COLUMN first_rule;
ALTER TABLE entities ADD COLUMN first_fields TEXT;
"""

# Version 12: an entity's id as its 12 bytes in its row and its unique index, as the tables
# keyed by entity hold it (``_rows.encode_entity``): 16 bytes less in the row, in the id's
# index and in the type index (uid, type, id), for every entity. Every read binds the packed
# id and reads the text back (``entity_text`` in SQL, ``decode_entity`` in Python); the
# edges, field values, summaries and the name index keep the text. ``_pack_ids`` rewrites
# the rows right after the script and rebuilds the two indexes packed.
_PACKED_IDS = "\n-- version 12: entity ids packed in the entity rows (_rows.encode_entity)\n"


def _pack_ids(conn: sqlite3.Connection) -> None:
    """Every entity row's id packed, then its indexes built again (fuller pages)."""
    conn.create_function("entity_key", 1, encode_entity, deterministic=True)
    conn.execute("UPDATE entities SET id = entity_key(id)")
    conn.execute("REINDEX entities")


# Version 13: a snapshot's meta of its entity row's first observation (seq 0) as the number
# 0 alone (``_rows.FIRST_META``: its id, time, priority, source and specificity are the
# row's ``first_*`` columns and ``created_at``, which every reader selects beside the
# snapshot), instead of about 50 bytes repeating them. ``_first.number_first_metas``
# rewrites the docs that list one.
_META_NUMBERS = """
-- version 13: the first observation's meta in a snapshot as its number (_rows.FIRST_META)
"""


MIGRATIONS: tuple[str, ...] = (
    V1,
    CONVERSATION_MESSAGES,
    COMPACT_ROWS,
    SHARED_FIELDS,
    _SUMMARIES,
    _SEARCH,
    _USERS,
    _COMPACT_FORMAT,
    _COMPACT_NEXT,
    _DERIVED_PART_OF,
    _FIRST_IN_ROW,
    _PACKED_IDS,
    _META_NUMBERS,
    TYPE_CODES,  # version 14: the type index by word code (_type_index)
    SEARCH_BY_ROWID,  # version 15: the search index by entity rowid (_search_rowid)
    FIELD_CODEC,  # the protocol records' fields in a positional codec (_codec_migration)
    GROUPED_NAMES,  # one bookkeeping-names document a turn (_turn_names)
    NUMBERED_INDEX,  # the conversation index by entity row numbers (_conversation_index)
    PACKED_KEYS,  # version 19: the idempotency keys' rows packed (_key_rows)
    ROW_CODES,  # entity names, aliases and times coded (_row_codes)
    OBSERVATION_ROWS,  # version 21: observations by entity row number (_observation_index)
    NAME_QUEUE,  # new bookkeeping-names documents indexed a batch at a time (_name_queue)
    CLOSE_ROOM,  # version 23: room a turn record keeps for its close (_close_room)
    KEY_DIGESTS,  # version 24: the idempotency keys found by 4 bytes of digest (_key_digest)
    SEQ_METAS,  # version 25: a turn record's observation rows as their seq (_row_metas)
    RESTATED,  # version 26: a restatement's fields as a mark (_restatement)
    TYPE_PREFIX,  # version 27: the type index keyed by 4 bytes of the id (_type_prefix)
    DERIVED_RESTATEMENTS,  # version 28: a restatement derived (_derived_restatement)
    SEARCH_PRESENCE,  # version 29: the search index without positions (_search_detail)
    DERIVED_FIRST_IDS,  # version 30: a first observation's id derived from its row (_first_id)
    ID_PREFIX,  # version 31: the id index keyed by 4 bytes of the id (_id_prefix)
    CLOSE_ROW,  # version 32: a turn record's close in its entity row (_close_row)
)
SCHEMA_VERSION = len(MIGRATIONS)

# What runs right after a migration's script, for values SQL alone cannot rewrite.
_AFTER: dict[str, Callable[[sqlite3.Connection], None]] = {
    COMPACT_ROWS: compact_rewrite,
    SHARED_FIELDS: share_fields,
    _SUMMARIES: backfill,
    # (version 6's index is built by version 8's step, which replaces its tables)
    _COMPACT_FORMAT: _compact_format,
    _COMPACT_NEXT: backfill_book_names,  # the index built from the entity rows
    _DERIVED_PART_OF: _derive_part_of,
    _FIRST_IN_ROW: merge_first,
    _PACKED_IDS: _pack_ids,
    _META_NUMBERS: number_first_metas,
    SEARCH_BY_ROWID: key_search_by_rowid,
    FIELD_CODEC: code_fields,
    GROUPED_NAMES: rebuild_book_names,
    PACKED_KEYS: pack_keys,
    ROW_CODES: recode_rows,
    SEQ_METAS: number_rows,
    DERIVED_RESTATEMENTS: derive_rows,
    SEARCH_PRESENCE: index_presence,
    DERIVED_FIRST_IDS: derive_ids,
    ID_PREFIX: drop_key,
    CLOSE_ROW: move_closes,
}


class SchemaTooNewError(RuntimeError):
    """The file was written by a newer release of neotoma-agent."""


def _statements(script: str) -> list[str]:
    """Split a script into statements (``executescript`` would commit our transaction).

    A ``;`` inside a comment or a string does not end a statement: SQLite decides.
    """
    out: list[str] = []
    pending = ""
    for part in script.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\n;"):
                out.append(pending)
            pending = ""
    return out


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema up to ``SCHEMA_VERSION``; return the version found on disk."""
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"store schema version {found} is newer than this release supports "
            f"({SCHEMA_VERSION}); upgrade neotoma-agent"
        )
    if found == SCHEMA_VERSION:
        return found
    install_first_id(conn)  # (the steps that read FIRST_META prepare its derivation)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for version in range(found, SCHEMA_VERSION):
            script = MIGRATIONS[version]
            for statement in _statements(script):
                conn.execute(statement)
            if script in _AFTER:
                _AFTER[script](conn)
        # PRAGMA cannot take a parameter; the value is our own integer.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return found
