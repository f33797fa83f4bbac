"""Erasing a forgotten conversation's (or entity's) bytes from a store file (``forget --purge``).

A soft deletion (:mod:`neotoma_agent._neotoma.forget`) keeps every observation, as Neotoma does;
erasing needs the bytes gone. :func:`purge_forgotten` deletes the
rows of the forgotten entities (their entity rows, observations, field values, name-index
entries, conversation index, summary row, full-text search rows), every edge touching them,
and the idempotency keys of the stores that wrote their observations; then it merges the
full-text indexes (deleted terms otherwise linger in old segments), ``VACUUM``\\ s the file
(SQLite's free pages keep deleted bytes) and truncates the write-ahead log. Unlike a soft
deletion this cannot be undone. :func:`purge_user` does the same to every row of one user
(``EmbeddedStore.for_user``): all its entities, and what else it wrote (edges, keys).

It opens the file itself (``VACUUM`` cannot run inside the store thread's transactions) and
needs it to itself for the ``VACUUM``: close the :class:`EmbeddedStore` first.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import attrs

from ..._neotoma.forget import Forgotten
from ..._records.user_id import LOCAL_USER_ID, check_user_id
from ..._util.file_kind import check_store_file
from ._close_row import CLOSE_ROW
from ._conversation_index import NUMBERED_INDEX
from ._derived_restatement import DERIVED_RESTATEMENTS, ENTRY, materialize
from ._first_id import forget_memo
from ._id_prefix import ID_PREFIX, id_among
from ._key_rows import key_seqs
from ._name_index import unindex_book_names
from ._observation_index import OBSERVATION_ROWS
from ._rows import decode_entity, encode_entity, entity_text
from ._schema import MIGRATIONS
from ._scope import NOBODY, lookup_uid
from ._search import rebuild as rebuild_search
from ._turn_names import GROUPED_NAMES, rebuild_book_names

__all__ = ["PurgeStats", "purge_entities", "purge_forgotten", "purge_user"]

_BUSY_MS = 5000
#: the schema version whose search index keeps no texts (``_schema``)
_CONTENTLESS_SEARCH = 8
#: the schema version whose bookkeeping names' index keeps no texts (``_schema``)
_CONTENTLESS_NAMES = 9
#: the schema version whose PART_OF edges the conversation index holds (``_part_of``)
_DERIVED_PART_OF = 10
#: the schema version whose entity rows hold their first observation (``_first``)
_FIRST_IN_ROW = 11
#: the schema version whose entity rows hold their ids as ``encode_entity`` does
_PACKED_IDS = 12
#: the schema version whose bookkeeping names' index has one document a turn
_GROUPED_NAMES = MIGRATIONS.index(GROUPED_NAMES) + 1
#: the schema version whose conversation index holds entity row numbers
_NUMBERED_INDEX = MIGRATIONS.index(NUMBERED_INDEX) + 1
#: the schema version whose observation rows hold their entity rows' numbers
_OBSERVATION_ROWS = MIGRATIONS.index(OBSERVATION_ROWS) + 1
#: the schema version whose conversation index flags derived restatements
_DERIVED = MIGRATIONS.index(DERIVED_RESTATEMENTS) + 1
#: the schema version whose entity rows are found by their id's prefix (``_id_prefix``)
_ID_PREFIX = MIGRATIONS.index(ID_PREFIX) + 1
#: the schema version whose turn records' rows hold their close (``_close_row``)
_CLOSE_ROW = MIGRATIONS.index(CLOSE_ROW) + 1
_Id = TypeVar("_Id", str, bytes, str | bytes)
# Bound parameters per statement (SQLite's default limit is 32766; stay far below).
_CHUNK = 500


@attrs.frozen
class PurgeStats:
    """Rows a purge erased."""

    entities: int
    observations: int
    relationships: int
    idempotency_keys: int


def _chunks(items: Sequence[_Id]) -> list[Sequence[_Id]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _delete(conn: sqlite3.Connection, sql: str, ids: Sequence[str | bytes]) -> int:
    count = 0
    for chunk in _chunks(ids):
        among = _among(conn, len(chunk))
        count += conn.execute(sql.format(marks=_marks(len(chunk)), among=among), chunk).rowcount
    return count


def _marks(count: int) -> str:
    """``count`` numbered parameters (a statement that writes them twice binds them once)."""
    return ",".join(f"?{i}" for i in range(1, count + 1))


def _among(conn: sqlite3.Connection, count: int) -> str:
    """SQL that an entity row's id is one of the ``count`` parameters :func:`_marks`
    numbers: by its prefix's index since ``_id_prefix``, by the id's key before."""
    if _version(conn) >= _ID_PREFIX:
        return id_among(count)
    return f"id IN ({_marks(count)})"


def _rows(conn: sqlite3.Connection, ids: Sequence[str]) -> PurgeStats:
    # observations and conversation_messages hold entity ids as their 12 bytes (_rows)
    packed = [encode_entity(i) for i in ids]
    # since ``_OBSERVATION_ROWS`` by their entity rows' numbers (deleted before those rows,
    # so that none names a later entity that takes a deleted rowid again)
    by_row = _version(conn) >= _OBSERVATION_ROWS
    of_entities = "entity_row IN " + _ROWS if by_row else "entity_id IN ({marks})"
    # The restatements derived from the messages going (``_derived_restatement``) of a
    # conversation that stays written as rows first; those of the conversations going, by
    # their message rows, go with them.
    restated = _restated(conn, packed) if _version(conn) >= _DERIVED else set()
    seqs: set[int] = set()
    for chunk in _chunks(packed):
        found = of_entities.format(marks=_marks(len(chunk)), among=_among(conn, len(chunk)))
        seqs.update(
            int(r[0])
            for r in conn.execute(
                f"SELECT seq FROM observations WHERE {found}",
                chunk,
            )
        )
    observations = _delete(conn, f"DELETE FROM observations WHERE {of_entities}", packed)
    observations += len(restated)
    # the ids as the entity rows hold them
    own: Sequence[str | bytes] = packed if _version(conn) >= _PACKED_IDS else ids
    if _version(conn) >= _FIRST_IN_ROW:  # a key's list names a row's first as -rowid
        for chunk in _chunks(own):
            among = _among(conn, len(chunk))
            # (a turn record's close its row holds, ``_close_row``, is in a key's list as
            # its first is: minus the rowid)
            close = "close_id IS NOT NULL" if _version(conn) >= _CLOSE_ROW else "0"
            held = conn.execute(
                f"SELECT rowid, {close} FROM entities WHERE {among} AND first_id IS NOT NULL",
                chunk,
            ).fetchall()
            seqs.update(-int(r[0]) for r in held)
            observations += len(held) + sum(int(r[1]) for r in held)
    names: tuple[str, ...] = ("name_index", "bookkeeping_names")
    if _CONTENTLESS_NAMES <= _version(conn) < _GROUPED_NAMES:
        unindex_book_names(conn, own)  # named by their text, read from the rows going now
    if _version(conn) >= _CONTENTLESS_NAMES:
        names = ("name_index",)
    # The conversation index's rows of either end, while the entity rows name their
    # numbers (and before a later entity may take a deleted row's rowid again).
    numbered = _version(conn) >= _NUMBERED_INDEX
    derived = 0
    if _version(conn) >= _DERIVED_PART_OF:
        derived = _derived_edges(conn, own if numbered else packed, numbered)
    for column in ("message_row", "conversation_row") if numbered else ():
        _delete(conn, f"DELETE FROM conversation_messages WHERE {column} IN {_ROWS}", own)
    for column in () if numbered else ("message_id", "conversation_id"):
        _delete(conn, f"DELETE FROM conversation_messages WHERE {column} IN ({{marks}})", packed)
    entities = _delete(conn, "DELETE FROM entities WHERE {among}", own)
    if _version(conn) >= _GROUPED_NAMES:
        # A turn's document holds the names of entities that may stay: built again from
        # the rows that stay, as the search index is below.
        rebuild_book_names(conn)
    _delete(conn, "DELETE FROM field_values WHERE entity_id IN ({marks})", ids)
    for table in names:
        _delete(conn, f"DELETE FROM {table} WHERE entity_id IN ({{marks}})", ids)
    if _has(conn, "conversation_summaries"):  # none in a file no schema-5 release opened
        _delete(conn, "DELETE FROM conversation_summaries WHERE entity_id IN ({marks})", ids)
    if _version(conn) >= _CONTENTLESS_SEARCH:
        # A forgotten entity's row went with its deletion; the index is built again from
        # the live rows all the same, so that no row of a purged entity can stay (keyed by
        # the entity rows' rowids, which the VACUUM after keeps).
        rebuild_search(conn)
        if _has(conn, "search_docs"):  # schema 8 to 14: the next open builds it again
            conn.execute("DELETE FROM search_docs")
    elif _has(conn, "search_text"):  # schema 6 and 7: a forgotten entity's row went with
        # its deletion, but a row of one deleted before the index was kept is gone only now
        _delete(conn, "DELETE FROM search_text WHERE entity_id IN ({marks})", packed)
        _delete(conn, "DELETE FROM search_docs WHERE entity_id IN ({marks})", packed)
    relationships = derived + _delete(
        conn,
        "DELETE FROM relationships WHERE source_entity_id IN ({marks}) "
        "OR target_entity_id IN ({marks})",
        ids,
    )
    # A key's row lists the observations (by seq) its store wrote: a key that wrote any
    # of the purged ones goes (the key names the conversation and the turn). A key is
    # matched as its row holds it (``_key_rows``: the same text is the same value).
    stale = [
        key
        for key, observations in conn.execute("SELECT key, observations FROM idempotency_keys")
        if _names(_seqs(observations), seqs, restated)
    ]
    keys = _delete(conn, "DELETE FROM idempotency_keys WHERE key IN ({marks})", stale)
    return PurgeStats(entities, observations, relationships, keys)


def _restated(conn: sqlite3.Connection, packed: Sequence[str | bytes]) -> set[int]:
    """Of the entities ``packed`` (ids as the entity rows hold them): the message rows of
    the restatements derived for those that are conversations; each restatement derived
    from one of their messages for a conversation that stays written as a row."""
    going: set[int] = set()
    for ids in _chunks(packed):
        among = _among(conn, len(ids))
        going.update(
            int(r[0]) for r in conn.execute(f"SELECT rowid FROM entities WHERE {among}", ids)
        )
    gone: set[int] = set()
    for column in ("conversation_row", "message_row"):
        rows = sorted(going)
        for at in range(0, len(rows), _CHUNK):
            chunk = rows[at : at + _CHUNK]
            marks = ",".join("?" * len(chunk))
            found = conn.execute(
                "SELECT conversation_row, message_row FROM conversation_messages "
                f"WHERE restated = 1 AND {column} IN ({marks})",
                chunk,
            ).fetchall()
            for conversation, message in found:
                if conversation in going:
                    gone.add(int(message))
                else:
                    materialize(conn, int(conversation), int(message))
    return gone


def _names(listed: Sequence[int], seqs: set[int], derived: set[int]) -> bool:
    """Whether a key's list ``listed`` names one of the observations ``seqs``, or a
    restatement derived from one of the message rows ``derived``."""
    if seqs.intersection(listed):
        return True
    return any(
        v == ENTRY and i and listed[i - 1] < 0 and -listed[i - 1] in derived
        for i, v in enumerate(listed)
    )


# The rowids of the entities of the ids ``{among}`` names (as the entity rows hold them): what
# the conversation index holds since it numbers its ends (``_conversation_index``).
_ROWS = "(SELECT rowid FROM entities WHERE {among})"


def _derived_edges(conn: sqlite3.Connection, ids: Sequence[str | bytes], numbered: bool) -> int:
    """How many derived PART_OF edges (``_part_of``: an index row without an edge row)
    touch the entities ``ids``: as the entity rows hold them where the index holds their
    rows' numbers (``numbered``), else as the index holds them."""
    ends = ("message_row", "conversation_row") if numbered else ("message_id", "conversation_id")
    message, conversation = (
        ("m.id", "c.id") if numbered else ("cm.message_id", "cm.conversation_id")
    )
    source = "conversation_messages cm"
    if numbered:
        source += (
            " CROSS JOIN entities m ON m.rowid = cm.message_row"
            " CROSS JOIN entities c ON c.rowid = cm.conversation_row"
        )
    pairs: set[tuple[str | bytes, str | bytes]] = set()
    for column in ends:
        for chunk in _chunks(ids):
            marks = _marks(len(chunk))
            found = _ROWS.format(among=_among(conn, len(chunk))) if numbered else f"({marks})"
            sql = (
                f"SELECT {message}, {conversation} FROM {source} "
                f"WHERE cm.{column} IN {found} AND NOT EXISTS "
                "(SELECT 1 FROM relationships r "
                f"WHERE r.source_entity_id = {entity_text(message)} "
                "AND r.relationship_type = 'PART_OF' "
                f"AND r.target_entity_id = {entity_text(conversation)})"
            )
            pairs.update((r[0], r[1]) for r in conn.execute(sql, chunk))
    return len(pairs)


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _has(conn: sqlite3.Connection, table: str) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    return found is not None


