"""The embedded store's bulk reads (:class:`~neotoma_agent.transport._bulk.BulkReader`).

Over a Transport, each turn costs a whole-store audit an answer built as JSON (records,
related entities, edges), then parsed back into typed objects, a conversation at a time.
On a store backed by a file, the same three reads are a few SQL statements on read-only
connections of their own, which return only what the caller looks at; rows are decoded by
the store's own row readers (``_rows``), so the answers are those the Transport reads give
(the tests compare both on the same files).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio
import attrs

from ..._records.user_id import LOCAL_USER_ID
from .._bulk import MessageRows, RecordSink
from .._results import EntitySnapshot
from ._codec import decode_fields, field_sql
from ._conversation_index import row_of
from ._id_prefix import id_is
from ._rows import (
    FIRST_META,
    LIVE,
    SEQ_META,
    decode_opt_time,
    entity_text,
    install,
    query_item,
)
from ._scope import lookup_uid
from ._type_index import of_type
from ._type_prefix import id_order

__all__ = ["FileReads"]

#: rows fetched per call into the worker thread
_BATCH: Final = 5_000
#: the page cache of each read-only connection (KiB)
_CACHE_KIB: Final = 8_192
#: conversations whose messages one statement reads
_CONVERSATIONS_PER_READ: Final = 500

#: an entity row's id as text (the row holds it as ``encode_entity`` does)
_ID: Final = entity_text("entities.id")
_E_ID: Final = entity_text("e.id")

# Every turn record, whole (its fields and time).
_RECORDS: Final = (
    f"SELECT {_ID}, entity_type, canonical_name, snapshot, observation_count, "
    f"last_observation_at, {FIRST_META}, {SEQ_META} FROM entities "
    "WHERE uid = {uid} AND " + of_type("conversation_turn") + " ORDER BY " + id_order("entities.id")
)
# With ``completed``: each turn record's name, whether it is ``completed`` (its name is then
# all the caller needs), and its rowid, in one pass over the table (in rowid order each page
# is read once; through the type index each record costs a seek). The status is read where
# ``_fields`` reads it in every format (``$.f.status``), from valid JSON only (any other
# doc goes to the full decode, as before; this store's docs never repeat a key).
_COMPLETED: Final = (
    "SELECT canonical_name, CASE WHEN json_valid(snapshot) "
    f"THEN {field_sql('status')} = 'completed' END, rowid "
    "FROM entities NOT INDEXED WHERE entity_type = 'conversation_turn' AND uid = {uid}"
)
# Another user's records are read through the type index (led by the user): a walk of the
# whole table would read every user's.
_COMPLETED_OF_USER: Final = (
    "SELECT canonical_name, CASE WHEN json_valid(snapshot) "
    f"THEN {field_sql('status')} = 'completed' END, rowid "
    "FROM entities WHERE uid = {uid} AND " + of_type("conversation_turn")
)
# The other records, whole, by the rowids ``_COMPLETED`` gave (in the same transaction).
_RECORDS_AT: Final = (
    f"SELECT {_ID}, entity_type, canonical_name, snapshot, observation_count, "
    f"last_observation_at, {FIRST_META}, {SEQ_META} FROM entities "
    "WHERE rowid IN (SELECT value FROM json_each(?)) "
    "AND entity_type = 'conversation_turn' ORDER BY entities.id"
)
_CONVERSATIONS: Final = (
    f"SELECT {_ID}, last_observation_at FROM entities WHERE uid = {{uid}} "
    f"AND {of_type('conversation')} ORDER BY {id_order('entities.id')}"
)
# Without times: the type index and each row's id.
_CONVERSATION_IDS: Final = (
    f"SELECT {_ID}, NULL FROM entities WHERE uid = {{uid}} AND {of_type('conversation')} "
    f"ORDER BY {id_order('entities.id')}"
)
# The soft-deleted entities (what no query lists), by id.
_DELETED: Final = (
    f"SELECT {_ID}, entity_type FROM entities WHERE uid = {{uid}} AND NOT ({LIVE}) "
    "ORDER BY entities.id"
)
# What retrieve_related_entities(conversation, PART_OF, inbound) gives the audit: the
# conversation_message at the source of each PART_OF edge, in the order of its edges; the
# conversation as its place in the list (a small int, not a string per row).
_MESSAGES: Final = (
    # CROSS JOIN fixes the order: each conversation's edges by index, then each message by
    # id (left to itself, SQLite would scan every message of the store for each page), by
    # the id's own index (``_id_prefix``; "+" keeps SQLite off the type index).
    # (the entity rows hold their ids as ``encode_entity`` does: ``e.id`` is the message's
    # 12 bytes, ``source`` its text for the edge rows, which hold it so)
    "SELECT key, source, canonical_name, updated_at FROM ("
    "SELECT c.key, r.source_entity_id AS source, e.canonical_name, e.updated_at, "
    "c.value AS conversation, e.id AS packed "
    "FROM json_each(?1) c CROSS JOIN relationships r CROSS JOIN entities e "
    "WHERE r.target_entity_id = c.value AND r.relationship_type = 'PART_OF' "
    f"AND {id_is('entity_key(r.source_entity_id)', 'e.id')} "
    "AND +e.entity_type = 'conversation_message' AND r.uid = {uid} AND +e.uid = {uid} "
    # The edges derived from the conversation index (``_part_of``): those without a row.
    f"UNION ALL SELECT c.key, {_E_ID}, e.canonical_name, e.updated_at, c.value, e.id "
    "FROM json_each(?1) c CROSS JOIN conversation_messages cm CROSS JOIN entities e "
    f"WHERE cm.conversation_row = {row_of('entity_key(c.value)')} AND e.rowid = cm.message_row "
    "AND +e.entity_type = 'conversation_message' AND e.uid = {uid} "
    f"AND NOT EXISTS (SELECT 1 FROM relationships r WHERE r.source_entity_id = {_E_ID} "
    "AND r.relationship_type = 'PART_OF' AND r.target_entity_id = c.value)"
    ") ORDER BY conversation, packed"
)


@attrs.define
class FileReads:
    """A :class:`~neotoma_agent.transport._bulk.BulkReader` over read-only connections to
    the store's file (``connect`` opens one).

    SQLite runs in worker threads (it releases the GIL), each next batch read while the
    caller handles the current one, so that on two cores the reads and the caller's Python
    overlap.
    """

    connect: Callable[[], sqlite3.Connection]
    #: whose rows are read: the user's id (the local dev user's by default)
    user: str = LOCAL_USER_ID
    #: the user's integer in the file, looked up by the first connection
    _uid: int | None = None
    #: message rows read ahead, by the conversation ids they are for
    _ahead: dict[tuple[str, ...], list[Any]] = attrs.Factory(dict)
    #: while :meth:`conversations` runs, the message reads' connections not in use: each
    #: read takes one (a fresh connection costs a read a sixth more: setup, a cold cache)
    _idle: list[sqlite3.Connection] | None = None

    def _connect(self) -> sqlite3.Connection:
        conn = self.connect()
        # One pass over each table: a big page cache would only hold pages read once.
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        install(conn)
        if self._uid is None:
            self._uid = lookup_uid(conn, self.user, create=False)
        return conn

    def _sql(self, sql: str) -> str:
        # The user's integer, ours (never a caller's text), inlined as _scope does.
        return sql.format(uid=self._uid)

    async def _rows(
        self, sql: str, params: Sequence[Any], handle: Callable[[list[Any]], Awaitable[None]]
    ) -> None:
        conn = await anyio.to_thread.run_sync(self._connect)
        try:
            await _stream(conn, self._sql(sql), params, handle)
        finally:
            conn.close()

    def _message_rows(self, conversation_ids: Sequence[str]) -> list[Any]:
        idle = self._idle
        conn = idle.pop() if idle else self._connect()
        try:
            return conn.execute(
                self._sql(_MESSAGES), (json.dumps(list(conversation_ids)),)
            ).fetchall()
        finally:
            if idle is None:
                conn.close()
            else:
                idle.append(conn)

    async def _read_ahead(self, conversation_ids: Sequence[str]) -> None:
        rows = await anyio.to_thread.run_sync(self._message_rows, conversation_ids)
        self._ahead[tuple(conversation_ids)] = rows

    async def turn_records(
        self,
        record: RecordSink,
        *,
        completed: Callable[[Sequence[str | None]], None] | None = None,
        times: bool = False,
    ) -> None:
        async def whole(rows: list[Any]) -> None:
            for row in rows:
                # A record's time is decoded only when asked for (a record kept whole
                # decodes its row in full anyway).
                at = decode_opt_time(row[5]) if times else None
                record(row[2], _fields(row), at, functools.partial(_full, row))

        if completed is None:
            await self._rows(_RECORDS, (), whole)
            return
        others: list[int] = []

        async def names(rows: list[Any]) -> None:
            completed([row[0] for row in rows if row[1] == 1])
            others.extend(row[2] for row in rows if row[1] != 1)

        conn = await anyio.to_thread.run_sync(self._connect)
        try:
            # One read transaction: the rowids of the first statement name the same rows
            # in the second, whatever a writer does meanwhile.
            await anyio.to_thread.run_sync(conn.execute, "BEGIN")
            walk = _COMPLETED if self._uid == 0 else _COMPLETED_OF_USER
            await _stream(conn, self._sql(walk), (), names)
            if others:
                await _stream(conn, _RECORDS_AT, (json.dumps(others),), whole)
        finally:
            conn.close()

    async def conversations(
        self,
        handle: Callable[[Sequence[tuple[str, str | None]]], Awaitable[None]],
        *,
        times: bool = False,
    ) -> None:
        # Without times (a whole-store pass) every conversation's messages are read next:
        # those of the next chunk are read while this chunk's are handled.
        ahead = not times

        async def page(rows: list[Any]) -> None:
            chunks = [
                rows[i : i + _CONVERSATIONS_PER_READ]
                for i in range(0, len(rows), _CONVERSATIONS_PER_READ)
            ]
            for i, chunk in enumerate(chunks):
                async with anyio.create_task_group() as tg:
                    if ahead and i + 1 < len(chunks):
                        tg.start_soon(self._read_ahead, [r[0] for r in chunks[i + 1]])
                    await handle([(r[0], decode_opt_time(r[1])) for r in chunk])

        self._idle = []
        try:
            await self._rows(_CONVERSATIONS if times else _CONVERSATION_IDS, (), page)
        finally:
            # No read is running: each was awaited (threads are not cancelled midway).
            idle, self._idle = self._idle, None
            for conn in idle:
                conn.close()

    async def deleted_entities(self) -> Sequence[tuple[str, str]]:
        found: list[tuple[str, str]] = []

        async def page(rows: list[Any]) -> None:
            found.extend((str(r[0]), str(r[1])) for r in rows)

        await self._rows(_DELETED, (), page)
        return found

    async def conversation_messages(self, conversation_ids: Sequence[str]) -> MessageRows:
        if not conversation_ids:
            return [], decode_opt_time
        rows = self._ahead.pop(tuple(conversation_ids), None)
        if rows is None:
            rows = await anyio.to_thread.run_sync(self._message_rows, conversation_ids)
        return rows, decode_opt_time


async def _stream(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any],
    handle: Callable[[list[Any]], Awaitable[None]],
) -> None:
    """The rows of ``sql``, a batch at a time into ``handle``, the next batch read meanwhile."""
    cursor = await anyio.to_thread.run_sync(conn.execute, sql, params)
    rows = await anyio.to_thread.run_sync(cursor.fetchmany, _BATCH)
    while rows:
        ahead: list[list[Any]] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_fetch, cursor, ahead)
            await handle(rows)
        rows = ahead[0]


async def _fetch(cursor: sqlite3.Cursor, into: list[list[Any]]) -> None:
    into.append(await anyio.to_thread.run_sync(cursor.fetchmany, _BATCH))


def _fields(row: Sequence[Any]) -> Mapping[str, Any]:
    """A record row's fields: the stored doc's field map where the current format keeps it
    (``"f"``, beside ``"o"``), read without decoding the rest; any other format through the
    store's reader."""
    try:
        doc = json.loads(row[3])
    except ValueError:
        doc = None
    fields = doc.get("f") if isinstance(doc, dict) and "o" in doc else None
    if isinstance(fields, dict):
        return fields
    if isinstance(fields, list):
        return decode_fields(fields, row[2])
    return query_item(row)["snapshot"]  # type: ignore[no-any-return]


def _full(row: Sequence[Any]) -> EntitySnapshot:
    return EntitySnapshot.from_json(query_item(row))
