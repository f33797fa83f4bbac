"""The whole-store audit's reads, streamed: memory follows the problems, not the store.

The audit's reads of a whole store (:mod:`._scan` explains them) pair each turn's record
with its two messages. Holding every turn until the end costs kilobytes per turn; here
only the turns that may be findings are held:

1. the turn records are read first, page by page: a ``completed`` record (nearly all of
   them) is kept as a 64-bit hash of its turn's key (and its time, when times matter), in
   sorted arrays; any other record is kept whole, as it may be a finding;
2. the conversations are read page by page, and each page's messages as in :mod:`._scan`;
   once a page is read, every turn it completed (both messages in a conversation, record
   ``completed`` or none: no finding is possible) is counted and dropped;
3. what is left (turns missing a half, records with no messages, and with ``thorough`` the
   messages outside every conversation) is judged as before, by :mod:`._audit`.

A turn dropped in step 2 cannot become a finding later: a message read afterwards for a
turn that already has both halves changes nothing (:meth:`._scan.Auditor.add_message`).
A kept turn whose record is ``completed`` gets that record by id; one whose record cannot
be read so, and a ``completed`` record no page mentioned, are read in a last pass over the
records, only when there is one.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import anyio
import attrs

from .._keys import conversation_entity_id, tenant_for, turn_record_entity_id
from .._reads import gather_bounded, snapshot_or_none
from ..transport._base import EntityQueryResult, EntitySnapshot, Transport
from ..transport._bulk import BulkReadable, BulkReader
from ._scan import (
    Auditor,
    TurnState,
    attach_record,
    message_key,
    norm_key,
    record_conversation_id,
    record_key,
    timestamp,
)

__all__ = [
    "BulkReads",
    "StoreReads",
    "StreamingAuditor",
    "TransportReads",
    "read_all",
    "store_reads",
]

Page = Sequence[EntitySnapshot]


class _Hashes:
    """A set of 64-bit key hashes (open addressing in flat arrays: no object per key, no
    sort), with a "seen" flag and a time for each."""

    def __init__(self, keys: array[int], times: array[float]) -> None:
        size = 1 << max(3, (2 * len(keys)).bit_length())
        self.mask = size - 1
        self.slots = array("q", bytes(8 * size))  # 0: empty (a hash of 0 is stored as 1)
        self.times = array("d", bytes(8 * size)) if times else array("d")
        self.seen = bytearray(size)
        #: the distinct keys held
        self.held = 0
        slots, mask = self.slots, self.mask
        # _slot inlined: this loop runs once per completed record of the store.
        for i, key in enumerate(keys):
            key = key or 1
            at = key & mask
            while slots[at] and slots[at] != key:
                at = (at + 1) & mask
            if not slots[at]:
                slots[at] = key
                self.held += 1
            if times:
                self.times[at] = times[i]

    def _slot(self, key: int) -> int:
        at, slots, mask = key & self.mask, self.slots, self.mask
        while slots[at] and slots[at] != key:
            at = (at + 1) & mask
        return at

    def find(self, key: int) -> int:
        """The slot of ``key``, or -1."""
        at = self._slot(key or 1)
        return at if self.slots[at] else -1

    def see(self, key: int) -> int:
        """:meth:`find`, and mark ``key`` seen if it is held."""
        at = self._slot(key or 1)
        if not self.slots[at]:
            return -1
        self.seen[at] = 1
        return at

    def seen_before(self, key: int) -> bool:
        """True if ``key`` is held and was marked seen."""
        at = self._slot(key or 1)
        return bool(self.slots[at] and self.seen[at])

    def all_seen(self) -> bool:
        """True when every key was marked seen."""
        return self.seen.count(1) == self.held


@attrs.define
class StreamingAuditor(Auditor):
    """An :class:`Auditor` that drops each turn as soon as it is known to be fine."""

    #: non-``completed`` turn records, by storage-form key, until a turn claims them
    pending: dict[str, EntitySnapshot] = attrs.Factory(dict)
    #: the ``completed`` records (see :class:`_Hashes`)
    completed: _Hashes = attrs.Factory(lambda: _Hashes(array("q"), array("d")))
    #: the key hashes of the turns dropped as fine (only kept with ``thorough``)
    dropped: array[int] = attrs.Factory(lambda: array("q"))
    #: turns dropped as fine and included (``since``), and their messages
    fine_turns: int = 0
    fine_messages: int = 0
    #: the conversations of records written at or after ``since`` (see :func:`read_all`)
    recent: set[str] = attrs.Factory(set)
    #: the turns a page touched (settled when the page is read)
    touched: list[str] = attrs.Factory(list)
    #: after the pages: the turns dropped as fine, not taken up again (``thorough``)
    skip_dropped: _Hashes | None = None
    #: the ``since`` of the audit, as seconds
    since_at: float | None = None
    _keys: array[int] = attrs.Factory(lambda: array("q"))
    _times: array[float] = attrs.Factory(lambda: array("d"))

    def turn(self, key: str) -> TurnState | None:
        norm = norm_key(key)
        state = self.turns.get(norm)
        if state is not None:
            return state
        h = hash(norm)
        if self.skip_dropped is not None and self.skip_dropped.find(h) >= 0:
            return None
        # A completed record already seen, with no turn held: an earlier read dropped the
        # turn as fine (a message also PART_OF a conversation read later changes nothing).
        if self.completed.seen_before(h):
            return None
        cid, _, tid = key.rpartition(":")
        state = self.turns[norm] = TurnState(cid, tid, False)
        self.touched.append(norm)
        record = self.pending.pop(norm, None)
        if record is not None:
            attach_record(state, record)
        else:
            at = self.completed.see(h)
            if at >= 0:
                state.completed_at = self.completed.times[at] if self.completed.times else 0.0
        return state

    def take_record(
        self,
        name: str | None,
        fields: Mapping[str, Any],
        at: str | None,
        full: Callable[[], EntitySnapshot],
    ) -> None:
        """Step 1, one turn record: its name, fields and time; ``full`` builds its snapshot,
        called only for a record kept whole."""
        key = record_key(name)
        if key is None:
            return
        norm = norm_key(key)
        if self.since_at is not None and timestamp(at or "") >= self.since_at:
            cid = record_conversation_id(fields, key)
            self.recent.add(conversation_entity_id(cid, tenant_for(self.transport)))
        if fields.get("status") == "completed":
            self._keys.append(hash(norm))
            # A completed record's time matters only to ``since`` (:func:`_activity`).
            if self.since_at is not None:
                self._times.append(timestamp(at) if at else float("nan"))
        elif norm not in self.pending:
            self.pending[norm] = full()

    def take_completed(self, names: Iterable[str | None]) -> None:
        """Step 1 for records known to be ``completed``, by name: :meth:`take_record` of
        each, without its fields (not needed without ``since``)."""
        append = self._keys.append
        for name in names:
            key = record_key(name)
            if key is not None:
                append(hash(norm_key(key)))

    def add_in_conversations(
        self,
        rows: Sequence[tuple[Any, str, str | None, Any]],
        conversation: Callable[[Any], str],
        activity: Callable[[Any], str | None],
    ) -> None:
        """Step 2 for messages known to be ``PART_OF`` a conversation, as rows of
        (conversation, message entity id, canonical name, activity), the first and the last
        as stored (``conversation`` gives the entity id, ``activity`` the time):
        :meth:`add_message` of each row.

        Called once per message of the store, so the common case costs a few dict
        operations: a turn whose two messages are both in ``rows``, and that no earlier
        read and no pending record touched, is fine whatever the order of the rows, so it
        is counted and dropped here, as the next :meth:`settle` would, without a
        :class:`TurnState`. Every other row goes through :meth:`add_message`, in order.
        """
        timed, add = self.timed, self.add_message
        if self.since_at is not None or self.skip_dropped is not None:
            for conv, entity_id, name, at in rows:
                add(entity_id, name, True, conversation(conv), activity(at) if timed else None)
            return
        roles: dict[str, int] = {}  # norm -> 1 (user) | 2 (assistant)
        norms: list[str | None] = []
        for row in rows:
            found = message_key(row[2])
            if found is None:
                norms.append(None)  # not a turn-protocol message: add_message skips it
                continue
            norm = norm_key(found[0])
            roles[norm] = roles.get(norm, 0) | (1 if found[1] == "user" else 2)
            norms.append(norm)
        turns, pending = self.turns, self.pending
        see, seen_before = self.completed.see, self.completed.seen_before
        keep: set[str] = set()  # the turns add_message must see
        fine = 0
        for norm, bits in roles.items():
            if bits == 3 and norm not in turns and norm not in pending:
                h = hash(norm)
                if seen_before(h):
                    continue  # dropped as fine by an earlier read, and counted there
                fine += 1
                see(h)
                if self.thorough:
                    self.dropped.append(h)
            else:
                keep.add(norm)
        self.fine_turns += fine
        self.fine_messages += 2 * fine
        if keep:
            for row, kept in zip(rows, norms, strict=True):
                if kept in keep:
                    at = activity(row[3]) if timed else None
                    add(row[1], row[2], True, conversation(row[0]), at)

    def records_read(self) -> None:
        """Step 1 is over: sort the completed records' hashes for the lookups of step 2."""
        self.completed = _Hashes(self._keys, self._times)
        self._keys, self._times = array("q"), array("d")

    async def claim_records(self, concurrency: int) -> None:
        """Give every kept turn its record, and keep the records no read claimed.

        A kept turn known only to have a ``completed`` record reads it by id; the pending
        records no page claimed become turns of their own; and if a kept turn's record was
        not found by id, or a ``completed`` record was claimed by no turn, one more pass
        over the records finds them.
        """
        wanted = {
            n: s for n, s in self.turns.items() if s.record is None and s.completed_at is not None
        }

        async def by_id(norm: str, state: TurnState) -> None:
            tenant = tenant_for(self.transport)
            rid = turn_record_entity_id(state.conversation_id, state.turn_id, tenant)
            record = await snapshot_or_none(self.transport, rid)
            key = record_key(record.canonical_name) if record is not None else None
            if record is not None and key is not None and norm_key(key) == norm:
                attach_record(state, record)
                del wanted[norm]

        await gather_bounded(
            [functools.partial(by_id, n, s) for n, s in list(wanted.items())], concurrency
        )
        for record in list(self.pending.values()):
            self.add_record(record)
        self.pending.clear()
        if not wanted and self.completed.all_seen():
            return

        def page(records: Page) -> None:
            for record in records:
                key = record_key(record.canonical_name)
                if key is None or record.snapshot.get("status") != "completed":
                    continue
                norm = norm_key(key)
                state = wanted.pop(norm, None)
                if state is not None and state.record is None:
                    attach_record(state, record)
                    continue
                at = self.completed.find(hash(norm))
                if at >= 0 and not self.completed.seen[at]:
                    self.add_record(record)

        await self.paged("conversation_turn", page)

    def settle(self, since_at: float | None) -> None:
        """Count and drop every turn the last reads left complete and closed."""
        for norm in self.touched:
            state = self.turns.get(norm)
            if state is None or not state.fine:
                continue
            del self.turns[norm]
            if self.thorough:
                self.dropped.append(hash(norm))
            if since_at is None or _activity(state) >= since_at:
                self.fine_turns += 1
                self.fine_messages += 2
        self.touched.clear()

    async def load_all_messages(self, search: str | None) -> None:
        """``thorough``: every message, a page at a time (see :meth:`Auditor.load_all_messages`)."""

        def page(messages: Page) -> None:
            for message in messages:
                self.add_listed_message(message)

        await self.paged("conversation_message", page)

    def add_record(self, record: EntitySnapshot) -> None:
        key = record_key(record.canonical_name)
        if key is None:
            return
        state = self.turn(key)
        if state is not None and state.record is None:
            attach_record(state, record)

    async def paged(
        self, entity_type: str, handle: Callable[[Page], Awaitable[None] | None]
    ) -> None:
        """Every entity of ``entity_type``, a page at a time, the next page read meanwhile.

        Cursor paging streams; a server without cursors is read whole first (by offsets,
        :meth:`Auditor.scan`, which notes a refused offset) and handled in one go.
        """
        transport = self.transport
        first = await transport.query_entities(
            entity_type=entity_type, limit=self.page_size, offset=0
        )
        if "next_cursor" not in first.raw:
            found = await self.scan(entity_type, search=None, limit=2)
            await _call(handle, found.entities)
            return
        result = first
        while True:
            ahead: list[EntityQueryResult] = []
            async with anyio.create_task_group() as tg:
                if result.next_cursor is not None:
                    tg.start_soon(self._page_after, entity_type, result.next_cursor, ahead)
                await _call(handle, [e for e in result.entities if e.entity_type == entity_type])
            if not ahead:
                return
            result = ahead[0]

    async def _page_after(
        self, entity_type: str, cursor: str, into: list[EntityQueryResult]
    ) -> None:
        into.append(
            await self.transport.query_entities(
                entity_type=entity_type, limit=self.page_size, cursor=cursor
            )
        )