def _seqs(raw: object) -> list[int]:
    try:
        value = key_seqs(raw) if isinstance(raw, str | bytes) else raw
    except ValueError:
        return []
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def purge_forgotten(
    path: str | os.PathLike[str], forgotten: Forgotten, *, user_id: str | None = None
) -> PurgeStats:
    """Erase the bytes of a forgotten conversation from the store file at ``path``.

    ``forgotten``: what :meth:`~neotoma_agent.NeotomaMemory.forget` returned; ``user_id``:
    the user whose memory forgot it, as for :func:`purge_entities`. Irreversible; the store
    must be closed (``sqlite3.OperationalError`` "database is locked" otherwise).
    """
    return purge_entities(path, forgotten.entity_ids, user_id=user_id)


def purge_entities(
    path: str | os.PathLike[str], entity_ids: Sequence[str], *, user_id: str | None = None
) -> PurgeStats:
    """Erase the bytes of entities from the store file at ``path``: their rows,
    observations (every field's text), index entries, every edge touching them and the
    idempotency keys of the stores that wrote their observations; then the file is
    ``VACUUM``\\ ed and its write-ahead log truncated.

    What other entities hold is kept: a message that named the entity keeps its text.
    Irreversible (a purged entity is unknown, not deleted: nothing restores it); the store
    must be closed (``sqlite3.OperationalError`` "database is locked" otherwise). With
    ``user_id``, only that user's entities among ``entity_ids`` are erased (what
    ``store.for_user(user_id)`` can see); another user's are left as they are.
    """
    user = None if user_id is None else check_user_id(user_id)
    return _purge(path, lambda conn: _rows(conn, _owned(conn, list(entity_ids), user)))


