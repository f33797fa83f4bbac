"""What an agent reads of its conversation: earlier turns, as frozen records.

One reader serves ``t.history``, :meth:`NeotomaMemory.history`, ``show`` and the reports.
It groups a conversation's messages by turn (the ``turn_key`` each carries), takes each
turn's status from its ``conversation_turn`` record (whose id is derived from the turn id),
and orders turns by the turn itself, never by when a store happened to write them:

1. by ``turn_number`` when every turn has one;
2. else by turn id when every id is one of the library's time-ordered ids (their order is
   the order the turns began, whatever order concurrent turns were written in);
3. else by when each turn's first message was written, to the millisecond (turns begun in
   one millisecond keep no order); on a real server, whose route lists messages by latest
   activity, that takes one more read: the PART_OF edges carry each creation time.

Where the messages come from, cheapest first:

- a store that pages (:class:`~neotoma_agent.transport._base.ConversationReader` with the
  ``limit`` / ``before`` extension: the embedded store, the dev server): the last messages
  before the bound and the turn records of their turns, in **one** request whose cost does
  not grow with the conversation's length;
- a real Neotoma server (the same route, which ignores the extension): every message of the
  conversation in one request, then the turn records and the message snapshots of the
  turns kept, concurrently (the route trims the content it lists; snapshots are exact). The
  first request grows with the conversation's length;
- any other transport: the generic reads (the PART_OF edges of the conversation, each
  message's snapshot and REFERS_TO edges, each turn record), which also grow with it.

Revisions and replays are one message entity each, so a turn shows once with its latest
text. An abandoned turn shows the partial reply the user saw (``reply``, ``None`` if none).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, TypeAlias, cast

import attrs

from .._engine.history import Group, Paged, group_turns, page_reads
from .._engine.requests import Machine
from .._records.checks import check_optional_count
from .._records.keys import conversation_entity_id, turn_record_entity_id
from .._records.user_id import tenant_for
from .._util.deferred import Deferring, defer
from ..exceptions import NotFoundError
from ..transport._results import ConversationMessage
from .paged import gather_bounded, snapshot_or_none

if TYPE_CHECKING:
    from ..transport._base import (
        ConversationReader,
        EntitySnapshot,
        RecentConversation,
        RelatedEntities,
        RelatedEntity,
        Transport,
    )
    from .tool_reads import StoredToolCall

__all__ = [
    "DEFAULT_HISTORY_TURNS",
    "HistoryStatus",
    "HistoryTurn",
    "PagesRead",
    "StoredConversation",
    "StoredMessage",
    "StoredTurn",
    "paged_history",
    "read_already",
    "read_conversation",
    "read_history",
]

HistoryStatus = Literal["completed", "abandoned", "open"]

#: earlier turns a turn reads by default (``history_turns``): read beside retrieval and the
#: user store, so they add no round trip (``benchmarks/`` measures what they cost)
DEFAULT_HISTORY_TURNS: Final = 5

# The library's own turn ids (``new_turn_id``): a UUIDv7 layout, time-ordered.
_TIME_ORDERED_ID: Final = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
)


@attrs.frozen
class HistoryTurn(Deferring):
    """One earlier turn of a conversation, as stored.

    Revisions and replays show once, with their latest text. An abandoned turn shows the
    partial reply the user saw (``reply``, or ``None`` if nothing was shown); an ``open``
    one is still running (or was cut off by a crash before its reply was stored).

    ``tools`` of a turn read from a store that sends the calls with its history page is
    built on its first read, from that page (most turns never read it): the same value,
    whenever it is read.
    """

    turn_id: str
    #: the stored turn number, when the turn was given one
    turn_number: int | None
    #: the exact user message
    user: str
    #: the exact reply (partial for an abandoned turn), or ``None`` if none was stored
    reply: str | None
    status: HistoryStatus
    #: entity ids the user message REFERS_TO
    user_refers_to: tuple[str, ...] = ()
    #: entity ids the reply REFERS_TO
    reply_refers_to: tuple[str, ...] = ()
    #: the tool calls the turn made, ordered by ``invoked_at`` (name, status, duration,
    #: entity id; ``memory.tools(turn_id)`` reads their arguments and results)
    tools: tuple[StoredToolCall, ...] = ()
    #: the entities both messages REFER_TO (reply's first), with their types and names:
    #: what retrieval's recency reads (no extra request)
    entities: tuple[RelatedEntity, ...] = attrs.field(default=(), eq=False, repr=False)


# The records below HistoryTurn (public: it stays what it is) are NamedTuples and a slots
# class, not attrs: a hook reads history in a fresh process per prompt; they check nothing.


class StoredMessage(NamedTuple):
    """One stored message of a turn, with the entities it REFERS_TO (names included)."""

    role: str
    entity_id: str
    content: str
    turn_key: str
    refers_to: tuple[RelatedEntity, ...]
    turn_number: int | None = None


class StoredTurn(NamedTuple):
    """One turn as the store holds it: its messages (user first) and its turn record.

    ``status`` is the record's (``completed``, ``abandoned``, ``open``) or ``unknown`` when
    there is no record (messages another client wrote).
    """

    turn_id: str
    status: str
    messages: tuple[StoredMessage, ...]
    record: EntitySnapshot | None
    #: the tool calls the turn made, ordered by ``invoked_at``
    tools: tuple[StoredToolCall, ...] = ()

    @property
    def turn_number(self) -> int | None:
        """The smallest turn number its messages carry."""
        return _first_number(m.turn_number for m in self.messages)

    def message(self, role: str) -> StoredMessage | None:
        """The ``role`` message, if stored."""
        return next((m for m in self.messages if m.role == role), None)

    def to_history(self) -> HistoryTurn:
        """The :class:`HistoryTurn` an agent reads (no record: replied means completed)."""
        user, reply = self.message("user"), self.message("assistant")
        return HistoryTurn(
            turn_id=self.turn_id,
            turn_number=self.turn_number,
            user=user.content if user is not None else "",
            reply=reply.content if reply is not None else None,
            status=_history_status(self.status, reply is not None),
            user_refers_to=_ids(user),
            reply_refers_to=_ids(reply),
            tools=self.tools,
            entities=(
                *(reply.refers_to if reply is not None else ()),
                *(user.refers_to if user is not None else ()),
            ),
        )


class StoredConversation(NamedTuple):
    """A conversation's turns in order, and what its entity says about it."""

    conversation_id: str
    conversation_entity_id: str
    #: the conversation entity's snapshot (title, platform, ...); ``None``: no such entity
    snapshot: EntitySnapshot | None
    turns: tuple[StoredTurn, ...]


