"""The type index keyed by 4 bytes of the id (a schema step: ``TYPE_PREFIX``).

``entities_by_type`` held ``(uid, type_code, id)``: the 12 bytes of a packed id in every
entry, to give a type's rows in id order (a page of a type, its cursor, the exports'
walks). It holds ``(uid, type_code, substr(id, 1, 4))`` instead, an expression index: an
entry is 8 bytes smaller. The first 4 bytes of an id sort as the id does, but for ties (two
ids of one user and type that share them), so a statement that read a type in id order
orders by :func:`id_order` (``substr(id, 1, 4), id``): SQLite walks the index in the
prefix's order and sorts each run of equal prefixes by the id (``USE TEMP B-TREE FOR
RIGHT PART OF ORDER BY``), the same rows in the same order as before. A packed id is a
blob and ``substr`` of a blob is its bytes (an id held as its text, one that does not
pack, gives its first 4 characters: text sorts below every blob, as before). A statement
that named no order and read the index's order names it now.

The index no longer holds the id: a read of a type's ids reads each entry's table row,
and a page of a type sorts its runs; a query's page by offset sorts the rowids of the
rows it skips, then reads its page's rows (``_read``). A lookup by id within a type seeks
the id's own unique index. A turn reads nothing by type.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TYPE_PREFIX", "id_order"]

#: the migration (every migration is one transaction: ``_schema.migrate``)
TYPE_PREFIX: Final = """
-- the type index keyed by 4 bytes of the id (_type_prefix)
DROP INDEX entities_by_type;
CREATE INDEX entities_by_type ON entities (uid, type_code, substr(id, 1, 4));
"""


def id_order(column: str = "id", direction: str = "ASC") -> str:
    """SQL of an ``ORDER BY`` in the order of ``column`` (an entity row's id) that walks
    the type index: its first 4 bytes, then (a run of equal ones) the id."""
    return f"substr({column}, 1, 4) {direction}, {column} {direction}"