def _owned(conn: sqlite3.Connection, ids: list[str], user: str | None) -> list[str]:
    """The ids among ``ids`` of entities ``user`` owns (None: every one)."""
    if user is None:
        return ids
    if not _has(conn, "users"):
        # A file from before users: all of it is the local dev user's.
        return ids if user == LOCAL_USER_ID else []
    uid = lookup_uid(conn, user, create=False)
    mine: set[str] = set()
    own = [encode_entity(i) for i in ids] if _version(conn) >= _PACKED_IDS else ids
    for chunk in _chunks(own):
        sql = f"SELECT id FROM entities WHERE {_among(conn, len(chunk))} AND uid = ?"
        mine.update(decode_entity(r[0]) for r in conn.execute(sql, (*chunk, uid)))
    return [i for i in ids if i in mine]


def purge_user(path: str | os.PathLike[str], user_id: str) -> PurgeStats:
    """Erase every row of one user from the store file at ``path``: the entities its
    conversations, turns, tool calls and ``remember`` calls wrote (their observations,
    name, field and full-text index entries, conversation lists and summaries), every
    edge it wrote or that touches them, its idempotency keys and its own id; then the file
    is ``VACUUM``\\ ed and its write-ahead log truncated, so that none of its text is left
    in either. Every other user's rows are kept as they are.

    Irreversible; the store must be closed (``sqlite3.OperationalError`` "database is
    locked" otherwise). :class:`~neotoma_agent.InvalidUserIdError` for a bad user id,
    before the file is opened; a user the file does not know erases nothing.
    """
    user = check_user_id(user_id)
    return _purge(path, lambda conn: _user_rows(conn, user))


