"""A copy of a store file as an older schema version held it (for a format step's tests).

Each step's support module says how to undo its step on a connection (``unnumber``,
``uncode``, ...); :func:`copy_at_version` runs those undo steps on a copy in one
transaction and sets the copy's version, so opening it upgrades it again.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from close_row_support import HELD, unclose
from derived_restatement_support import DERIVED, underive
from first_id_support import DERIVED_IDS, underive_ids
from id_prefix_support import PREFIXED_IDS, keyed
from key_digest_support import full_digests
from observation_index_support import unnumber_observations
from restatement_support import MARKED, unmark
from search_detail_support import PRESENCE, unpresence
from seq_metas_support import unseq
from type_prefix_support import PREFIXED, unprefix

from neotoma_agent.transport.embedded._close_room import CLOSE_ROOM
from neotoma_agent.transport.embedded._name_queue import NAME_QUEUE, unqueue
from neotoma_agent.transport.embedded._row_metas import SEQ_METAS
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["copy_at_version", "drop_room"]


def drop_room(conn: sqlite3.Connection, version: int) -> None:
    """A copy's entity rows as ``version`` held them: with no room column before
    ``_close_room``'s step (no read reads it; a turn record closed keeps none)."""
    if version <= MIGRATIONS.index(CLOSE_ROOM):
        conn.execute("ALTER TABLE entities DROP COLUMN room")


def copy_at_version(
    path: Path, to: Path, version: int, *undo: Callable[[sqlite3.Connection], object]
) -> Path:
    """A copy at ``to`` of the (closed) file at ``path``: each of ``undo`` run on it in
    order, in one transaction, and its version set to ``version`` (a version before the
    bookkeeping names' queue had none: its documents are moved into the index first)."""
    shutil.copyfile(path, to)
    with closing(sqlite3.connect(to, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        if version < HELD:  # (the latest step: undone first)
            unclose(conn)
        if version < PREFIXED_IDS:
            keyed(conn)
        if version < DERIVED_IDS:
            underive_ids(conn)
        if version < PRESENCE:
            unpresence(conn)
        if version < DERIVED:
            underive(conn)
        if version < PREFIXED:
            unprefix(conn)
        if version < MARKED:
            unmark(conn)
        if version <= MIGRATIONS.index(SEQ_METAS):
            unseq(conn)
        full_digests(conn, version)
        drop_room(conn, version)
        if version <= MIGRATIONS.index(NAME_QUEUE):
            unqueue(conn)
        unnumber_observations(conn, version)  # then: while the ids are packed
        for step in undo:
            step(conn)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
    return to