def _first_number(numbers: Iterable[int | None]) -> int | None:
    # A loop, not min() over a generator: this runs twice per turn of every history page.
    first: int | None = None
    for n in numbers:
        if n is not None and (first is None or n < first):
            first = n
    return first


def _history_status(status: str, replied: bool) -> HistoryStatus:
    """A turn record's status as history reports it (no record: replied means completed)."""
    if status in ("completed", "abandoned", "open"):
        return status  # type: ignore[return-value]
    return "completed" if replied else "open"


def _ids(message: StoredMessage | None) -> tuple[str, ...]:
    if message is None:
        return ()
    return tuple(dict.fromkeys(r.entity_id for r in message.refers_to))


def _refers_to(*messages: ConversationMessage | None) -> tuple[RelatedEntity, ...]:
    """The REFERS_TO targets of ``messages``, in order (most messages have none)."""
    return tuple(
        r
        for m in messages
        if m is not None and m.related
        for r in m.related
        if r.relationship_type == "REFERS_TO"
    )


def _numbered(groups: list[Group], numbers: dict[str, int | None]) -> bool:
    return bool(groups) and all(numbers.get(g.turn_id) is not None for g in groups)


def _time_ordered(groups: list[Group]) -> bool:
    return all(_TIME_ORDERED_ID.fullmatch(g.turn_id) for g in groups)


def _ordered_by_turn(groups: list[Group], numbers: dict[str, int | None]) -> bool:
    """Whether the turns themselves say their order (numbers, or time-ordered ids)."""
    return _numbered(groups, numbers) or _time_ordered(groups)


