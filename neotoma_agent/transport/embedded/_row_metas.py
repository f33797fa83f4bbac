"""A snapshot's metas, coded (:func:`encode_meta`, :func:`decode_meta`), and a turn
record's winning observation rows named in its snapshot by their seq alone (a schema step:
``SEQ_METAS``).

A snapshot doc lists each observation that wins a field once, with what the reducer ranks
it by (``_rows``' snapshot doc: its id, seq, time, priority, source rank and specificity):
46 to 53 bytes each. Since schema version 13 the entity row's own first observation is listed as
``0`` alone, its meta read from the row's ``first_*`` columns. Since this step a turn
record's other winners, observation rows (its close, in a plain turn), are listed as their
seq alone (a positive integer): their metas are their rows' columns (``observations``:
``id, observed_at, source_priority, observation_source, specificity_score``), read beside
the snapshot by the same statement (:func:`metas_sql`: a correlated subquery through the
unique index by entity row, so no read runs another statement; a write's fold leaves it
out and reads it only for a turn record written again after its close, ``_rows``). That
takes about 46 bytes
off each closed turn record's row, and since schema version 23 a turn record is written at
its enter with the room its close takes, so they come off the file (a page holds more rows).

Only turn records are written so: a turn record is folded once after its enter (its close),
and each read of one selects its snapshot anyway. A conversation is folded every turn and
its later observations win its fields, so its metas stay in full: a seq there would cost
each turn's fold a lookup of its rows. Every other entity keeps them in full too (an
entity may hold thousands of observation rows, which the subquery would read).

The migration (:func:`number_rows`, in its transaction) lists each turn record's winning
observation rows by seq where its snapshot's meta is exactly its row's (a meta that is not,
which no release wrote, stays in full: both forms are read).
"""

from __future__ import annotations

import binascii
import functools
import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from ._close_row import CLOSE_SEQ
from ._close_row import meta_sql as close_meta_sql
from ._first_id import first_id_sql
from ._ids import decode_id, encode_id
from ._reducer import source_rank
from ._times import decode_time, encode_time
from ._words import decode_word

__all__ = [
    "BY_SEQ",
    "FIRST_META",
    "ROW_META",
    "SEQ_META",
    "SEQ_METAS",
    "FirstMetaNeeded",
    "Rows",
    "decode_meta",
    "encode_meta",
    "full_meta",
    "metas_sql",
    "number_rows",
    "row_metas",
]

# The migration: nothing to rewrite; the version says a file may hold such snapshots (an
# older release would misread them).
SEQ_METAS: Final = """
-- version 25: a turn record's winning observation rows as their seq (_row_metas)
"""

#: the entity type whose snapshots list their winning observation rows by seq
BY_SEQ: Final = "conversation_turn"


#: the columns of an observation row that are its meta, in :func:`row_metas`' order
ROW_META: Final = "seq, id, observed_at, source_priority, observation_source, specificity_score"


#: a turn record's observation rows' metas as a reader has them: :func:`metas_sql`'s text,
#: or the rows of :data:`ROW_META` themselves
Rows = str | tuple[tuple[Any, ...], ...]


def metas_sql(table: str = "entities", close: bool = True) -> str:
    """SQL of an entity row's observation rows' metas, for a row of :data:`BY_SEQ` (JSON
    text: ``[[seq, id, observed_at, priority, observation_source, specificity], ...]``,
    the id as its 32 hex digits or ``~`` and its text; ``[]`` for none), NULL for any
    other type. ``table``: the entity row's table or alias in the reader's statement.
    With ``close`` (a file of schema version 32 on), the close its row holds instead
    (``_close_row``): alone, without a look at the rows (a row holds its close only while
    its record has no observation row)."""
    meta = (
        "json_array(o.seq, CASE WHEN typeof(o.id) = 'blob' THEN lower(hex(o.id)) "
        "ELSE '~' || o.id END, o.observed_at, o.source_priority, o.observation_source, "
        "o.specificity_score)"
    )
    rows = f"FROM observations o WHERE o.entity_row = {table}.rowid"
    if not close:
        return (
            f"CASE WHEN {table}.entity_type = '{BY_SEQ}' THEN "
            f"(SELECT json_group_array({meta}) {rows}) END"
        )
    held = close_meta_sql(table)
    return (
        f"CASE WHEN {table}.entity_type <> '{BY_SEQ}' THEN NULL "
        f"WHEN {table}.close_id IS NULL THEN (SELECT json_group_array({meta}) {rows}) "
        f"ELSE json_array({held}) END"
    )


# Memoised: a turn record is read again and again (on the history page of the next few
# turns), its rows unchanged.
@functools.lru_cache(maxsize=1024)
def row_metas(rows: Rows) -> dict[float, tuple[Any, ...]]:
    """The rows of :func:`metas_sql`'s text by seq, or of rows of :data:`ROW_META` as
    stored (a history page's, which selects them so): (id as ``_rows.decode_id`` takes
    it, observed_at, priority, observation_source, specificity), as stored."""
    if not isinstance(rows, str):
        return {row[0]: row[1:] for row in rows}
    out: dict[float, tuple[Any, ...]] = {}
    for seq, ident, observed, priority, source, spec in json.loads(rows):
        packed = ident[1:] if ident.startswith("~") else bytes.fromhex(ident)
        out[seq] = (packed, observed, priority, source, spec)
    return out


