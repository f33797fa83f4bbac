"""Stores whose search index is keyed by the entity rows' rowids (schema version 15), and the
same stores as version 14 held them.

``unkey`` numbers the indexed entities in ``search_docs`` again and keys ``search_text`` by
those numbers, as version 14 held them: numbered in entity id order (as version 8's
migration and a purge numbered them), so that a number and its entity's rowid differ. The
helpers that write a file back to an older version call it first (through
``type_codes_support.untype``); ``unkeyed_copy`` writes a copy of a (closed) file at the
version before the step. Opening it upgrades it again; every read must answer the same on
both, and so must every write after.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from codec_support import uncode
from conversation_index_support import unnumber
from version_copy_support import copy_at_version

from neotoma_agent._recall.search_text import doc_text
from neotoma_agent.transport.embedded._rows import decode_doc_fields, encode_entity, entity_text
from neotoma_agent.transport.embedded._schema import MIGRATIONS
from neotoma_agent.transport.embedded._search_rowid import SEARCH_BY_ROWID

#: the version before the search index was keyed by the entity rowid
BEFORE = MIGRATIONS.index(SEARCH_BY_ROWID)


def unkey(conn: sqlite3.Connection) -> None:
    """``search_docs`` and ``search_text`` keyed by its numbers, as version 14 held them
    (inside the caller's transaction; the caller sets the version). Nothing to do on a file
    that has ``search_docs``."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_docs'").fetchone():
        return
    indexed = {r[0] for r in conn.execute("SELECT id FROM search_text_docsize")}
    texts: dict[str, str] = {}
    sql = f"SELECT rowid, {entity_text('id')}, entity_type, snapshot, canonical_name FROM entities"
    for rowid, entity_id, entity_type, doc, name in conn.execute(sql).fetchall():
        if rowid in indexed:
            fields, _ = decode_doc_fields(doc, name)
            text = doc_text(entity_type, fields)
            assert text is not None
            texts[entity_id] = text
    assert len(texts) == len(indexed)
    conn.execute("INSERT INTO search_text (search_text) VALUES ('delete-all')")
    conn.execute("CREATE TABLE search_docs (doc INTEGER PRIMARY KEY, entity_id NOT NULL UNIQUE)")
    for entity_id in sorted(texts):
        cur = conn.execute(
            "INSERT INTO search_docs (entity_id) VALUES (?)", (encode_entity(entity_id),)
        )
        conn.execute(
            "INSERT INTO search_text (rowid, text) VALUES (?, ?)", (cur.lastrowid, texts[entity_id])
        )


def unkeyed_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` as version 14 held it."""
    # (uncode: the fields as objects, as version 14 held them)
    return copy_at_version(path, to, BEFORE, unnumber, uncode, unkey)


def search_rows(path: Path) -> list[tuple[Any, ...]]:
    """The index's rows: each one's rowid and its entity's id (schema 15: the entity row of
    that rowid; before: ``search_docs``'s entity of that number)."""
    with closing(sqlite3.connect(path)) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_docs'").fetchone():
            sql = (
                f"SELECT z.id, {entity_text('d.entity_id')} FROM search_text_docsize z "
                "JOIN search_docs d ON d.doc = z.id ORDER BY z.id"
            )
        else:
            sql = (
                f"SELECT z.id, {entity_text('e.id')} FROM search_text_docsize z "
                "JOIN entities e ON e.rowid = z.id ORDER BY z.id"
            )
        return conn.execute(sql).fetchall()