def _same(record: EntitySnapshot) -> EntitySnapshot:
    return record


async def _call(handle: Callable[[Page], Awaitable[None] | None], page: Page) -> None:
    done = handle(page)
    if done is not None:
        await done


def _activity(state: TurnState) -> float:
    """The turn's latest write as seconds (what ``since`` compares; -inf when unknown)."""
    stamps = [timestamp(m.activity) for m in (state.user, state.assistant) if m and m.activity]
    if state.record is not None and state.record.last_observation_at:
        stamps.append(timestamp(state.record.last_observation_at))
    elif state.completed_at is not None and state.completed_at == state.completed_at:
        stamps.append(state.completed_at)  # NaN: the record had no time
    return max(stamps) if stamps else float("inf")


class BulkReads(Protocol):
    """Where a streamed audit's bulk reads come from: the Transport, or an embedded file."""

    async def records(self) -> None:
        """Every turn record, into :meth:`StreamingAuditor.take_record`."""

    async def conversations(
        self, handle: Callable[[Sequence[tuple[str, str | None]]], Awaitable[None]]
    ) -> None:
        """Every conversation as ``(entity id, last observation time)``, a page at a time."""

    async def messages(self, conversation_ids: Sequence[str]) -> None:
        """The messages ``PART_OF`` each conversation, into :meth:`Auditor.add_message`."""


