"""The id index keyed by 4 bytes of the id (a schema step: ``ID_PREFIX``).

The entity table's ``PRIMARY KEY`` was its id: an index entry of about 22 bytes (the
packed id's 12, the rowid, a header) for every entity, there to find a row by id and to
keep ids unique. Neither needs the whole id. A store's write runs in one ``BEGIN
IMMEDIATE`` transaction that reads the rows of the ids it writes and inserts a row only
for an id it did not find, one writer at a time (``tests/transport/embedded/
test_entity_id_race.py``): the writer keeps ids unique. And a lookup finds its row by the
id's first 4 bytes, then compares the whole id on the rows they find (one, but for the rare
ids that share them). So the table has no ``PRIMARY KEY``, and ``entities_by_id`` is keyed
by ``substr(id, 1, 4)``, an expression index (a packed id is a blob and ``substr`` of a blob
is its bytes; an id held as its text, one that does not pack, gives its first 4
characters, as the lookup's own value does).

Every comparison of an entity row's id with a value is :func:`id_is` (:func:`ids_in`,
:func:`id_among` for a set): the prefix's term seeks the index, and the id's own term is
written ``+id``, which no index answers. SQLite 3.40 plans ``substr(id, 1, 4) = substr(?1,
1, 4) AND id = ?1`` as a scan of the table (without statistics it does not take the
prefix's index once the id's own term is there), and the same with ``+id`` as a seek of
the prefix (``tests/transport/embedded/test_id_prefix.py`` checks the plan of every
statement that compares an entity row's id). The value is written twice, so it is a
numbered parameter (``?1``) or an expression of the row a join comes from.

The migration rebuilds the table without its ``PRIMARY KEY`` (:func:`drop_key`, rowids
kept: every table that numbers entities names them), then builds its indexes again.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Final

__all__ = ["ID_INDEX", "ID_PREFIX", "drop_key", "id_among", "id_is", "ids_in", "one_row"]

#: the id's index (its name: the plan test looks for it)
ID_INDEX: Final = "entities_by_id"

#: the migration: the table rebuilt by :func:`drop_key`, right after it
ID_PREFIX: Final = "\n-- the id index keyed by 4 bytes of the id (_id_prefix)\n"

_KEY: Final = "id TEXT PRIMARY KEY,"

#: up to this many ids, :func:`id_among` is an ``OR`` of :func:`id_is`
_OR_TERMS: Final = 16


def id_is(value: str, column: str = "id") -> str:
    """SQL that the entity row's ``column`` is ``value`` (a numbered parameter or an
    expression: it is written twice), which seeks the id index by the prefix."""
    return f"substr({column}, 1, 4) = substr({value}, 1, 4) AND +{column} = {value}"


def one_row(value: str) -> str:
    """SQL that an ``UPDATE`` of ``entities`` writes the row whose id is ``value`` (as
    :func:`id_is`) by its rowid: SQLite then knows it writes one row, where through the
    id's non-unique index it opens a statement journal, whose savepoint makes each
    full-text index flush its pending terms into a segment of their own."""
    return f"rowid = (SELECT rowid FROM entities WHERE {id_is(value)})"


def ids_in(ids: str, column: str = "id") -> str:
    """SQL that the entity row's ``column`` is one of the ids of ``ids`` (SQL of a JSON
    list of their texts: a numbered parameter, written twice), packed (``entity_key``),
    which seeks the id index by each one's prefix."""
    packed = f"SELECT entity_key(value) FROM json_each({ids})"
    prefixes = f"SELECT substr(entity_key(value), 1, 4) FROM json_each({ids})"
    return f"substr({column}, 1, 4) IN ({prefixes}) AND +{column} IN ({packed})"


def id_among(count: int, column: str = "id", first: int = 1) -> str:
    """SQL that the entity row's ``column`` is one of ``count`` packed ids bound as the
    parameters ``?first`` onwards, which seeks the id index by each one's prefix: a few as
    :func:`id_is` each, or'ed (SQLite seeks each and keeps a row once, with no temporary
    table: a lookup of 3 ids took about 90,000 instructions against 147,000 as two ``IN``
    lists and 112,000 through the key), more as ``IN`` lists of the prefixes and the ids."""
    marks = [f"?{first + i}" for i in range(count)]
    if count <= _OR_TERMS:
        return "(" + " OR ".join(f"({id_is(m, column)})" for m in marks) + ")"
    prefixes = ", ".join(f"substr({m}, 1, 4)" for m in marks)
    return f"substr({column}, 1, 4) IN ({prefixes}) AND +{column} IN ({', '.join(marks)})"


def drop_key(conn: sqlite3.Connection) -> None:
    """The entity table rebuilt without its ``PRIMARY KEY`` (rowids kept), its indexes (the
    type index, and any other a step before made) built again, and the id's index built."""
    table, indexes = _schema(conn)
    if _KEY not in table:  # (the table as every release wrote it: its key on the id)
        raise RuntimeError("the entity table has no key on its id")
    unkeyed = table.replace(_KEY, "id TEXT NOT NULL,")
    conn.execute(
        re.sub(r'^CREATE TABLE ("entities"|entities)', "CREATE TABLE entities_new", unkeyed)
    )
    stored = ", ".join(
        name
        for _, name, _, _, _, _, hidden in conn.execute("PRAGMA table_xinfo(entities)")
        if hidden == 0
    )
    conn.execute(
        f"INSERT INTO entities_new (rowid, {stored}) "
        f"SELECT rowid, {stored} FROM entities ORDER BY rowid"
    )
    conn.execute("DROP TABLE entities")
    conn.execute("ALTER TABLE entities_new RENAME TO entities")
    for sql in indexes:
        conn.execute(sql)
    conn.execute(f"CREATE INDEX {ID_INDEX} ON entities (substr(id, 1, 4))")


def _schema(conn: sqlite3.Connection) -> tuple[str, list[str]]:
    rows = conn.execute(
        "SELECT type, sql FROM sqlite_master WHERE tbl_name = 'entities' "
        "AND sql IS NOT NULL ORDER BY rowid"
    )
    table = ""
    indexes: list[str] = []
    for kind, sql in rows:
        if kind == "table":
            table = str(sql)
        else:
            indexes.append(str(sql))
    return table, indexes