def _order(groups: list[Group], numbers: dict[str, int | None]) -> list[Group]:
    """Turns in the turn's own order (see the module docstring)."""
    if _numbered(groups, numbers):
        return sorted(groups, key=lambda g: (numbers[g.turn_id], g.first))
    if _time_ordered(groups):
        return sorted(groups, key=lambda g: g.turn_id)
    return sorted(groups, key=lambda g: g.first)


async def _parts(transport: Transport, entity_id: str) -> tuple[RelatedEntities, dict[str, str]]:
    """The conversation's PART_OF edges, and each message's creation time (by id)."""
    parts = await transport.retrieve_related_entities(
        entity_id, relationship_types=["PART_OF"], direction="inbound"
    )
    return parts, {e.id: str(e.raw.get("created_at") or "") for e in parts.entities}


async def _in_creation_order(
    transport: Transport, entity_id: str, messages: list[ConversationMessage]
) -> list[ConversationMessage]:
    """``messages`` in the order they were first written (the conversation's PART_OF edges
    give each message's creation time): a real server lists them by latest activity, where
    a revised turn would move to its revision's place."""
    _, created = await _parts(transport, entity_id)
    return sorted(messages, key=lambda m: (created.get(m.message_id, ""), m.message_id))


def _bounded(groups: list[Group], limit: int | None, before: str | None) -> list[Group]:
    if before is not None:
        ids = [g.turn_id for g in groups]
        groups = groups[: ids.index(before)] if before in ids else groups
    return groups if limit is None else groups[max(0, len(groups) - limit) :]


def _numbers(groups: list[Group]) -> dict[str, int | None]:
    return {g.turn_id: _group_number(g) for g in groups}


def _group_number(group: Group) -> int | None:
    """The smallest turn number the group's messages carry."""
    # _first_number's loop inline: this runs twice per turn of every history page.
    first: int | None = None
    for _, m in group.messages:
        n = m.turn_number
        if n is not None and (first is None or n < first):
            first = n
    return first


def _record(record: EntitySnapshot | None) -> tuple[EntitySnapshot | None, str]:
    """A turn's record (``None`` unless a ``conversation_turn``) and its status."""
    if record is not None and record.entity_type != "conversation_turn":
        record = None
    status = str(record.snapshot.get("status") or "unknown") if record is not None else "unknown"
    return record, status


def _stored_message(role: str, m: ConversationMessage) -> StoredMessage:
    refers_to = tuple(r for r in m.related if r.relationship_type == "REFERS_TO")
    return StoredMessage(
        role, m.message_id, m.content or "", m.turn_key or "", refers_to, m.turn_number
    )


def _turn(group: Group, record: EntitySnapshot | None) -> StoredTurn:
    record, status = _record(record)
    messages = sorted(group.messages, key=lambda rm: rm[0] != "user")
    stored = tuple(_stored_message(role, m) for role, m in messages)
    return StoredTurn(group.turn_id, status, stored, record)


def _history_turn(group: Group, record: EntitySnapshot | None) -> HistoryTurn:
    """``_turn(group, record).to_history()``, without the StoredTurn and its messages."""
    _, status = _record(record)
    user: ConversationMessage | None = None
    reply: ConversationMessage | None = None
    for role, m in group.messages:
        # the first of each role, as StoredTurn.message finds them (user first, stable)
        if role == "user" and user is None:
            user = m
        elif role == "assistant" and reply is None:
            reply = m
    return HistoryTurn(
        group.turn_id,
        _group_number(group),
        (user.content or "") if user is not None else "",
        (reply.content or "") if reply is not None else None,
        _history_status(status, reply is not None),
        user.refers_to if user is not None else (),
        reply.refers_to if reply is not None else (),
        # Most messages name nothing: no generator for them.
        entities=_refers_to(reply, user)
        if (reply is not None and reply.related) or (user is not None and user.related)
        else (),
    )


