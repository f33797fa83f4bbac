"""The search index as the versions before ``SEARCH_PRESENCE`` held it: every word's
positions (FTS5's ``detail = full``), for the copies of a file "as the version before held
it" (opened again, it is declared without them and built again), and that version's
search, its own SQL on such a copy: FTS5's phrases, ``bm25()`` order."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from neotoma_agent._recall.search_text import fts_query, parse_query
from neotoma_agent.transport.embedded._connect import TURN_INDEX_LEAF_BYTES
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._schema import MIGRATIONS
from neotoma_agent.transport.embedded._search import rebuild
from neotoma_agent.transport.embedded._search_detail import SEARCH_PRESENCE

__all__ = ["PRESENCE", "declaration", "positioned_hits", "unpresence"]

#: the version whose search index keeps no positions
PRESENCE = MIGRATIONS.index(SEARCH_PRESENCE) + 1


def unpresence(conn: sqlite3.Connection) -> None:
    """The search index of the file of ``conn`` (in a transaction) declared with positions,
    as version 28 declared it, and built again from the entity rows."""
    conn.execute("DROP TABLE search_text")
    conn.execute(
        "CREATE VIRTUAL TABLE search_text USING fts5 "
        "(text, content = '', tokenize = 'unicode61 remove_diacritics 2')"
    )
    conn.execute(
        "INSERT INTO search_text (search_text, rank) VALUES ('pgsz', ?)", (TURN_INDEX_LEAF_BYTES,)
    )
    rebuild(conn)


def declaration(path: Path) -> str:
    """The search index's ``CREATE VIRTUAL TABLE`` statement in the file at ``path``."""
    with closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'search_text'")
        return str(row.fetchone()[0])


def positioned_hits(path: Path, query: str) -> list[str]:
    """The entity ids (every user's) a version-28 index at ``path`` finds for ``query``,
    FTS5's phrases and ``bm25()`` order (its rank), as that version's search asked it."""
    phrases = parse_query(query)
    if not phrases:
        return []
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT {entity_text('e.id')} FROM search_text JOIN entities e "
            "ON e.rowid = search_text.rowid WHERE search_text MATCH ? ORDER BY rank",
            (fts_query(phrases),),
        ).fetchall()
    return [str(r[0]) for r in rows]
