"""Full-text search over what was said: every message's text and every entity's text fields.

``search_text`` (:mod:`._schema`) is a contentless FTS5 table (schema version 8: it keeps
the words' postings, not a copy of the texts, which the entity rows already hold) with the
``unicode61 remove_diacritics 2`` tokenizer (whole words, case and accents folded), one row
per live ``conversation_message`` (its ``content``) and per live entity of a type the turn
protocol does not write itself (its text fields, one a line). A row's rowid is its entity
row's (schema version 15, :mod:`._search_rowid`): a hit is its entity row, with no table
between them (entity rows keep their rowids: no step re-inserts one, and ``VACUUM`` keeps
them). :func:`index_search` keeps it: ``_write._observe`` calls it for every observation
folded into a snapshot, inside the store's own transaction, so the index changes with the
snapshot or not at all. A contentless row is taken out by naming the text it was given,
which is the snapshot's text before the observation (every change of a snapshot passes
here). A soft deletion (``forget``) takes the row out, a restore puts it back under the
same rowid; ``purge_forgotten`` builds the index again from the live rows (:func:`rebuild`,
which a migration runs too).

:func:`text_search` is the read behind ``POST /text_search``, an extension of this store and
the dev server (a real Neotoma server answers 404): BM25 order (FTS5's ``rank``; equal ranks
in the order of the entity rows, their creation's), at most ``limit`` hits, each hit's text
read from its entity's snapshot, optionally the messages of one conversation only (by its
conversation index).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from ..._recall.search_text import (
    ENTITY_KIND,
    MAX_HITS,
    MESSAGE_KIND,
    doc_text,
    fts_query,
    parse_query,
)
from ..._recall.search_text import MESSAGE_TYPE as _MESSAGE
from ..._records.keys import conversation_entity_id, parse_turn_key
from ..._records.payloads import BOOKKEEPING_TYPES
from ...exceptions import EmptySearchQueryError, ValidationError
from . import _scope
from ._codec import field_sql, fields_sql
from ._conversation_index import row_of
from ._errors import flat_error, invalid_format
from ._id_prefix import id_is
from ._page_rows import decode_fields
from ._reducer import SnapshotChange
from ._rows import decode_doc_fields, decode_entity, encode_entity, owned_entity
from ._validate import bounded_int

__all__ = ["index_search", "rebuild", "text_search"]


_INSERT = "INSERT INTO search_text (rowid, text) VALUES (?, ?)"


def index_search(conn: sqlite3.Connection, change: SnapshotChange, rowid: int | None) -> None:
    """Move the entity's row as one observation moved its snapshot (``change``): nothing to
    do unless its text or its deletion changed. ``rowid``: the entity row's, if the caller
    holds it (else read, when there is something to do)."""
    kind, old = change.entity_type, change.old_fields
    before = None if change.old_deleted or not old else doc_text(kind, old)
    after = None if change.deleted else doc_text(kind, change.fields)
    if before == after:
        return
    if rowid is None:
        (rowid,) = conn.execute(
            f"SELECT rowid FROM entities WHERE {id_is('?1')}", (encode_entity(change.entity_id),)
        ).fetchone()
    if before is not None:
        # A contentless row goes by its text: the one it was given, the snapshot's before.
        conn.execute(
            "INSERT INTO search_text (search_text, rowid, text) VALUES ('delete', ?, ?)",
            (rowid, before),
        )
    if after is not None:
        conn.execute(_INSERT, (rowid, after))


def _backfill(conn: sqlite3.Connection) -> None:
    """The rows of every live entity, into an empty index, in rowid order (FTS5 writes a
    transaction's rows as one segment while their rowids ascend)."""
    from ._scan import keyset_rows  # a migration's or a purge's: never a hook's (see there)

    rows = keyset_rows(
        conn,
        "SELECT rowid, entity_type, snapshot, canonical_name FROM entities WHERE rowid > ? "
        "ORDER BY rowid LIMIT ?",
        0,
    )
    for rowid, entity_type, doc, name in rows:
        if entity_type != _MESSAGE and entity_type in BOOKKEEPING_TYPES:
            continue
        fields, deleted = decode_doc_fields(doc, name)
        text = None if deleted else doc_text(entity_type, fields)
        if text is not None:
            conn.execute(_INSERT, (rowid, text))


def rebuild(conn: sqlite3.Connection) -> None:
    """The index emptied and built again from the live rows (a purge: a contentless row of
    an entity no longer live cannot be named by its text, and none of its words may stay;
    the migrations that build it)."""
    conn.execute("INSERT INTO search_text (search_text) VALUES ('delete-all')")
    _backfill(conn)


def _query(body: Mapping[str, Any]) -> str | None:
    """The FTS5 query of the body's ``q``; ``None`` when it holds no word."""
    q = body.get("q")
    if not isinstance(q, str):
        raise invalid_format("q (the text to search for) is required", ["q"])
    try:
        phrases = parse_query(q)
    except EmptySearchQueryError:
        raise flat_error(ValidationError, 400, "VALIDATION_ERROR", "q is empty") from None
    return fts_query(phrases) if phrases else None


def _conversation_of(
    conn: sqlite3.Connection, packed: str | bytes, cache: dict[str | bytes, str | None]
) -> str | None:
    """The ``conversation_id`` of the conversation a message is PART_OF."""
    if packed not in cache:
        row = conn.execute(
            f"SELECT {field_sql('conversation_id', 'e.snapshot', 'e.canonical_name')} "
            "FROM conversation_messages m "
            "JOIN entities e ON e.rowid = m.conversation_row "
            f"WHERE m.message_row = {row_of('?')} AND {_scope.owned('e')} LIMIT 1",
            (packed,),
        ).fetchone()
        cache[packed] = row[0] if row is not None and isinstance(row[0], str) else None
    return cache[packed]


def _hit(
    conn: sqlite3.Connection,
    packed: str | bytes,
    rank: float,
    scope: str | None,
    cache: dict[str | bytes, str | None],
) -> dict[str, Any] | None:
    entity_id = decode_entity(packed)
    columns = f"entity_type, canonical_name, {fields_sql()}"
    row = owned_entity(conn, columns, entity_id)
    if row is None:
        return None
    entity_type, name, fields_text = row
    fields = decode_fields(fields_text)
    hit: dict[str, Any] = {
        "kind": ENTITY_KIND,
        "entity_id": entity_id,
        "entity_type": entity_type,
        "message_id": None,
        "conversation_id": None,
        "turn_id": None,
        "role": None,
        "name": name,
        "text": doc_text(entity_type, fields),
        "score": -rank,
    }
    if entity_type != _MESSAGE:
        return hit
    conversation = scope or _conversation_of(conn, packed, cache)
    turn_key = fields.get("turn_key")
    parsed = parse_turn_key(turn_key, conversation) if isinstance(turn_key, str) else None
    role = fields.get("role")
    hit.update(
        kind=MESSAGE_KIND,
        message_id=entity_id,
        conversation_id=conversation or (parsed[0] if parsed else None),
        turn_id=parsed[1] if parsed else None,
        role=role if isinstance(role, str) else (parsed[2] if parsed else None),
        name=None,
    )
    return hit


def text_search(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /text_search``: ``q`` (plain text), ``limit`` (1–100, default 10) hits, best
    first; ``conversation_id``: that conversation's messages only."""
    limit = bounded_int(body.get("limit", 10), "limit", 1, MAX_HITS)
    scope = body.get("conversation_id")
    if scope is not None and not isinstance(scope, str):
        raise invalid_format("conversation_id must be a string", ["conversation_id"])
    match = _query(body)
    if match is None:
        return {"hits": [], "partial": False}
    # The entity of each row by its rowid, in the select list: the FTS5 table stays the
    # only one the query walks, so it answers the rank order and the LIMIT itself.
    sql = (
        "SELECT (SELECT id FROM entities WHERE rowid = search_text.rowid), rank "
        "FROM search_text WHERE search_text MATCH ?"
    )
    params: list[Any] = [match]
    if scope is not None:
        sql += (
            " AND rowid IN (SELECT m.message_row FROM conversation_messages m "
            f"WHERE m.conversation_row = {row_of('?')})"
        )
        params.append(encode_entity(conversation_entity_id(scope, _scope.tenant())))
    if not _scope.alone(conn):
        # Each match's owner, before the ranking's LIMIT: another user's rows take no place.
        sql += (
            " AND EXISTS (SELECT 1 FROM entities e WHERE e.rowid = search_text.rowid "
            f"AND {_scope.owned('e')})"
        )
    rows = conn.execute(sql + " ORDER BY rank LIMIT ?", (*params, limit)).fetchall()
    cache: dict[str | bytes, str | None] = {}
    hits = [_hit(conn, packed, rank, scope, cache) for packed, rank in rows if packed is not None]
    return {"hits": [h for h in hits if h is not None], "partial": False}
