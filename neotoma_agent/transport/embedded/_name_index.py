"""The name index: substring search over canonical names, aliases and identity fields.

Names live in two FTS5 trigram tables. ``name_index`` holds each text with its entity id
and kind; ``trigram_df`` counts the texts each trigram is in, so a search reads only the
rarest trigrams' posting lists (see :func:`substring_ids`). ``bookkeeping_names`` indexes
the names of conversations, messages and turn records, which a real server finds by any
substring too (``POST /retrieve_entity_by_identifier``'s second pass): it is contentless
(schema version 9), its documents numbered as entity rows, its texts their names and
aliases (:func:`book_text`), so a name is stored once, in the entity row, which a search
reads anyway and checks the whole needle against; since schema version 15 a turn's
messages and turn record share one document (``_turn_names``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from itertools import pairwise
from typing import Any, Final

from . import _scope
from ._id_prefix import id_is
from ._name_queue import has_queued, put, queued_sql, take
from ._rows import encode_entity, entity_text
from ._turn_names import MESSAGE, TURN, book_text, document_text, expand

__all__ = [
    "BOOKKEEPING",
    "FIELD_KINDS",
    "NAME_KINDS",
    "SEARCH_FIELDS",
    "backfill_book_names",
    "book_text",
    "first_token",
    "index_fields",
    "index_name",
    "install",
    "rename",
    "substring_ids",
    "unindex_book_names",
]


BOOKKEEPING = frozenset(("conversation", "conversation_message", "conversation_turn"))

NAME_KINDS = frozenset(("name", "alias"))

# Snapshot fields a lookup compares against the identifier (the server's third pass).
SEARCH_FIELDS = ("name", "full_name", "title", "email", "domain", "company")

FIELD_KINDS = frozenset(f"field:{f}" for f in SEARCH_FIELDS)  # their name_index kinds
_SEARCHED: Final = frozenset(SEARCH_FIELDS)


def install(conn: sqlite3.Connection) -> None:
    """Make the vocabulary of ``bookkeeping_names`` readable on ``conn`` (a temporary
    table: nothing is written to the file; before ``query_only`` on a read-only one)."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.bookkeeping_terms "
        "USING fts5vocab(main, bookkeeping_names, 'instance')"
    )


def _aliases(raw: str) -> list[str]:
    return [] if raw == "[]" else [str(a) for a in json.loads(raw)]


def index_name(
    conn: sqlite3.Connection, name: str, entity_id: str, entity_type: str, rowid: int
) -> None:
    """Make a new entity's canonical ``name`` findable by substring (``rowid``: its row's);
    a message's or turn record's, the store that created it does, grouped a turn
    (``_turn_names.index_turn_names``)."""
    if entity_type in _GROUPED:
        return
    if entity_type in BOOKKEEPING:
        put(conn, rowid, book_text(name, ()))
    else:
        _index_text(conn, name.lower(), entity_id, "name")


def rename(
    conn: sqlite3.Connection,
    entity_id: str,
    entity_type: str,
    old: tuple[str, Sequence[str]],
    new: tuple[str, Sequence[str]],
) -> None:
    """Index the entity's new name (``new``: its name and aliases; ``old``: before); its
    old name stays findable, as an alias."""
    if entity_type in BOOKKEEPING:
        (rowid,) = conn.execute(
            f"SELECT rowid FROM entities WHERE {id_is('?1')}", (encode_entity(entity_id),)
        ).fetchone()
        if entity_type != MESSAGE or _has_document(conn, rowid):  # (a turn's may hold it)
            take(conn, rowid, document_text(entity_type, *old))
        put(conn, rowid, document_text(entity_type, *new))
        return
    conn.execute(
        "UPDATE name_index SET kind = 'alias' WHERE entity_id = ? AND kind = 'name'", (entity_id,)
    )
    _index_text(conn, new[0].lower(), entity_id, "name")


