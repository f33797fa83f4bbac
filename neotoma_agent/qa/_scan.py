"""The audit's reads: what the store holds for each turn, gathered in a few bulk reads.

:func:`read_scoped` (one conversation) and :func:`._stream.read_all` (every conversation,
streamed) fill an :class:`Auditor` with one :class:`TurnState` per turn found: its record and
its two messages, each with whether it hangs off a conversation. :meth:`Auditor.verify` then
settles, with a few snapshot reads, only the turns that lack a half. Judging what is found
is :mod:`._findings`' job.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Final

import attrs

from .. import EntitySnapshot, Transport
from ..log import get_logger
from ..reads import (
    PAGE_SIZE,
    Scan,
    TurnEnding,
    TurnRole,
    conversation_entity_id,
    gather_bounded,
    message_entity_id,
    parse_turn_key,
    read_ending,
    scan_entities,
    snapshot_or_none,
    tenant_for,
    turn_key,
    turn_record_entity_id,
)

__all__ = [
    "Auditor",
    "Message",
    "TurnState",
    "attach_record",
    "message_key",
    "norm_key",
    "parse_timestamp",
    "read_scoped",
    "record_conversation_id",
    "record_key",
    "timestamp",
]

logger = get_logger()

_MESSAGE_PREFIX: Final = "conversation_message:"
_MESSAGE_PREFIX_LEN: Final = len(_MESSAGE_PREFIX)
_RECORD_PREFIX: Final = "conversation_turn:"
# What an assistant message's turn_key adds to its turn's pair (read from the keys
# themselves, which own it).
_ASSISTANT_SUFFIX: Final = turn_key("c", "t", "assistant").removeprefix("c:t")


@attrs.define
class Message:
    entity_id: str
    in_conversation: bool
    conversation_entity_id: str | None
    activity: str | None


@attrs.define
class TurnState:
    conversation_id: str
    turn_id: str
    #: ids taken from stored fields (not from a canonical name, which folds whitespace)
    exact: bool
    record: EntitySnapshot | None = None
    user: Message | None = None
    assistant: Message | None = None
    #: how the record says the turn ended (details read by :meth:`Auditor.read_ending`)
    ending: TurnEnding | None = None
    #: a streamed audit knows the record is ``completed`` before it holds the record: the
    #: record's time in seconds (NaN: it has none), until the record itself is read
    completed_at: float | None = None

    def message(self, role: TurnRole) -> Message | None:
        return self.user if role == "user" else self.assistant

    def set_message(self, role: TurnRole, message: Message) -> None:
        if role == "user":
            self.user = message
        else:
            self.assistant = message

    @property
    def status(self) -> str | None:
        if self.record is None:
            return None
        value = self.record.snapshot.get("status")
        return value if isinstance(value, str) else None

    @property
    def fine(self) -> bool:
        """Both halves in a conversation and the record closed as completed (or no record)."""
        user, assistant = self.user, self.assistant
        return (
            user is not None
            and assistant is not None
            and user.in_conversation
            and assistant.in_conversation
            and (self.record is None or self.status == "completed")
        )

    @property
    def activity(self) -> str | None:
        stamps = [self.record.last_observation_at if self.record else None]
        stamps += [m.activity for m in (self.user, self.assistant) if m is not None]
        known = [s for s in stamps if s]
        return max(known, key=timestamp) if known else None


def norm_key(key: str) -> str:
    # Turns are matched on the storage form of "conversation_id:turn_id" found in canonical
    # names, which both a message's and a turn record's name carry, transformed alike
    # (whitespace runs collapsed, case kept). Only a name holding an email is stored
    # lowercased and uncollapsed, and the ":assistant" suffix can make one of two names look
    # like an email: fold those.
    return _fold(key) if "@" in key else key


def _fold(text: str) -> str:
    """An id as any canonical name may carry it: whitespace runs collapsed, case folded."""
    return " ".join(text.split()).casefold()


def message_key(name: str | None) -> tuple[str, TurnRole] | None:
    """(storage-form turn key, role) from a message's canonical name."""
    if not name or not name.startswith(_MESSAGE_PREFIX):
        return None
    # The name carries the turn_key (in storage form), so it parses like one: this is
    # parse_turn_key's split, without building the pair (it runs once per message).
    key = name[_MESSAGE_PREFIX_LEN:]
    role: TurnRole = "user"
    if key.endswith(_ASSISTANT_SUFFIX):
        key, role = key[: -len(_ASSISTANT_SUFFIX)], "assistant"
    colon = key.rfind(":")
    return (key, role) if 0 < colon < len(key) - 1 else None


