"""The type index as the versions before ``TYPE_PREFIX`` held it: keyed by the whole id,
for the copies of a file "as the version before held it" (opened again, the index is
keyed by the id's first 4 bytes again)."""

from __future__ import annotations

import sqlite3

from neotoma_agent.transport.embedded._schema import MIGRATIONS
from neotoma_agent.transport.embedded._type_prefix import TYPE_PREFIX

__all__ = ["PREFIXED", "unprefix"]

#: the version whose type index holds 4 bytes of the id
PREFIXED = MIGRATIONS.index(TYPE_PREFIX) + 1


def unprefix(conn: sqlite3.Connection) -> None:
    """The type index of the file of ``conn`` (in a transaction) keyed by the whole id."""
    conn.execute("DROP INDEX entities_by_type")
    conn.execute("CREATE INDEX entities_by_type ON entities (uid, type_code, id)")