@attrs.frozen
class TransportReads:
    """The bulk reads over any Transport (see :mod:`._scan`)."""

    auditor: StreamingAuditor
    concurrency: int

    async def records(self) -> None:
        take = self.auditor.take_record

        def page(records: Page) -> None:
            for r in records:
                take(
                    r.canonical_name, r.snapshot, r.last_observation_at, functools.partial(_same, r)
                )

        await self.auditor.paged("conversation_turn", page)

    async def conversations(
        self, handle: Callable[[Sequence[tuple[str, str | None]]], Awaitable[None]]
    ) -> None:
        async def page(found: Page) -> None:
            await handle([(c.entity_id, c.last_observation_at) for c in found])

        await self.auditor.paged("conversation", page)

    async def messages(self, conversation_ids: Sequence[str]) -> None:
        load = self.auditor.load_conversation
        await gather_bounded(
            [functools.partial(load, c) for c in conversation_ids], self.concurrency
        )


@attrs.frozen
class StoreReads:
    """The bulk reads through a store's own :class:`~neotoma_agent.transport._bulk.BulkReader`
    (the embedded store's file): the same answers as :class:`TransportReads`, sooner."""

    auditor: StreamingAuditor
    reader: BulkReader

    async def records(self) -> None:
        auditor = self.auditor
        since = auditor.since_at is not None
        # Without ``since`` a completed record's name is all step 1 needs.
        await self.reader.turn_records(
            auditor.take_record,
            completed=None if since else auditor.take_completed,
            times=since,
        )

    async def conversations(
        self, handle: Callable[[Sequence[tuple[str, str | None]]], Awaitable[None]]
    ) -> None:
        await self.reader.conversations(handle, times=self.auditor.since_at is not None)

    async def messages(self, conversation_ids: Sequence[str]) -> None:
        if not conversation_ids:
            return
        rows, activity = await self.reader.conversation_messages(conversation_ids)
        self.auditor.add_in_conversations(rows, conversation_ids.__getitem__, activity)