def record_key(name: str | None) -> str | None:
    """The storage-form turn key from a turn record's canonical name."""
    if not name or not name.startswith(_RECORD_PREFIX):
        return None
    sid, sep, tid = name[len(_RECORD_PREFIX) :].rpartition("|")
    return f"{sid}:{tid}" if sep and sid and tid else None


def attach_record(state: TurnState, record: EntitySnapshot) -> None:
    """Give ``state`` its record, and the exact ids the record stores (if it does)."""
    state.record = record
    sid, tid = record.snapshot.get("session_id"), record.snapshot.get("turn_id")
    if isinstance(sid, str) and sid and isinstance(tid, str) and tid:
        state.conversation_id, state.turn_id, state.exact = sid, tid, True


def record_conversation_id(fields: Mapping[str, Any], key: str) -> str:
    """The conversation id of a turn record (``fields``): as stored, else from its name's
    ``key``."""
    sid, tid = fields.get("session_id"), fields.get("turn_id")
    if isinstance(sid, str) and sid and isinstance(tid, str) and tid:
        return sid
    return key.rpartition(":")[0]


def parse_timestamp(value: str) -> float:
    # Python 3.10's fromisoformat does not take a trailing Z.
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def timestamp(value: str) -> float:
    """Seconds since the epoch of a stored ISO 8601 timestamp (0.0 if unreadable)."""
    try:
        return parse_timestamp(value)
    except ValueError:
        return 0.0


@attrs.define
class Auditor:
    transport: Transport
    conversation_id: str | None
    thorough: bool
    limit: int
    turns: dict[str, TurnState] = attrs.Factory(dict)
    #: message timestamps matter (``since`` / ``min_age``); else they are not read
    timed: bool = False
    #: a server refused to page through everything: some turns were not examined
    partial: bool = False
    #: the page size of every scan (the audit passes its own, which tests shrink)
    page_size: int = PAGE_SIZE
    #: turns found complete and closed, counted and not kept (a streamed audit), and their
    #: messages: part of the report's totals
    fine_turns: int = 0
    fine_messages: int = 0

    async def scan(self, entity_type: str, *, search: str | None, limit: int) -> Scan:
        """Every entity of one type; a refused offset marks the audit partial."""
        found = await scan_entities(
            self.transport,
            entity_type=entity_type,
            search=search,
            page_size=self.page_size,
            concurrency=limit,
        )
        if found.partial:
            self.partial = True
            logger.warning(
                "audit.partial_scan",
                entity_type=entity_type,
                read=len(found.entities),
                total=found.total,
                refused_offset=found.refused_offset,
            )
        return found

    def turn(self, key: str) -> TurnState | None:
        """The state of the turn with this storage-form key (None: outside the scope)."""
        norm = norm_key(key)
        state = self.turns.get(norm)
        if state is None:
            cid, _, tid = key.rpartition(":")
            if self.conversation_id is not None and _fold(cid) != _fold(self.conversation_id):
                return None  # a search hit on a conversation whose id contains ours
            state = self.turns[norm] = TurnState(cid, tid, False)
        return state

    def add_record(self, record: EntitySnapshot) -> None:
        key = record_key(record.canonical_name)
        if key is None:
            return  # not keyed by (session_id, turn_id): not a turn-protocol record
        state = self.turn(key)
        if state is None or state.record is not None:
            return
        attach_record(state, record)

    def add_message(
        self,
        entity_id: str,
        canonical_name: str | None,
        in_conversation: bool,
        conversation_entity_id: str | None,
        activity: str | None,
        turn_key: object = None,
    ) -> None:
        # Called once per message of the store: kept lean on purpose.
        found = message_key(canonical_name)
        if found is None:
            return  # not keyed by a turn_key: not a turn-protocol message
        key, role = found
        state = self.turns.get(norm_key(key)) or self.turn(key)
        if state is None:
            return
        known = state.user if role == "user" else state.assistant
        if known is None:
            message = Message(entity_id, in_conversation, conversation_entity_id, activity)
            if role == "user":
                state.user = message
            else:
                state.assistant = message
        else:
            # Seen by two reads (concurrent on a scoped audit): the later activity wins,
            # whichever read lands first.
            if activity and (not known.activity or timestamp(activity) > timestamp(known.activity)):
                known.activity = activity
            if in_conversation and not known.in_conversation:
                known.in_conversation, known.conversation_entity_id = True, conversation_entity_id
        if not state.exact and isinstance(turn_key, str):
            parsed = parse_turn_key(turn_key)
            if parsed is not None:
                state.conversation_id, state.turn_id, state.exact = parsed[0], parsed[1], True

    async def load_conversation(self, conversation_entity_id: str) -> None:
        related = await self.transport.retrieve_related_entities(
            conversation_entity_id, relationship_types=["PART_OF"], direction="inbound"
        )
        rows = {e.id: e for e in related.entities if e.entity_type == "conversation_message"}
        add = self.add_message
        for edge in related.relationships:
            if edge.target_entity_id != conversation_entity_id:
                continue
            row = rows.get(edge.source_entity_id)
            if row is None or edge.relationship_type != "PART_OF":
                continue
            updated = row.raw.get("updated_at") if self.timed else None
            add(
                row.id,
                row.canonical_name,
                True,
                conversation_entity_id,
                updated if isinstance(updated, str) else None,
            )

    def add_listed_message(self, message: EntitySnapshot) -> None:
        """A message a scan listed (not known to be in a conversation until an edge says)."""
        self.add_message(
            message.entity_id,
            message.canonical_name,
            False,
            None,
            message.last_observation_at,
            message.snapshot.get("turn_key"),
        )

    async def load_all_messages(self, search: str | None) -> None:
        messages = await self.scan("conversation_message", search=search, limit=self.limit)
        for message in messages.entities:
            self.add_listed_message(message)

    async def read_ending(self, state: TurnState) -> None:
        """Why an abandoned turn was abandoned: its record's closing observation says."""
        if state.record is not None:
            state.ending = await read_ending(self.transport, state.record)

    async def verify(self, state: TurnState) -> None:
        """Settle what the bulk reads left open for one turn (a few reads, only if needed)."""
        if state.user is not None and state.assistant is not None:
            return
        present = state.user or state.assistant
        if not state.exact and present is not None:
            # Repairs and reports need the exact ids, which only the stored turn_key has.
            snap = await snapshot_or_none(self.transport, present.entity_id)
            if snap is not None and present.activity is None:
                present.activity = snap.last_observation_at
            turn_key = snap.snapshot.get("turn_key") if snap is not None else None
            parsed = parse_turn_key(turn_key) if isinstance(turn_key, str) else None
            if parsed is not None:
                state.conversation_id, state.turn_id, state.exact = parsed[0], parsed[1], True
        cid, tid = state.conversation_id, state.turn_id
        if state.record is None and self.conversation_id is not None:
            # A scoped audit found records by search; look this one up by its id too.
            rid = turn_record_entity_id(cid, tid, tenant=tenant_for(self.transport))
            state.record = await snapshot_or_none(self.transport, rid)
        for role in ("user", "assistant"):
            if state.message(role) is not None:
                continue
            mid = message_entity_id(cid, tid, role, tenant=tenant_for(self.transport))
            snap = await snapshot_or_none(self.transport, mid)
            if snap is not None:
                # It exists, but no conversation we read has it as PART_OF.
                state.set_message(
                    role, Message(snap.entity_id, False, None, snap.last_observation_at)
                )


