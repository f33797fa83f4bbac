"""The first observations' ids the versions before ``DERIVED_FIRST_IDS`` stored: each
derived id (``_first_id``) written back as its 16 bytes, for the copies of a file "as the
version before held it" (opened again, they are derived again)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from neotoma_agent.transport.embedded import _first_id, _schema
from neotoma_agent.transport.embedded._first_id import DERIVED_FIRST_IDS
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["DERIVED_IDS", "derived_count", "ids_kept", "underive_ids"]

#: the version whose entity rows may hold a first observation's id derived
DERIVED_IDS = MIGRATIONS.index(DERIVED_FIRST_IDS) + 1


def underive_ids(conn: sqlite3.Connection) -> int:
    """Each derived first observation's id of the file of ``conn`` (in a transaction)
    stored again as its 16 bytes; how many."""
    _first_id.install(conn)
    return conn.execute(
        f"UPDATE entities SET first_id = {_first_id.first_id_sql()} WHERE first_id = x''"
    ).rowcount


def derived_count(conn: sqlite3.Connection) -> int:
    """How many entity rows of the file of ``conn`` hold their first id derived."""
    return int(conn.execute("SELECT count(*) FROM entities WHERE first_id = x''").fetchone()[0])


@contextmanager
def ids_kept() -> Iterator[None]:
    """Upgrades that derive no first observation's id (every id kept: the reads of this
    release read both), for the tests of an earlier step that compare an upgraded file's
    rows with the older file's (``test_first_id`` upgrades the recorded files with it)."""
    saved = _schema._AFTER[DERIVED_FIRST_IDS]
    _schema._AFTER[DERIVED_FIRST_IDS] = lambda conn: None
    try:
        yield
    finally:
        _schema._AFTER[DERIVED_FIRST_IDS] = saved