_BOOK_TYPES: Final = tuple(sorted(BOOKKEEPING))
#: the types whose names a turn's document holds (``_turn_names``)
_GROUPED: Final = frozenset((MESSAGE, TURN))


def _has_document(conn: sqlite3.Connection, rowid: int) -> bool:
    """Whether the entity row ``rowid`` has a ``bookkeeping_names`` document of its own (in
    the index or queued)."""
    found = conn.execute("SELECT 1 FROM bookkeeping_names_docsize WHERE id = ?", (rowid,))
    return found.fetchone() is not None or has_queued(conn, rowid)


def backfill_book_names(conn: sqlite3.Connection) -> None:
    """The row of every bookkeeping entity, into an empty ``bookkeeping_names`` (the
    version-9 migration)."""
    from ._scan import rows_of_types  # a migration's: never a hook's

    for rowid, name, aliases in rows_of_types(conn, "rowid, canonical_name, aliases", _BOOK_TYPES):
        conn.execute(
            "INSERT INTO bookkeeping_names (rowid, text) VALUES (?, ?)",
            (rowid, book_text(name, _aliases(aliases))),
        )


def unindex_book_names(conn: sqlite3.Connection, ids: Sequence[str | bytes]) -> None:
    """Take the rows of these entities (about to be erased) out of ``bookkeeping_names``;
    ``ids`` as the entity rows hold them (``encode_entity`` since schema version 12)."""
    marks = ",".join("?" * len(_BOOK_TYPES))
    for entity_id in ids:
        row = conn.execute(
            "SELECT rowid, canonical_name, aliases FROM entities "
            f"WHERE {id_is('?1')} AND entity_type IN ({marks})",
            (entity_id, *_BOOK_TYPES),
        ).fetchone()
        if row is not None:
            conn.execute(
                "INSERT INTO bookkeeping_names (bookkeeping_names, rowid, text) "
                "VALUES ('delete', ?, ?)",
                (row[0], book_text(row[1], _aliases(row[2]))),
            )


def _trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


def _index_text(conn: sqlite3.Connection, text: str, entity_id: str, kind: str) -> None:
    """Make ``text`` findable by substring for ``entity_id`` (see ``substring_ids``)."""
    conn.execute(
        "INSERT INTO name_index (text, entity_id, kind) VALUES (?, ?, ?)", (text, entity_id, kind)
    )
    conn.executemany(
        "INSERT INTO trigram_df (gram, n) VALUES (?, 1) ON CONFLICT (gram) DO UPDATE SET n = n + 1",
        ((g,) for g in _trigrams(text)),
    )


def first_token(value: str) -> str:
    parts = value.split(None, 1)
    return parts[0] if parts else ""


def index_fields(
    conn: sqlite3.Connection,
    entity_id: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
) -> None:
    """Keep the lookup indexes of the searchable snapshot fields in step with the snapshot."""
    if _SEARCHED.isdisjoint(old) and _SEARCHED.isdisjoint(new):
        return  # (a message, a turn record: none of their fields is looked up so)
    for name in SEARCH_FIELDS:
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if isinstance(before, str):
            conn.execute(
                "DELETE FROM field_values WHERE entity_id = ? AND field = ?", (entity_id, name)
            )
            conn.execute(
                "DELETE FROM name_index WHERE entity_id = ? AND kind = ?",
                (entity_id, f"field:{name}"),
            )
        if isinstance(after, str) and after.strip():
            value = after.strip().lower()
            conn.execute(
                "INSERT INTO field_values (entity_id, field, value, first_token, uid) "
                "VALUES (?, ?, ?, ?, ?)",
                (entity_id, name, value, first_token(value), _scope.uid()),
            )
            _index_text(conn, value, entity_id, f"field:{name}")


def _fts_phrase(needle: str) -> str:
    return '"' + needle.replace('"', '""') + '"'