def _user_rows(conn: sqlite3.Connection, user: str) -> PurgeStats:
    if not _has(conn, "users"):
        # A file no release with users has opened: all of it is the local dev user's.
        if user == LOCAL_USER_ID:
            raise sqlite3.OperationalError(
                "the store file predates users: open it once with EmbeddedStore to upgrade it"
            )
        return PurgeStats(0, 0, 0, 0)
    uid = lookup_uid(conn, user, create=False)
    if uid == NOBODY:
        return PurgeStats(0, 0, 0, 0)
    rows = conn.execute("SELECT id FROM entities WHERE uid = ?", (uid,))
    ids = [decode_entity(r[0]) for r in rows]
    stats = _rows(conn, ids)
    # What the user wrote beyond its entities: edges to others' entities, keys of stores
    # that wrote no observation of its own entities, summary and field rows of entities
    # it never created.
    edges = conn.execute("DELETE FROM relationships WHERE uid = ?", (uid,)).rowcount
    keys = conn.execute("DELETE FROM idempotency_keys WHERE uid = ?", (uid,)).rowcount
    conn.execute("DELETE FROM conversation_summaries WHERE uid = ?", (uid,))
    conn.execute("DELETE FROM field_values WHERE uid = ?", (uid,))
    conn.execute("DELETE FROM users WHERE uid = ?", (uid,))
    return attrs.evolve(
        stats,
        relationships=stats.relationships + edges,
        idempotency_keys=stats.idempotency_keys + keys,
    )


def _purge(
    path: str | os.PathLike[str], erase: Callable[[sqlite3.Connection], PurgeStats]
) -> PurgeStats:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no store file: {os.fspath(path)}")
    conn = sqlite3.connect(os.fspath(path), isolation_level=None, timeout=_BUSY_MS / 1000)
    try:
        if check_store_file(conn, os.fspath(path)) != "store":
            return PurgeStats(0, 0, 0, 0)  # an empty file holds nothing to erase
        # Deleted cells are zeroed as they go, whatever the SQLite build's default (many
        # builds leave them in place until the VACUUM below rewrites the file).
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            stats = erase(conn)
            for table in ("name_index", "bookkeeping_names", "search_text"):
                if _has(conn, table):
                    conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        forget_memo()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return stats
