"""Stores whose entity rows hold their ids packed, and the same stores as version 11 held
them.

``unpacked_copy`` writes, into a copy of a (closed) schema-12 file, every entity row's id
back as its text, at version 11: the file the release before the step wrote for the same
writes. Opening it upgrades it again; every read must answer the same on both, and so must
every write after.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from close_row_support import unclose
from conversation_index_support import unnumber
from derived_restatement_support import underive
from observation_index_support import unnumber_observations
from restatement_support import unmark
from seq_metas_support import unseq
from type_codes_support import untype

from neotoma_agent.transport.embedded._rows import entity_text

#: the version before the entity rows held their ids packed
BEFORE = 11


def unpack(path: Path) -> int:
    """Every entity row's id as its text again, the file at version 11; how many rows."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        unclose(conn)  # the closes as rows, as version 28 held them
        underive(conn)  # the restatements derived from messages as rows
        unseq(conn)  # the snapshots as version 23 held them
        unmark(conn)  # (the rows as every version before the mark held them)
        unnumber_observations(conn)  # while the ids are packed, as the rows held them
        unnumber(conn)  # while the ids are packed, as the index held them
        count = conn.execute(f"UPDATE entities SET id = {entity_text('id')}").rowcount
        untype(conn)  # the entity rows as version 13 held them
        conn.execute(f"PRAGMA user_version = {BEFORE}")
        conn.execute("COMMIT")
        return int(count)


def unpacked_copy(path: Path, to: Path) -> Path:
    shutil.copyfile(path, to)
    unpack(to)
    return to


def id_types(path: Path) -> set[tuple[str, int]]:
    """The (SQLite type, length) of every entity row's id, as the row and the type index
    hold it (the index read alone: it covers the id)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT typeof(id), length(id) FROM entities").fetchall()
        rows += conn.execute(
            "SELECT typeof(id), length(id) FROM entities INDEXED BY entities_by_type "
            "WHERE uid >= 0 AND entity_type > ''"
        ).fetchall()
    return {(str(r[0]), int(r[1])) for r in rows}


def entity_ids(path: Path) -> list[str]:
    """Every entity's id (every user's), in id order, as text whichever way it is held."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(f"SELECT {entity_text('id')} FROM entities ORDER BY 1").fetchall()
    return [str(r[0]) for r in rows]


def ids_of_type(path: Path, entity_type: str) -> list[str]:
    """The ids of the entities of ``entity_type`` (every user's), in row order, as text."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT {entity_text('id')} FROM entities WHERE entity_type = ? ORDER BY rowid",
            (entity_type,),
        ).fetchall()
    return [str(r[0]) for r in rows]


def entity_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every entity row, every column, by rowid: but the room a turn record keeps for its
    close (``room``, which no read reads: ``_close_room``; a row an older version wrote
    keeps none)."""
    with closing(sqlite3.connect(path)) as conn:
        cur = conn.execute("SELECT rowid, * FROM entities ORDER BY rowid")
        kept = [i for i, d in enumerate(cur.description) if d[0] != "room"]
        return [tuple(row[i] for i in kept) for row in cur.fetchall()]