class _SentCalls:
    """The tool calls the pages of one history read sent, parsed and grouped by turn key
    when the first of its turns' ``tools`` is read (see :class:`HistoryTurn`)."""

    __slots__ = ("_by_key", "_keys", "_pages")

    def __init__(self, pages: Sequence[RecentConversation], keys: Sequence[str]) -> None:
        self._pages = pages
        self._keys = keys
        self._by_key: dict[str, tuple[StoredToolCall, ...]] | None = None

    def of(self, turn_key: str) -> tuple[StoredToolCall, ...]:
        """The calls of the turn ``turn_key``, ordered by ``invoked_at``."""
        by_key = self._by_key
        if by_key is None:
            # Two threads reading at once may both build it, alike. The pages are kept: the
            # turns hold this only until each one's ``tools`` is read.
            sent = [c for page in self._pages for c in page.tool_calls or ()]
            from .tool_reads import calls_by_turn_key  # here: most turns never read tools

            by_key = self._by_key = calls_by_turn_key(sent, self._keys)
        return by_key.get(turn_key, ())


async def _from_reader(
    reader: ConversationReader,
    conversation_id: str,
    entity_id: str,
    limit: int | None,
    before: str | None,
) -> Paged | list[ConversationMessage]:
    """:func:`~._engine.history.page_reads` on a transport that pages."""
    steps = page_reads(conversation_id, entity_id, limit, before, tenant_for(reader))
    request = next(steps)
    while True:
        page = await reader.recent_conversation(
            request.entity_id, limit=request.limit, before=request.before
        )
        try:
            request = steps.send(page)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def _generic_messages(transport: Transport, entity_id: str) -> list[ConversationMessage]:
    """Every message PART_OF the conversation, read entity by entity (creation order)."""
    parts, created = await _parts(transport, entity_id)
    ids = sorted(
        {
            r.source_entity_id
            for r in parts.relationships
            if r.relationship_type == "PART_OF" and r.target_entity_id == entity_id
        },
        key=lambda i: (created.get(i, ""), i),
    )

    async def message(message_id: str) -> ConversationMessage | None:
        snap = await snapshot_or_none(transport, message_id)
        if snap is None or snap.entity_type != "conversation_message":
            return None
        edges = await transport.retrieve_related_entities(
            message_id, relationship_types=["REFERS_TO"], direction="outbound"
        )
        names = {e.id: e for e in edges.entities}
        related = []
        for r in edges.relationships:
            if r.source_entity_id != message_id:
                continue
            far = names.get(r.target_entity_id)
            related.append(
                {
                    "entity_id": r.target_entity_id,
                    "entity_type": far.entity_type if far else "",
                    "canonical_name": far.canonical_name if far else None,
                    "relationship_type": r.relationship_type,
                }
            )
        fields = snap.snapshot
        raw: dict[str, Any] = {
            "message_id": message_id,
            "role": fields.get("role"),
            "content": fields.get("content"),
            "turn_key": fields.get("turn_key"),
            "activity_at": created.get(message_id, ""),
            "related_entities": related,
            "turn_number": fields.get("turn_number"),
        }
        return ConversationMessage.from_json(raw)

    loaded = await gather_bounded([functools.partial(message, i) for i in ids])
    return [m for m in loaded if m is not None]


async def _records(
    transport: Transport, conversation_id: str, groups: Sequence[Group], *, exact: bool
) -> dict[str, EntitySnapshot]:
    """The kept turns' records; with ``exact``, also each message's exact text (in place):
    a real server's route trims the content it lists, so the snapshots say what was stored.
    """
    ids = [turn_record_entity_id(conversation_id, g.turn_id, tenant_for(transport)) for g in groups]
    messages = [(g, n) for g in groups for n in range(len(g.messages))] if exact else []
    ids += [g.messages[n][1].message_id for g, n in messages]
    snaps = await gather_bounded([functools.partial(snapshot_or_none, transport, i) for i in ids])
    for (group, n), snap in zip(messages, snaps[len(groups) :], strict=True):
        content = snap.snapshot.get("content") if snap is not None else None
        if isinstance(content, str):
            role, message = group.messages[n]
            group.messages[n] = (role, attrs.evolve(message, content=content))
    return {g.turn_id: s for g, s in zip(groups, snaps, strict=False) if s is not None}


