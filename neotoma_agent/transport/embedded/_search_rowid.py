"""The search index keyed by the entity row's rowid (schema version 15), with no table between.

Until version 15 ``search_docs (doc INTEGER PRIMARY KEY, entity_id UNIQUE)`` numbered the
entities ``search_text`` indexes, a row's ``doc`` being its ``search_text`` rowid: a row
and an index entry more for every indexed entity (a message: about 94 bytes a turn, and
two statements). An entity row's own rowid numbers it as well, as ``bookkeeping_names``
numbers its rows (version 9): a hit is read from the entity row of its rowid, an update
takes the row out by the snapshot's text before it. Entity rows keep their rowids: none is
ever inserted again (version 14 rebuilt the table keeping them) and ``VACUUM`` keeps them.

The migration drops ``search_docs`` and builds the index again from the entity rows
(:func:`~._search.rebuild`, in rowid order), in the migration's one transaction.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ._search import rebuild

__all__ = ["SEARCH_BY_ROWID", "key_search_by_rowid"]

#: the migration's script (its rows are built by :func:`key_search_by_rowid` after it)
SEARCH_BY_ROWID: Final = """
DROP TABLE search_docs;
"""


def key_search_by_rowid(conn: sqlite3.Connection) -> None:
    """``search_text`` emptied and built again from the entity rows, keyed by their rowids."""
    rebuild(conn)
