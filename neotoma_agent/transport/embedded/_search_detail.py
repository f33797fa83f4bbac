"""The search index without positions (a schema step: ``SEARCH_PRESENCE``).

``search_text`` kept every word's positions in each text (FTS5's ``detail = full``): what a
phrase's match and BM25's counts of each word read. It keeps whether a text holds a word
(``detail = none``) and each text's length in words (``columnsize``, its size record),
about half its bytes. What a search answers keeps its rule (:mod:`._search`): every word
of the query in every hit, a phrase's words next to each other in order (the AND of its
words from the index, each match's text checked, the limit after), hits best first. What
changes is what "best" counts: a word once per text (presence), so that each hit of one
query shares the same words' weights and the shorter text ranks first (equal lengths in
their entity rows' order); a hit's score is that BM25.

The migration declares the table again and builds it from the entity rows
(:func:`~._search.rebuild`, exactly what the store indexes), in the migration's one
transaction; the leaves' size is set on the next connection (``_connect``).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ._search import rebuild

__all__ = ["SEARCH_PRESENCE", "index_presence"]

#: the migration's script (its rows are built by :func:`index_presence` after it)
SEARCH_PRESENCE: Final = """
-- the search index without positions (_search_detail)
DROP TABLE search_text;
CREATE VIRTUAL TABLE search_text USING fts5 (
    text, content = '', detail = none, tokenize = 'unicode61 remove_diacritics 2'
);
"""


def index_presence(conn: sqlite3.Connection) -> None:
    """``search_text`` built from the entity rows (what the store indexes, in rowid order)."""
    rebuild(conn)
