"""The observation rows as the versions before ``RESTATED`` held them: a marked row's fields
(``_restatement``) written back as the text of its entity row's ``first_fields``, for the
copies of a file "as the version before held it" (opened again, they are marked again)
and for the copies that clear or move an entity row's first observation."""

from __future__ import annotations

import sqlite3

from neotoma_agent.transport.embedded._restatement import MARK, RESTATED
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["MARKED", "unmark"]

#: the version whose rows may hold a mark
MARKED = MIGRATIONS.index(RESTATED) + 1


def unmark(conn: sqlite3.Connection) -> int:
    """Each marked row of the file of ``conn`` (in a transaction) given its text back; how
    many. (By the entity row's number or id, as the rows hold it.)"""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(observations)")}
    end = "e.rowid = observations.entity_row"
    if "entity_row" not in columns:
        end = "e.id = observations.entity_id"
    return conn.execute(
        "UPDATE observations SET fields = "
        f"(SELECT e.first_fields FROM entities e WHERE {end}) WHERE fields = {MARK}"
    ).rowcount