def _covering_trigrams(needle: str) -> str:
    """The MATCH query of trigrams that cover ``needle`` (three chars or more) end to end.

    Every third one and the last: any of its trigrams finds a superset of the texts that
    hold the needle, the whole needle is checked after, and each term read costs a posting
    list, so a third of them suffices.
    """
    last = len(needle) - 3
    grams = dict.fromkeys(needle[i : i + 3] for i in (*range(0, last, 3), last))
    return " AND ".join(_fts_phrase(g) for g in grams)


def _kind_sql(kinds: frozenset[str] | None) -> tuple[str, tuple[str, ...]]:
    if kinds is None:
        return "1", ()
    ordered = tuple(sorted(kinds))
    return f"kind IN ({','.join('?' * len(ordered))})", ordered


# The FTS5 searches of ``substring_ids``. Each costs a few µs however small its answer, so
# when both tables are searched it is one statement; the first column says which table a
# row came from, and rows come in rowid order within each table, as from two statements.
# Neither table keeps token positions (``detail = none``), so neither answers a phrase: a
# needle is matched as the AND of its trigrams, then checked whole (texts and needles are
# lowercased alike): by ``instr`` in ``name_index``, on the entity row's name and aliases
# for ``bookkeeping_names`` (contentless: its rowid is the entity row's; a turn record's
# also leads to its messages: ``_turn_names.expand``), whose queued documents that hold
# the needle are candidates as well (``_name_queue``; the caller merges them in row order).
_BOOK_COLUMNS = (
    f"0, {entity_text('e.id')}, e.canonical_name, e.aliases, e.rowid, e.uid, e.entity_type"
)
_BOOKKEEPING_NAMES_SQL = (
    f"SELECT {_BOOK_COLUMNS} FROM bookkeeping_names "
    "CROSS JOIN entities e ON e.rowid = bookkeeping_names.rowid "
    f"WHERE bookkeeping_names MATCH ? UNION ALL {queued_sql(_BOOK_COLUMNS)}"
)

_NAME_INDEX_SQL = (
    "SELECT 1, entity_id, kind, NULL, NULL, NULL, NULL FROM name_index "
    "WHERE name_index MATCH ? AND instr(text, ?) > 0"
)

_BOTH_NAMES_SQL = f"{_BOOKKEEPING_NAMES_SQL} UNION ALL {_NAME_INDEX_SQL}"

# A needle shorter than a trigram: the rows of the trigrams that begin with it, through the
# index's vocabulary (a range of its terms: ``install`` makes the table on each connection);
# a needle the tokenizer might fold otherwise (not ASCII) reads every bookkeeping name.
_SHORT_BOOK_NAMES_SQL = (
    f"SELECT 0, {entity_text('id')}, canonical_name, aliases, rowid, uid, entity_type "
    "FROM entities WHERE rowid IN "
    "(SELECT doc FROM temp.bookkeeping_terms WHERE term >= ? AND term < ?) "
    "OR rowid IN (SELECT id FROM bookkeeping_names_queue WHERE instr(text, ?) > 0) "
    "ORDER BY rowid"
)
# (every row: none leads to another, so no type)
_ALL_BOOK_NAMES_SQL = (
    f"SELECT 0, {entity_text('id')}, canonical_name, aliases, rowid, uid, NULL FROM entities "
    f"WHERE entity_type IN ({','.join('?' * len(_BOOK_TYPES))}) ORDER BY rowid"
)


def _short_book_rows(conn: sqlite3.Connection, needle: str) -> list[Any]:
    """Candidate rows for a needle of fewer than three characters (checked by the caller)."""
    if not needle or not needle.isascii():
        return conn.execute(_ALL_BOOK_NAMES_SQL, _BOOK_TYPES).fetchall()
    return conn.execute(_SHORT_BOOK_NAMES_SQL, (needle, needle + "\U0010ffff", needle)).fetchall()


def _book_kinds(needle: str, name: str, aliases: str) -> Iterator[str]:
    """The kinds of a bookkeeping entity's names that hold ``needle``."""
    if needle in name.lower():
        yield "name"
    if any(needle in a.lower() for a in _aliases(aliases)):
        yield "alias"