def store_reads(transport: Transport, auditor: StreamingAuditor) -> StoreReads | None:
    """The bulk reads of a store that has them (:class:`BulkReadable`), else ``None``."""
    if not isinstance(transport, BulkReadable):
        return None
    reader = transport._bulk_reader()
    return None if reader is None else StoreReads(auditor, reader)


async def read_all(
    auditor: StreamingAuditor,
    conversations: set[str],
    concurrency: int,
    reads: BulkReads | None = None,
) -> None:
    """Steps 1 to 3 (see the module docstring); leaves in ``auditor.turns`` what may be a
    finding, and adds every conversation read to ``conversations``."""
    bulk = reads if reads is not None else TransportReads(auditor, concurrency)
    since_at = auditor.since_at
    await bulk.records()
    auditor.records_read()

    async def load(ids: Sequence[str]) -> None:
        conversations.update(ids)
        await bulk.messages(ids)
        auditor.settle(since_at)

    async def page(found: Sequence[tuple[str, str | None]]) -> None:
        await load([c for c, at in found if since_at is None or timestamp(at or "") >= since_at])

    await bulk.conversations(page)
    if since_at is not None:
        # A turn abandoned with no reply writes only its record, not its conversation:
        # read the conversations of recent records too.
        await load(sorted(auditor.recent - conversations))
    if auditor.thorough:
        auditor.skip_dropped = _Hashes(auditor.dropped, array("d"))
        auditor.dropped = array("q")
        await auditor.load_all_messages(None)
    await auditor.claim_records(concurrency)
    auditor.touched.clear()
