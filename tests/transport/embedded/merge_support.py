"""Stores whose entity rows hold their first observation, and the same stores without.

``unmerge`` writes, into a (closed) schema-11 file, each entity row's first observation
back as a row of ``observations``, as an entity the migration does not merge keeps it: seq
minus the entity's rowid (below every other row's, as the first one's was; the number the
key lists already name it by), its snapshot renumbered from 0 to it, the row's columns
cleared. Every read must answer the same on both. ``as_version_9`` makes such a copy a
file version 9 could have written (no ``first_*`` columns), for the migration tests.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from close_row_support import unclose
from codec_support import uncode
from conversation_index_support import unnumber
from derived_restatement_support import underive
from first_id_support import underive_ids
from observation_index_support import by_ids, unnumber_observations
from restatement_support import unmark
from seq_metas_support import unseq
from type_codes_support import untype

from neotoma_agent.transport.embedded._reducer import renumber
from neotoma_agent.transport.embedded._rows import (
    decode_state,
    encode_state,
    encode_word,
    entity_text,
)

_FIRST = (
    "first_id",
    "first_source",
    "first_key",
    "first_priority",
    "first_osource",
    "first_specificity",
    "first_basis",
    "first_rule",
    "first_fields",
)


def unmerge(path: Path) -> int:
    """Each entity row's first observation written back as a row; how many."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        unclose(conn, drop=False)  # the closes held in their turn records' rows: rows
        underive_ids(conn)  # the first observations' ids stored (their rows hold them)
        underive(conn, drop=False)  # the restatements derived from the rows' firsts: rows
        unseq(conn)  # the snapshots as version 23 held them
        unmark(conn)  # while the rows' first fields are there to restate
        uncode(conn)  # the docs as version 14 held them (the older versions read only those)
        rows = conn.execute(
            "SELECT rowid, id, entity_type, created_at, snapshot, observation_count, "
            f"last_observation_at, {', '.join(_FIRST)} FROM entities WHERE first_id IS NOT NULL"
        ).fetchall()
        # by the entity id (packed, as the entity row holds it: schema 12), or by the
        # entity row's number where the file holds that (``observation_index_support``)
        end = "entity_id" if by_ids(conn) else "entity_row"
        for rowid, entity_id, entity_type, created, doc, count, observed, *first in rows:
            seq = -int(rowid)
            conn.execute(
                f"INSERT INTO observations (seq, id, {end}, entity_type, source_id, "
                "observed_at, source_priority, observation_source, specificity_score, fields, "
                "idempotency_key, identity_basis, identity_rule) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    seq,
                    first[0],
                    entity_id if end == "entity_id" else rowid,  # as the rows hold it
                    encode_word(entity_type),
                    first[1],
                    created,
                    first[3],
                    first[4],
                    first[5],
                    first[8],
                    first[2],
                    first[6],
                    first[7],
                ),
            )
            meta = (first[0], created, first[3], first[4], first[5])  # _rows.FIRST_META
            state = decode_state(doc, count, observed, meta)
            renumber(state, 0, seq)
            conn.execute(
                f"UPDATE entities SET snapshot = ?, {' = NULL, '.join(_FIRST)} = NULL "
                "WHERE rowid = ?",
                (encode_state(state), rowid),
            )
        conn.execute("COMMIT")
        return len(rows)


def unmerged_copy(path: Path, to: Path) -> Path:
    shutil.copyfile(path, to)
    unmerge(to)
    return to


def as_version_9(path: Path) -> None:
    """The unmerged file at ``path`` without version 11's columns nor version 12's packed
    ids, at version 9."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        unnumber_observations(conn)  # while the ids are packed, as the rows held them
        unnumber(conn)  # while the ids are packed, as the index held them
        untype(conn)  # the entity rows as version 13 held them
        conn.execute(f"UPDATE entities SET id = {entity_text('id')}")
        for column in _FIRST:
            conn.execute(f"ALTER TABLE entities DROP COLUMN {column}")
        conn.execute("PRAGMA user_version = 9")
