"""The entity table as the versions before ``ID_PREFIX`` held it: keyed by its id (its
``PRIMARY KEY``, ``sqlite_autoindex_entities_1``), with no index on the id's prefix, for
the copies of a file "as the version before held it" (opened again, the table is rebuilt
without the key and the prefix's index built)."""

from __future__ import annotations

import sqlite3

from neotoma_agent.transport.embedded._id_prefix import ID_INDEX, ID_PREFIX
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["PREFIXED_IDS", "keyed"]

#: the version whose entity table is found by 4 bytes of the id
PREFIXED_IDS = MIGRATIONS.index(ID_PREFIX) + 1


def keyed(conn: sqlite3.Connection) -> None:
    """The entity table of the file of ``conn`` (in a transaction) keyed by its id again
    (rowids kept), its other indexes built again, the prefix's index dropped."""
    table = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'entities'").fetchone()[0]
    assert "id TEXT NOT NULL," in table
    indexes = [
        sql
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'entities' AND type = 'index' "
            f"AND name != '{ID_INDEX}' AND sql IS NOT NULL ORDER BY rowid"
        )
    ]
    stored = ", ".join(r[1] for r in conn.execute("PRAGMA table_xinfo(entities)") if r[6] == 0)
    conn.execute(
        table.replace("id TEXT NOT NULL,", "id TEXT PRIMARY KEY,", 1)
        .replace("CREATE TABLE entities", "CREATE TABLE entities_keyed", 1)
        .replace('CREATE TABLE "entities"', "CREATE TABLE entities_keyed", 1)
    )
    conn.execute(
        f"INSERT INTO entities_keyed (rowid, {stored}) "
        f"SELECT rowid, {stored} FROM entities ORDER BY rowid"
    )
    conn.execute("DROP TABLE entities")
    conn.execute('ALTER TABLE entities_keyed RENAME TO "entities"')
    for sql in indexes:
        conn.execute(sql)
