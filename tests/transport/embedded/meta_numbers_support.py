"""Stores whose snapshots list their row's first observation as the number 0, and the same
stores as version 12 held them.

``expanded_copy`` writes, into a copy of a (closed) schema-13 file, every snapshot's meta
of its entity row's first observation (seq 0) back in full (``[id, 0, time, priority,
source rank]``, the specificity after them when it is not 1.0, from the row's
``first_*`` columns and ``created_at``), at version 12 (the file the release before the
step wrote; opening it upgrades it again) or left at 13 (read as it is: every reader takes
both forms). Every read must answer the same on all of them, and so must every write after.
"""

from __future__ import annotations

import binascii
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from close_row_support import unclose
from conversation_index_support import unnumber
from derived_restatement_support import underive
from first_id_support import underive_ids
from observation_index_support import by_ids, unnumber_observations
from restatement_support import unmark
from seq_metas_support import unseq
from type_codes_support import untype

from neotoma_agent.transport.embedded import _first_id
from neotoma_agent.transport.embedded._reducer import SnapshotState, source_rank
from neotoma_agent.transport.embedded._rows import (
    FIRST_META,
    SEQ_META,
    decode_state,
    decode_word,
)

#: the version before the snapshots listed the first observation as its number
BEFORE = 12


def _full(row: tuple[Any, ...]) -> list[Any]:
    first_id, created, priority, osource, specificity = row
    # The id as the base64 of its 16 bytes, as ``_rows`` writes a meta's id.
    encoded = binascii.b2a_base64(first_id, newline=False)[:-2].decode()
    meta = [encoded, 0, created, priority, source_rank(decode_word(osource))]
    return meta if specificity == 1.0 else [*meta, specificity]


def expand(path: Path, version: int = BEFORE) -> int:
    """Every snapshot's 0 in ``"o"`` as its meta in full, the file at ``version``; how
    many snapshots changed."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        unclose(conn)  # the closes as rows, as version 31 held them
        underive_ids(conn)  # the first observations' ids stored (the metas in full hold them)
        underive(conn)  # the restatements derived from messages as rows
        unseq(conn)  # the snapshots as version 23 held them
        unmark(conn)  # (the rows as every version before the mark held them)
        unnumber_observations(conn, version)
        rows = conn.execute(
            "SELECT rowid, snapshot, first_id, created_at, first_priority, first_osource, "
            "first_specificity FROM entities WHERE first_id IS NOT NULL"
        ).fetchall()
        count = 0
        for rowid, text, *first in rows:
            doc = json.loads(text)
            if 0 not in doc.get("o", []):
                continue
            doc["o"] = [_full(tuple(first)) if m == 0 else m for m in doc["o"]]
            text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
            conn.execute("UPDATE entities SET snapshot = ? WHERE rowid = ?", (text, rowid))
            count += 1
        unnumber(conn, version)
        if version < 14:
            untype(conn)  # the entity rows as version 13 held them
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
        return count


def expanded_copy(path: Path, to: Path, version: int = BEFORE) -> Path:
    shutil.copyfile(path, to)
    expand(to, version)
    return to


def numbered_metas(path: Path) -> tuple[int, int]:
    """(snapshots listing a first observation as 0, listing one in full: seq 0 in a list)."""
    with closing(sqlite3.connect(path)) as conn:
        docs = [json.loads(r[0]) for r in conn.execute("SELECT snapshot FROM entities")]
    metas = [m for d in docs for m in d.get("o", [])]
    return (
        sum(1 for m in metas if m == 0),
        sum(1 for m in metas if isinstance(m, list) and m[1] == 0),
    )


def states(path: Path) -> dict[int, dict[str, Any]]:
    """Every entity's snapshot state as the store decodes it (each attribute: the winners'
    metas among them), by rowid."""
    with closing(sqlite3.connect(path)) as conn:
        _first_id.install(conn)  # (FIRST_META derives a first observation's id)
        # (a file before version 21 holds its observation rows by entity id: no row by seq)
        rows = conn.execute(
            "SELECT rowid, snapshot, observation_count, last_observation_at, canonical_name, "
            f"{FIRST_META}, {'NULL' if by_ids(conn) else SEQ_META} FROM entities"
        ).fetchall()
    return {
        int(r[0]): _attributes(decode_state(r[1], r[2], r[3], r[5:10], r[4], r[10])) for r in rows
    }


def _attributes(state: SnapshotState) -> dict[str, Any]:
    return {name: getattr(state, name) for name in SnapshotState.__slots__}