def _book_hits(
    conn: sqlite3.Connection, needle: str, kinds: frozenset[str] | None, rows: Sequence[Any]
) -> list[str]:
    """The ids of the candidate ``rows`` (0, id, name, aliases, rowid, uid, type) whose
    names hold ``needle``, and of the messages of the turn records among them whose names
    do, in entity row order (as a document an entity gives them)."""
    book: Sequence[Any] = [r for r in rows if not r[0]]
    more = expand(conn, needle, book)
    if more or any(a[4] > b[4] for a, b in pairwise(book)):  # (queued ones come after)
        by_row = {r[4]: r for r in (*book, *more)}
        book = [by_row[k] for k in sorted(by_row)]
    return [
        str(r[1])
        for r in book
        if any(kinds is None or k in kinds for k in _book_kinds(needle, str(r[2]), str(r[3])))
    ]


def substring_ids(
    conn: sqlite3.Connection,
    needle: str,
    kinds: frozenset[str] | None,
    *,
    bookkeeping: bool = True,
    memo: dict[str, list[tuple[str, str]]] | None = None,
) -> list[str]:
    """Entity ids whose indexed text (of the given kinds; None: any) contains ``needle``.

    A trigram phrase query reads the posting list of every trigram of the needle, and the
    common ones ("com", "ion") list most of the store. Instead, intersect two rare
    trigrams that share no chars (see ``_rarest_pair``), or take the rarest alone when few
    texts have it (any subset of the needle's trigrams finds a superset of the answers),
    and check the whole needle on those few rows: the answers are the same whichever
    trigrams are read. ``bookkeeping=False``
    skips the names of conversations, messages and turn records (they hold no snapshot
    fields). ``memo`` lets the passes of one lookup share the trigram search of one needle.
    """
    if len(needle) < 3:
        where, params = _kind_sql(kinds)
        found = [
            str(r[0])
            for r in conn.execute(
                f"SELECT DISTINCT entity_id FROM name_index WHERE instr(text, ?) > 0 AND {where}",
                (needle, *params),
            ).fetchall()
        ]
        if bookkeeping:
            found += _book_hits(conn, needle, kinds, _short_book_rows(conn, needle))
        return list(dict.fromkeys(found))
    hits = memo.get(needle) if memo is not None else None
    match = _trigram_match(conn, needle) if hits is None else None
    if hits is None and match is None:
        hits = []  # a trigram no indexed text has: nothing can contain the needle
    rows: list[Any] = []
    if bookkeeping and match is not None:
        params = (_covering_trigrams(needle), needle, match, needle)
        rows = conn.execute(_BOTH_NAMES_SQL, params).fetchall()
    elif bookkeeping:
        rows = conn.execute(_BOOKKEEPING_NAMES_SQL, (_covering_trigrams(needle), needle)).fetchall()
    elif match is not None:
        rows = conn.execute(_NAME_INDEX_SQL, (match, needle)).fetchall()
    if hits is None:
        hits = [(str(r[1]), str(r[2])) for r in rows if r[0]]
    if memo is not None:
        memo[needle] = hits
    # The kind filter and the de-duplication of rows happen here rather than in SQL
    # (DISTINCT, kind IN): the same first-seen order, one cheaper statement.
    found = _book_hits(conn, needle, kinds, rows)
    found.extend(eid for eid, kind in hits if kinds is None or kind in kinds)
    return list(dict.fromkeys(found))


# A rarest trigram in at most this many indexed texts is queried alone: checking the
# needle on those few rows costs less than reading a second posting list (small stores).
_FEW_TEXTS = 4

# Document frequencies of up to this many trigrams are read as the first one's row plus one
# scalar subquery per other trigram: point lookups whose answers come back in the trigrams'
# order (no row, or NULL: no text has it), about half the cost of `gram IN (...)`, which
# first builds a temporary index of its list.
_SCALAR_DF = 32