# Memoised: the observations that won an entity's fields are decoded from its snapshot and
# encoded into it again on every write of the entity (a conversation's, every turn).
@functools.lru_cache(maxsize=1024)
def _encode_obs_id(value: str) -> str:
    packed = encode_id(value)
    if isinstance(packed, bytes):
        # binascii, not the base64 module: its wrappers cost more than the conversion
        return binascii.b2a_base64(packed, newline=False)[:-2].decode()
    return "~" + value  # "~" is not base64: an id that is not a UUID, as it is


@functools.lru_cache(maxsize=1024)
def _decode_obs_id(value: str) -> str:
    if value.startswith("~"):
        return value[1:]
    if len(value) == 36:
        return value  # a UUID as version 3 wrote it (base64 is 22 characters)
    h = binascii.a2b_base64(value + "==").hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class FirstMetaNeeded(ValueError):
    """A snapshot lists its entity row's first observation (``0``), or an observation row
    by its seq, and its reader gave no ``FIRST_META`` columns (or no ``SEQ_META``): a
    reader that leaves them out for the common case (history pages' closed turn records)
    reads them then."""


#: the entity row's columns that are its first observation's meta (seq 0: ``_first``), in
#: the order :func:`decode_state` takes them; a reader selects them beside the snapshot
FIRST_META = f"{first_id_sql()}, created_at, first_priority, first_osource, first_specificity"
#: the column a reader of a turn record selects beside its snapshot: the metas of the
#: observation rows it lists by seq (``_row_metas``), :func:`decode_state`'s ``rows``
SEQ_META = metas_sql()


def encode_meta(meta: list[Any], by_seq: bool = False) -> list[Any] | float:
    if meta[1] == 0:
        return 0  # the row's first observation (seq 0): its meta is the row's FIRST_META
    if by_seq and meta[1] == CLOSE_SEQ:
        return CLOSE_SEQ  # the close its row holds: its meta is the row's (``_close_row``)
    if by_seq and meta[1] > 0:
        return int(meta[1])  # an observation row: its meta is its row's (``SEQ_META``)
    out = [_encode_obs_id(meta[0]), meta[1], encode_time(meta[2]), meta[3], meta[4]]
    return out if meta[5] == 1.0 else [*out, meta[5]]


# Memoised, as ``_decode_obs_id``: an entity is read again and again (a conversation's row
# every turn), its first observation unchanged.
@functools.lru_cache(maxsize=1024)
def _first_meta(
    first_id: bytes | str,
    created: str | int,
    priority: int,
    osource: str | int | None,
    spec: float,
    seq: float = 0,
) -> tuple[Any, ...]:
    rank = source_rank(decode_word(osource))
    return (decode_id(first_id), seq, decode_time(created), priority, rank, spec)


def decode_meta(
    meta: list[Any] | float, first: Sequence[Any] | None, rows: Rows | None
) -> list[Any]:
    if isinstance(meta, (int, float)):
        if meta:
            found = None if rows is None else row_metas(rows).get(meta)
            if found is None:
                raise FirstMetaNeeded("a snapshot lists an observation row by seq: none given")
            return list(_first_meta(*found, meta))
        if first is None or first[0] is None:
            raise FirstMetaNeeded("a snapshot lists its row's first observation: none given")
        return list(_first_meta(*first))
    spec = meta[5] if len(meta) == 6 else 1.0
    return [_decode_obs_id(meta[0]), meta[1], decode_time(meta[2]), meta[3], meta[4], spec]


def full_meta(row: tuple[Any, ...], seq: int) -> list[Any]:
    """The meta in full that ``_rows`` writes for an observation row (``row``: its id,
    time, priority, source and specificity as stored)."""
    ident, observed, priority, source, spec = row
    encoded = (
        binascii.b2a_base64(ident, newline=False)[:-2].decode()
        if isinstance(ident, bytes)
        else "~" + ident
    )
    meta = [encoded, seq, observed, priority, source_rank(decode_word(source))]
    return meta if spec == 1.0 else [*meta, spec]


def number_rows(conn: sqlite3.Connection) -> None:
    """The migration: each turn record's metas of its own observation rows as their seq."""
    found = conn.execute(
        f"SELECT rowid, snapshot, {metas_sql(close=False)} FROM entities "
        f"WHERE entity_type = '{BY_SEQ}'"
    ).fetchall()
    for rowid, text, rows in found:
        doc = json.loads(text)
        metas = doc.get("o") if isinstance(doc, dict) else None
        if not isinstance(metas, list) or not rows:
            continue
        held = row_metas(rows)
        numbered = [
            m[1]
            if type(m) is list
            and type(m[1]) is int
            and m[1] > 0
            and m[1] in held
            and full_meta(held[m[1]], m[1]) == m
            else m
            for m in metas
        ]
        if numbered != metas:
            doc["o"] = numbered
            conn.execute(
                "UPDATE entities SET snapshot = ? WHERE rowid = ?",
                (json.dumps(doc, ensure_ascii=False, separators=(",", ":")), rowid),
            )