def _as_reader(transport: Transport) -> ConversationReader | None:
    """``transport`` if it is a :class:`ConversationReader`: the test ``isinstance`` makes
    against the runtime protocol (each method present, not ``None``), without its cost
    (a runtime-protocol check inspects every member, on every turn)."""
    for name in _reader_methods():
        if getattr(transport, name, None) is None:
            return None
    return cast("ConversationReader", transport)


@functools.cache
def _reader_methods() -> tuple[str, ...]:
    """The methods that make a transport a ConversationReader (read off the protocol once,
    on the first read through a transport: a hook's read of a store file needs none)."""
    from ..transport._base import ConversationReader

    return tuple(
        sorted(n for n, v in vars(ConversationReader).items() if callable(v) and n[0] != "_")
    )


async def _read_turns(
    transport: Transport, conversation_id: str, limit: int | None, before: str | None
) -> list[tuple[Group, EntitySnapshot | None]]:
    """The kept turns, in order, each with its record (as the store gave it, or ``None``)."""
    return (await _read_paged(transport, conversation_id, limit, before))[0]


#: what a store's pages answered a history read (:func:`~._engine.history.page_reads`),
#: read already (an enter's job read them beside its store), or the error a read raised
PagesRead: TypeAlias = "Paged | list[ConversationMessage] | Exception"


def read_already(pages: PagesRead | None) -> bool:
    """Whether a history read handed ``pages`` has nothing more to read: the pages of a
    store that pages, which sent the turns' tool calls, or whose turn records count none
    (so that it needs no deadline)."""
    if not isinstance(pages, Paged):
        return False
    if pages.calls is not None:
        return True
    from .tool_reads import recorded_tool_count  # as _with_tools reads them

    return not any(recorded_tool_count(r) > 0 for r in pages.records.values())


async def _read_paged(
    transport: Transport,
    conversation_id: str,
    limit: int | None,
    before: str | None,
    pages: PagesRead | None = None,
) -> tuple[list[tuple[Group, EntitySnapshot | None]], list[RecentConversation] | None]:
    """:func:`_read_turns`, and the pages of a paging store that sent the turns' tool calls
    (``None``: not sent)."""
    entity_id = conversation_entity_id(conversation_id, tenant_for(transport))
    answer: Paged | list[ConversationMessage] | None = None
    reader = _as_reader(transport)
    if isinstance(pages, Exception):
        raise pages
    if pages is not None:
        answer = pages
    elif reader is not None:
        try:
            answer = await _from_reader(reader, conversation_id, entity_id, limit, before)
        except NotImplementedError:
            answer = None  # a wrapper around a transport without the route
    calls: list[RecentConversation] | None = None
    if isinstance(answer, Paged):
        groups, records, calls = answer.groups, answer.records, answer.calls
        chosen = _chosen(answer, limit, before)
    else:
        messages = answer if answer is not None else await _generic_messages(transport, entity_id)
        groups = group_turns(conversation_id, messages)
        if answer is not None and not _ordered_by_turn(groups, _numbers(groups)):
            # A real server's route: one more read, only when the turns do not say their order.
            messages = await _in_creation_order(transport, entity_id, messages)
            groups = group_turns(conversation_id, messages)
        chosen = _bounded(_order(groups, _numbers(groups)), limit, before)
        records = await _records(transport, conversation_id, chosen, exact=answer is not None)
    return [(g, records.get(g.turn_id)) for g in chosen], calls


async def _with_tools(
    transport: Transport,
    conversation_id: str,
    turns: Sequence[tuple[Group, EntitySnapshot | None]],
    sent: list[RecentConversation] | None,
) -> tuple[HistoryTurn, ...]:
    """Each turn, with its tool calls: from what the pages sent (built when read), else
    read (only for turns whose record counts calls: one round trip for all of them)."""
    history = [_history_turn(g, record) for g, record in turns]
    if sent is not None:
        keys = [f"{conversation_id}:{g.turn_id}" for g, _ in turns]
        calls = _SentCalls(sent, keys)
        return tuple(
            defer(h, "tools", functools.partial(calls.of, key))
            for h, key in zip(history, keys, strict=True)
        )
    # Here: a hook reading history for its context block (paged_history) shows no calls.
    from .tool_reads import read_tools_of, recorded_tool_count

    if not any(recorded_tool_count(record) > 0 for _, record in turns):
        return tuple(history)  # no turn's record counts a call: nothing to read

    read = await read_tools_of(transport, [_record(record)[0] for _, record in turns])
    return tuple(attrs.evolve(h, tools=c) if c else h for h, c in zip(history, read, strict=True))