_DF_SQL = {
    k: "SELECT n"
    + "".join(f", (SELECT n FROM trigram_df WHERE gram = ?{i})" for i in range(2, k + 1))
    + " FROM trigram_df WHERE gram = ?1"
    for k in range(2, _SCALAR_DF + 1)
}


def _trigram_match(conn: sqlite3.Connection, needle: str) -> str | None:
    """The ``name_index`` MATCH query for a needle of three chars or more: its rarest
    trigrams (see ``substring_ids``); None when one of its trigrams is in no indexed text.
    """
    grams = sorted(_trigrams(needle))
    if len(grams) > 1:
        counts: Sequence[Any] | None  # ints; None for a trigram no text has
        if len(grams) <= _SCALAR_DF:
            counts = conn.execute(_DF_SQL[len(grams)], grams).fetchone()
        else:
            known = dict(
                conn.execute(
                    f"SELECT gram, n FROM trigram_df WHERE gram IN ({','.join('?' * len(grams))})",
                    grams,
                ).fetchall()
            )
            counts = [known.get(g) for g in grams]
        if counts is None or None in counts:
            return None  # a trigram no indexed text has: nothing can contain the needle
        grams = _rarest_pair(needle, grams, counts)
    return " AND ".join(_fts_phrase(g) for g in grams)


# A pair of trigrams apart is preferred to the two rarest (which may overlap) while its
# posting lists are at most this many times as long; the pairs are sought among this many
# of the rarest trigrams.
_APART_FACTOR = 4
_PAIR_POOL = 8


def _rarest_pair(needle: str, grams: Sequence[str], counts: Sequence[int]) -> list[str]:
    """The trigrams to intersect: the rarest pair at least three chars apart, if any is
    about as rare as the two rarest.

    Overlapping trigrams share chars, so the texts that hold both are nearly those that
    hold either ("123" and "234" in "0512345": 604 of 8,000 texts at 1,000,000 entities);
    two that share none narrow the candidates about as independent filters would ("123"
    and "345": 44), and each candidate costs a row read, a posting far less. The cost of a
    pair is taken as the length of its two posting lists; a pair that cannot chain beats
    one that can (see ``_chaining``).
    """
    order = sorted(range(len(grams)), key=counts.__getitem__)
    if counts[order[0]] <= _FEW_TEXTS:
        return [grams[order[0]]]
    positions: dict[str, list[int]] = {}
    for p in range(len(needle) - 2):
        positions.setdefault(needle[p : p + 3], []).append(p)
    best = (order[0], order[1])
    bound = _APART_FACTOR * (counts[best[0]] + counts[best[1]])
    apart: tuple[int, int] | None = None
    key = (3, 0)  # (chaining, cost): the lowest wins, ties go to the first found
    pool = order[:_PAIR_POOL]
    for x, i in enumerate(pool):
        a = grams[i]
        for j in pool[x + 1 :]:
            cost = counts[i] + counts[j]
            if cost > bound:
                break  # the pool is in count order: the rest of this row costs more
            b = grams[j]
            here = (_chaining(a, b), cost)
            if here < key and any(abs(p - q) >= 3 for p in positions[a] for q in positions[b]):
                apart, key = (i, j), here
    i, j = apart or best
    return [grams[i], grams[j]]


def _chaining(a: str, b: str) -> int:
    """How many chars trigrams ``a`` and ``b`` can share in a text (0 to 2), whatever their
    places in the needle.

    "880" and "806" are apart in "0880806" but chain in "8806", so many other texts hold
    both (604 at 1,000,000 entities, against 44 for a pair that cannot chain); a one-char
    chain ("821", "13 ": "8213 ") correlates less (240).
    """
    if a[1:] == b[:2] or b[1:] == a[:2]:
        return 2
    return 1 if a[2] == b[0] or b[2] == a[0] else 0