async def read_scoped(
    auditor: Auditor,
    conversations: dict[str, EntitySnapshot | None],
    scope: str,
    concurrency: int,
) -> None:
    """One conversation: its entity by id, its records by name search, its messages."""
    transport = auditor.transport
    conv_entity_id = conversation_entity_id(scope, tenant=tenant_for(transport))
    records: list[EntitySnapshot] = []

    async def conversation_and_messages() -> None:
        snapshot = await snapshot_or_none(transport, conv_entity_id)
        if snapshot is not None:
            conversations[conv_entity_id] = snapshot
            await auditor.load_conversation(conv_entity_id)

    async def scan_records() -> None:
        # The search also finds conversations whose id contains this one: add_record
        # filters them out.
        found = await auditor.scan("conversation_turn", search=scope, limit=2)
        records.extend(found.entities)

    await _read_concurrently(auditor, [conversation_and_messages, scan_records], records, scope)


async def _read_concurrently(
    auditor: Auditor,
    reads: Sequence[Callable[[], Awaitable[None]]],
    records: Sequence[EntitySnapshot],
    search: str | None,
) -> None:
    """Run the reads at once (and, if thorough, a scan of every message matching ``search``),
    then add the turn records the reads collected, once every read is done."""

    async def scan_messages() -> None:
        await auditor.load_all_messages(search)

    jobs = [*reads, scan_messages] if auditor.thorough else list(reads)
    await gather_bounded(jobs, len(jobs))
    for record in records:
        auditor.add_record(record)
