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
the dev server (a real Neotoma server answers 404): the texts holding every word of the query
(since schema version 29, :mod:`._search_detail`, the index keeps no positions: a phrase of
two words or more is the AND of its words, checked on each match's text as the index's
tokenizer splits it, the limit after), best first by BM25 with each word counted once (every
hit holds every word: the shorter text first, SQLite sorting the matches by their size
records; equal lengths in the order of the entity rows, their creation's), at most ``limit``
hits, each hit's text read from its entity's snapshot, optionally the messages of one
conversation only (by its conversation index). A hit's score is that BM25 (FTS5's constants
and weights: :func:`_scorer`).
"""

from __future__ import annotations

import functools
import math
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._recall.search_text import (
    ENTITY_KIND,
    MAX_HITS,
    MESSAGE_KIND,
    Phrase,
    doc_text,
    fts_query,
    parse_query,
    words,
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


# BM25's constants (FTS5's)
_K1 = 1.2
_B = 0.75

#: the packed id of the entity row of a search_text rowid
_ENTITY_OF = "(SELECT id FROM entities WHERE rowid = search_text.rowid)"
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


def _phrases(body: Mapping[str, Any]) -> tuple[Phrase, ...]:
    """The phrases of the body's ``q`` (none when it holds no word)."""
    q = body.get("q")
    if not isinstance(q, str):
        raise invalid_format("q (the text to search for) is required", ["q"])
    try:
        return parse_query(q)
    except EmptySearchQueryError:
        raise flat_error(ValidationError, 400, "VALIDATION_ERROR", "q is empty") from None


_TOKENIZER_LOCK = threading.Lock()
_tokenizer: sqlite3.Connection | None = None


def _index_tokens(text: str) -> tuple[str, ...]:
    """The words the index makes of ``text``, folded, in order: the matching rule's
    (:func:`~neotoma_agent._recall.search_text.words`) where it is ASCII; else its
    tokenizer's own (a table of its own in memory, on a connection of its own): its Unicode
    tables may be older than Python's (a mark it does not know cuts a word in two) and it
    folds letters Python does not decompose (``ø`` as ``o``)."""
    global _tokenizer
    if text.isascii():
        return tuple(words(text))
    with _TOKENIZER_LOCK:
        if _tokenizer is None:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            conn.execute(
                "CREATE VIRTUAL TABLE words USING fts5 "
                "(text, tokenize = 'unicode61 remove_diacritics 2')"
            )
            conn.execute("CREATE VIRTUAL TABLE terms USING fts5vocab(words, instance)")
            _tokenizer = conn
        _tokenizer.execute("INSERT INTO words (rowid, text) VALUES (1, ?)", (text,))
        try:
            found = _tokenizer.execute("SELECT term FROM terms ORDER BY offset").fetchall()
        finally:
            _tokenizer.execute("DELETE FROM words")
    return tuple(str(t) for (t,) in found)


_index_words = functools.lru_cache(maxsize=1024)(_index_tokens)


def _holds(tokens: Sequence[str], phrase: Sequence[str]) -> bool:
    """Whether ``phrase``'s words come in ``tokens`` next to each other, in order."""
    n = len(phrase)
    first = phrase[0]
    return any(
        tokens[i] == first and tuple(tokens[i : i + n]) == phrase
        for i in range(len(tokens) - n + 1)
    )


def _varint(data: bytes, at: int = 0) -> tuple[int, int]:
    """The SQLite varint at ``at`` in ``data`` (FTS5's records: 7 bits a byte, the high
    bit set on every byte but the last, most significant first) and the offset after it."""
    value = 0
    for n in range(9):
        byte = data[at + n]
        if n == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + n + 1
    raise AssertionError("unreachable")  # pragma: no cover


def _scorer(conn: sqlite3.Connection, terms: Sequence[str]) -> Callable[[int], float]:
    """A hit's score from its length in words: BM25 with each query word counted once
    (every hit holds every word), over the whole index: FTS5's constants (k1 = 1.2,
    b = 0.75), its documents' count and mean length (its averages record), each word's
    documents (its matches)."""
    row = conn.execute("SELECT block FROM search_text_data WHERE id = 1").fetchone()
    documents, at = _varint(row[0]) if row and row[0] else (0, 0)
    mean = (_varint(row[0], at)[0] / documents) if documents else 1.0
    idf = 0.0
    for term in terms:
        (n,) = conn.execute(
            "SELECT count(*) FROM search_text WHERE search_text MATCH ?", (fts_query([(term,)]),)
        ).fetchone()
        idf += max(math.log((documents - n + 0.5) / (n + 0.5)), 1e-6)

    def score(length: int) -> float:
        return idf * (_K1 + 1) / (1 + _K1 * (1 - _B + _B * length / (mean or 1.0)))

    return score


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
        "score": 0.0,  # (the caller's: its BM25)
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
    phrases = _phrases(body)
    if not phrases:
        return {"hits": [], "partial": False}
    # Each phrase as the index's words (a word it cuts in two: both, next to each other;
    # one it does not see at all: none, as FTS5 drops it from a phrase).
    indexed = [tuple(t for w in p for t in _index_words(w)) for p in phrases]
    terms = tuple(dict.fromkeys(t for p in indexed for t in p))
    if not terms:
        return {"hits": [], "partial": False}
    checked = [p for p in dict.fromkeys(indexed) if len(p) > 1]
    # Every word of the query (the index keeps no positions: a phrase is the AND of its
    # words, checked on each match's text below), the matches shortest first (each one's
    # length in words: its FTS5 size record, one varint, which sorts as its value by its
    # length then its bytes), equal lengths in rowid order. A query with a phrase sorts
    # its matches' rowids only, and reads their entities one at a time until its limit.
    entity = "search_text.rowid" if checked else _ENTITY_OF
    sql = (
        f"SELECT {entity}, size.sz FROM search_text "
        "CROSS JOIN search_text_docsize size ON size.id = search_text.rowid "
        "WHERE search_text MATCH ?"
    )
    params: list[Any] = [fts_query([(t,) for t in terms])]
    if scope is not None:
        sql += (
            " AND search_text.rowid IN (SELECT m.message_row FROM conversation_messages m "
            f"WHERE m.conversation_row = {row_of('?')})"
        )
        params.append(encode_entity(conversation_entity_id(scope, _scope.tenant())))
    if not _scope.alone(conn):
        # Each match's owner, before the LIMIT: another user's rows take no place.
        sql += (
            " AND EXISTS (SELECT 1 FROM entities e WHERE e.rowid = search_text.rowid "
            f"AND {_scope.owned('e')})"
        )
    sql += " ORDER BY length(size.sz), size.sz, search_text.rowid"
    if not checked:
        sql += " LIMIT ?"
        params.append(limit)
    cache: dict[str | bytes, str | None] = {}
    found: list[tuple[dict[str, Any], int]] = []
    for key, size in conn.execute(sql, params):
        if checked:
            row = conn.execute("SELECT id FROM entities WHERE rowid = ?", (key,)).fetchone()
            key = row[0] if row else None
        hit = None if key is None else _hit(conn, key, scope, cache)
        if hit is None:
            continue
        if checked:
            tokens = _index_tokens(hit["text"])
            if not all(_holds(tokens, p) for p in checked):
                continue
        found.append((hit, _varint(size)[0]))
        if len(found) == limit:
            break
    if found:
        score = _scorer(conn, terms)
        for hit, length in found:
            hit["score"] = score(length)
    return {"hits": [h for h, _ in found], "partial": False}