def _chosen(answer: Paged, limit: int | None, before: str | None) -> list[Group]:
    """The turns kept of what a store that pages sent, in order."""
    return _bounded(_order(answer.groups, _numbers(answer.groups)), limit, before)


def paged_history(
    conversation_id: str, *, limit: int | None, before: str | None, tenant: str | None = None
) -> Machine[tuple[HistoryTurn, ...] | None]:
    """:func:`read_history` as a step of the turn machine, on a store that pages: the
    :class:`~._engine.requests.HistoryPage` requests of :func:`~._engine.history.page_reads`,
    each answered with the page (``RecentConversation``); ``None`` when the store does not
    page. A conversation the store does not hold (``NotFoundError`` thrown in) has none.

    The turns carry no tool calls (``tools`` is empty): what reads them this way (a hook
    opening a turn on a store file, in its own thread: retrieval's recency, the context
    block) does not show them. ``tenant``: the store's (its ids').
    """
    if (limit := _check_limit(limit)) == 0:
        return ()
    eid = conversation_entity_id(conversation_id, tenant)
    try:
        answer = yield from page_reads(conversation_id, eid, limit, before, tenant)
    except NotFoundError:
        return ()
    if not isinstance(answer, Paged):
        return None
    return tuple(
        _history_turn(g, answer.records.get(g.turn_id)) for g in _chosen(answer, limit, before)
    )


def _check_limit(limit: object) -> int | None:
    return check_optional_count(limit, "limit")


async def read_history(
    transport: Transport,
    conversation_id: str,
    *,
    limit: int | None = 20,
    before: str | None = None,
    pages: PagesRead | None = None,
) -> tuple[HistoryTurn, ...]:
    """The last ``limit`` turns (``None``: all) before turn ``before``, oldest first.

    A ``before`` turn id the conversation does not hold (yet) counts as after every turn. A
    conversation that does not exist has no history. ``pages``: what the store's pages
    answered :func:`~._engine.history.page_reads` for this read, read already by the caller
    (then a page that sent the turns' tool calls leaves nothing more to read).
    """
    limit = _check_limit(limit)
    if limit == 0:
        return ()
    try:
        turns, sent = await _read_paged(transport, conversation_id, limit, before, pages)
    except NotFoundError:
        return ()
    return await _with_tools(transport, conversation_id, turns, sent)


async def read_conversation(
    transport: Transport,
    conversation_id: str,
    *,
    limit: int | None = None,
    before: str | None = None,
    tool_details: bool = False,
) -> StoredConversation:
    """A conversation's turns, in order (``show``, the reports, the web view).

    Every turn by default; ``limit`` / ``before`` ask for the last ``limit`` turns before
    turn ``before`` (a page, read as :func:`read_history` reads one). ``tool_details``
    reads each tool call's arguments and result too.
    """
    limit = _check_limit(limit)
    entity_id = conversation_entity_id(conversation_id, tenant_for(transport))
    snapshot = await snapshot_or_none(transport, entity_id)
    if snapshot is None or snapshot.entity_type != "conversation":
        return StoredConversation(conversation_id, entity_id, None, ())
    if limit == 0:
        return StoredConversation(conversation_id, entity_id, snapshot, ())
    from .tool_reads import read_tools_of

    turns = await _read_turns(transport, conversation_id, limit, before)
    records = [_record(record)[0] for _, record in turns]
    calls = await read_tools_of(transport, records, details=tool_details)
    stored = tuple(
        _turn(g, record)._replace(tools=c) for (g, record), c in zip(turns, calls, strict=True)
    )
    return StoredConversation(conversation_id, entity_id, snapshot, stored)
