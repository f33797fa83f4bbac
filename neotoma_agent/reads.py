"""Reading a store: conversations, entities, how turns ended, and the ids a store derives.

What a tool over a Neotoma store reads it with, outside any turn (the audit in
:mod:`neotoma_agent.qa` reads through these names). Every function takes any
:class:`~neotoma_agent.Transport` (an :class:`~neotoma_agent.EmbeddedStore` file, an
:class:`~neotoma_agent.HttpTransport` to a server) and only reads::

    from neotoma_agent import EmbeddedStore
    from neotoma_agent.reads import read_conversation, read_ending, scan_entities

    async with EmbeddedStore.open("memory.db") as store:
        conversation = await read_conversation(store, "support-42")
        for turn in conversation.turns:
            print(turn.turn_id, turn.status, turn.message("user"))
        records = await scan_entities(store, entity_type="conversation_turn")
        endings = [await read_ending(store, record) for record in records.entities]

Six groups of names:

- **conversations**: :func:`list_conversations` lists a store's conversations (a
  :class:`ConversationList`); :func:`read_conversation` gives one's turns in order
  (:class:`StoredConversation`, :class:`StoredTurn`, :class:`StoredMessage`), and
  :func:`turn_ending` how each ended.
- **entities**: :func:`scan_entities` pages through every entity of a type (a
  :class:`Scan`, which says when a server stopped the paging early);
  :func:`snapshot_or_none` reads one; :func:`gather_bounded` runs many reads at most a few
  at a time; :func:`bulk_reader` gives the whole-type reads a store keeps tables for.
- **turn endings**: :func:`ending_of` and :func:`read_ending` say how a turn ended
  (:class:`TurnEnding`) from its ``conversation_turn`` record; :class:`TurnView` puts a
  turn and its ending together as ``neotoma-agent show`` prints them.
- **counts**: :func:`collect_stats` counts what a store holds (:class:`StoreStats`:
  entities by type, turns by status, tool calls by tool).
- **search**: :func:`search` finds what was said, in every conversation or one, as
  :meth:`NeotomaMemory.search <neotoma_agent.NeotomaMemory.search>` does.
- **ids**: :func:`conversation_entity_id`, :func:`message_entity_id` and
  :func:`turn_record_entity_id` derive, with no I/O, the entity ids a store gives a
  conversation, a turn's messages and its record; :func:`turn_key` and
  :func:`parse_turn_key` go between a turn and its messages' ``turn_key``; the
  ``validate_*`` functions check ids before anything is read or written.

Stored text is whatever a writer stored: :func:`printable` escapes it for a terminal, and
:func:`printer` gives a ``write`` that escapes everything written through it;
:func:`summarize_payload` shows a tool call's arguments or result on one line, as
``tool_payloads="summary"`` stores them.

A conversation id no entity id can be derived from (blank, or a generic token such as
``unknown``) raises :class:`IdentityError` from the reads and the id functions: no
conversation can have it.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any, Final, Literal

import attrs

from ._neotoma.identity import ENTITY_ID_RE
from ._neotoma.identity import IdentityError as IdentityError
from ._recall.history import StoredConversation as StoredConversation
from ._recall.history import StoredMessage as StoredMessage
from ._recall.history import StoredTurn as StoredTurn
from ._recall.history import read_conversation as read_conversation
from ._recall.paged import PAGE_SIZE as PAGE_SIZE
from ._recall.paged import READ_CONCURRENCY as READ_CONCURRENCY
from ._recall.paged import Scan as Scan
from ._recall.paged import gather_bounded as gather_bounded
from ._recall.paged import scan_entities as scan_entities
from ._recall.paged import snapshot_or_none as snapshot_or_none
from ._recall.tool_reads import StoredToolCall
from ._recall.turn_record import AUDIT_REPAIR_REASON as _AUDIT_REPAIR_REASON
from ._recall.turn_record import TurnEnding as TurnEnding
from ._recall.turn_record import ending_of as ending_of
from ._recall.turn_record import read_ending as read_ending
from ._recall.turn_record import short_class as short_class
from ._records.keys import TurnKeys
from ._records.keys import conversation_entity_id as _conversation_entity_id
from ._records.keys import message_entity_id as _message_entity_id
from ._records.keys import parse_turn_key as _parse_turn_key
from ._records.keys import turn_record_entity_id as _turn_record_entity_id
from ._records.keys import validate_conversation_id as _validate_conversation_id
from ._records.keys import validate_entity_id as _validate_entity_id
from ._records.keys import validate_turn_id as _validate_turn_id
from ._records.payloads import BOOKKEEPING_TYPES as _BOOKKEEPING_TYPES
from ._records.payloads import stored_platform as stored_platform
from ._records.tool_payload import SUMMARY_CHARS as _SUMMARY_CHARS
from ._records.tool_payload import summarize as _summarize
from ._records.tools import TOOL_TYPE as _TOOL_TYPE
from ._records.user_id import identify as _identify
from ._records.user_id import tenant_for as _tenant_for
from ._util.terminal import printable as printable
from ._util.terminal import printer as printer
from .transport._base import Transport
from .transport._bulk import BulkReadable
from .transport._bulk import BulkReader as BulkReader
from .transport._bulk import MessageRows as MessageRows
from .transport._bulk import RecordSink as RecordSink
from .transport._search_fallback import search as _search
from .transport._search_results import SearchResult

__all__ = [
    "AUDIT_REPAIR_REASON",
    "BOOKKEEPING_TYPES",
    "PAGE_SIZE",
    "READ_CONCURRENCY",
    "TOOL_TYPE",
    "BulkReader",
    "ConversationList",
    "ConversationSummary",
    "IdentityError",
    "MessageRows",
    "RecordSink",
    "Scan",
    "StoreStats",
    "StoredConversation",
    "StoredMessage",
    "StoredTurn",
    "TurnEnding",
    "TurnRole",
    "TurnView",
    "bulk_reader",
    "collect_stats",
    "conversation_entity_id",
    "ending_of",
    "gather_bounded",
    "identify",
    "is_entity_id",
    "list_conversations",
    "message_entity_id",
    "parse_turn_key",
    "printable",
    "printer",
    "read_conversation",
    "read_ending",
    "scan_entities",
    "search",
    "short_class",
    "snapshot_or_none",
    "stored_platform",
    "summarize_payload",
    "tenant_for",
    "turn_ending",
    "turn_key",
    "turn_record_entity_id",
    "validate_conversation_id",
    "validate_entity_id",
    "validate_turn_id",
]

#: A message's role in its turn.
TurnRole = Literal["user", "assistant"]

#: The entity types the turn protocol itself writes (conversations, messages, turn records,
#: tool calls and their bookkeeping); a listing of what an agent *learned* leaves them out.
BOOKKEEPING_TYPES: Final[frozenset[str]] = _BOOKKEEPING_TYPES

#: The entity type of a recorded tool call.
TOOL_TYPE: Final[str] = _TOOL_TYPE

#: The ``reason`` on the turn record of a turn the audit closed as abandoned
#: (``neotoma-agent audit --repair``, :func:`neotoma_agent.qa.apply_repairs`).
AUDIT_REPAIR_REASON: Final[str] = _AUDIT_REPAIR_REASON


def summarize_payload(value: object, max_chars: int = _SUMMARY_CHARS) -> str:
    """``value`` (a tool call's arguments or result) as one line of compact JSON, cut to
    ``max_chars`` characters with ``…[+N chars]`` saying how many were left out.

    The form a call is stored in under ``NeotomaMemory(tool_payloads="summary")``, and the
    one ``neotoma-agent show`` prints a call's arguments in; a text already cut this way is
    kept as it is::

        summarize_payload({"city": "Paris", "days": 3})  # '{"city":"Paris","days":3}'
    """
    return _summarize(value, max_chars)


def _text_arg(name: str, value: object) -> str:
    # The derivations hash what they are given: a wrong type must fail here, by name, not
    # as an id of something else.
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _role_arg(role: object) -> TurnRole:
    if role == "user":
        return "user"
    if role == "assistant":
        return "assistant"
    raise ValueError(f"role must be 'user' or 'assistant', got {role!r}")


# ------------------------------------------------------------------------------------- ids
#
# Derived, not validated: a reader names what another writer stored, including ids this
# library's turns would refuse (validate them first with the validate_* functions when you
# are about to write).


def tenant_for(transport: object) -> str | None:
    """The user a transport's entity ids are derived under (its ``tenant_id``: a user's
    view, :meth:`neotoma_agent.EmbeddedStore.for_user`, or an ``HttpTransport`` with
    tenant-scoped ids), or ``None`` for unscoped ids; pass it as ``tenant`` to the id
    functions below to name what that transport stored."""
    return _tenant_for(transport)


async def identify(transport: object) -> None:
    """Let ``transport`` learn which user its token acts for, before you derive ids with
    :func:`tenant_for`: an ``HttpTransport`` given a token and no ``user_id`` asks its
    server once (``GET /me``; a turn does this by itself), so that on
    a server deriving ids under the user (``neotoma-agent serve --users``) the ids are the
    server's. Any other transport knows already: nothing is asked."""
    await _identify(transport)


def _tenant_arg(tenant: object) -> str | None:
    return None if tenant is None else _text_arg("tenant", tenant)


def conversation_entity_id(conversation_id: str, *, tenant: str | None = None) -> str:
    """The entity id a store gives the ``conversation`` entity of ``conversation_id``.

    Derived with no I/O, by the identity rules a Neotoma server applies, so the id is the
    same on every store. ``tenant``: the user the ids are scoped to (:func:`tenant_for` of
    the transport), ``None`` for unscoped ids. ``TypeError`` when an id is not a ``str``.
    """
    cid = _text_arg("conversation_id", conversation_id)
    return _conversation_entity_id(cid, _tenant_arg(tenant))


def message_entity_id(
    conversation_id: str, turn_id: str, role: TurnRole, *, tenant: str | None = None
) -> str:
    """The entity id a store gives the ``role`` message (``"user"`` or ``"assistant"``)
    of turn ``turn_id`` in ``conversation_id``, derived from its :func:`turn_key`
    (``tenant`` as for :func:`conversation_entity_id`).

    ``TypeError`` for an id that is not a ``str``, ``ValueError`` for another role.
    """
    cid = _text_arg("conversation_id", conversation_id)
    tid = _text_arg("turn_id", turn_id)
    return _message_entity_id(cid, tid, _role_arg(role), _tenant_arg(tenant))


def turn_record_entity_id(conversation_id: str, turn_id: str, *, tenant: str | None = None) -> str:
    """The entity id a store gives the ``conversation_turn`` record of a turn (the entity
    that says whether the turn is open, completed or abandoned: :func:`read_ending`;
    ``tenant`` as for :func:`conversation_entity_id`).

    ``TypeError`` for an id that is not a ``str``.
    """
    cid = _text_arg("conversation_id", conversation_id)
    tid = _text_arg("turn_id", turn_id)
    return _turn_record_entity_id(cid, tid, _tenant_arg(tenant))


def turn_key(conversation_id: str, turn_id: str, role: TurnRole) -> str:
    """The ``turn_key`` field of a turn's ``role`` message: ``{conversation_id}:{turn_id}``
    for the user message, ``{conversation_id}:{turn_id}:assistant`` for the reply.

    :func:`parse_turn_key` is its inverse. ``TypeError`` for an id that is not a ``str``,
    ``ValueError`` for another role.
    """
    keys = TurnKeys(_text_arg("conversation_id", conversation_id), _text_arg("turn_id", turn_id))
    return keys.assistant_turn_key if _role_arg(role) == "assistant" else keys.user_turn_key


def parse_turn_key(
    turn_key: str, conversation_id: str | None = None
) -> tuple[str, str, TurnRole] | None:
    """``(conversation_id, turn_id, role)`` of a message's ``turn_key``; ``None`` when the
    key has another shape.

    Pass the ``conversation_id`` when you know it: a key that starts with it is split right
    after it, so turn ids another writer chose with ``:`` in them read back whole.
    """
    key = _text_arg("turn_key", turn_key)
    if conversation_id is not None:
        _text_arg("conversation_id", conversation_id)
    return _parse_turn_key(key, conversation_id)


def is_entity_id(value: object) -> bool:
    """Whether ``value`` is a Neotoma entity id (``ent_`` and 24 lowercase hex digits)."""
    return isinstance(value, str) and ENTITY_ID_RE.fullmatch(value) is not None


def validate_conversation_id(conversation_id: object) -> str:
    """``conversation_id`` when a turn can be stored under it, else ``TypeError`` (not a
    ``str``) or ``ValueError`` (empty, padded with whitespace, control characters, a lone
    surrogate)."""
    return _validate_conversation_id(conversation_id)


def validate_turn_id(turn_id: object) -> str:
    """``turn_id`` when a turn can be stored under it, else ``TypeError`` or ``ValueError``.

    Besides the checks of :func:`validate_conversation_id`, a turn id holds no ``:`` or
    ``|`` (its keys are joined with them) and is not ``assistant`` (the reply's suffix).
    """
    return _validate_turn_id(turn_id)


def validate_entity_id(entity_id: object) -> str:
    """``entity_id`` when it is a Neotoma entity id (:func:`is_entity_id`), else
    ``ValueError``."""
    return _validate_entity_id(entity_id)


# ---------------------------------------------------------------------------- bulk reads


def bulk_reader(transport: Transport) -> BulkReader | None:
    """A :class:`BulkReader` for one pass over the store's whole entity types, or ``None``
    when ``transport`` cannot read in bulk (then page with :func:`scan_entities`).

    The embedded store answers from its own tables; its answers are those the Transport
    reads give, sooner. Use one reader for one pass.
    """
    if not isinstance(transport, BulkReadable):
        return None
    return transport._bulk_reader()


# ----------------------------------------------------------------------------------- counts
#
# From snapshots alone (no observation read per turn: a count needs no detail); a server
# that caps how deep offsets go gets counts of what it gave, marked partial.


@attrs.define
class StoreStats:
    """Entity counts by type, turn counts by status and tool calls by tool and status."""

    #: every entity the store holds (what the server said match, when it said)
    entities: int = 0
    #: entities by ``entity_type``
    by_type: Counter[str] = attrs.field(factory=Counter)
    #: turn records by ``status`` (``completed``, ``abandoned``, ``open``, ``unknown``)
    turn_status: Counter[str] = attrs.field(factory=Counter)
    #: abandoned turns a repair closed (``audit --repair``)
    repaired: int = 0
    #: tool calls by (tool name, result status)
    tool_calls: Counter[tuple[str, str]] = attrs.field(factory=Counter)
    #: the server stopped paging before every entity was seen (counts are a lower bound)
    partial: bool = False

    @property
    def conversations(self) -> int:
        """Conversation entities."""
        return self.by_type["conversation"]

    @property
    def turns(self) -> int:
        """Turn records (one per turn the protocol stored)."""
        return self.by_type["conversation_turn"]

    def calls_by_tool(self) -> dict[str, dict[str, int]]:
        """``{tool: {status: count}}``, sorted by name."""
        by_tool: dict[str, dict[str, int]] = {}
        for (name, status), count in sorted(self.tool_calls.items()):
            by_tool.setdefault(name, {})[status] = count
        return by_tool

    def to_json(self) -> dict[str, Any]:
        """The counts as plain JSON (what ``neotoma-agent stats --json`` prints)."""
        return {
            "entities": self.entities,
            "entities_by_type": dict(sorted(self.by_type.items())),
            "conversations": self.conversations,
            "turns": self.turns,
            "turns_by_status": dict(sorted(self.turn_status.items())),
            "abandoned_turns": self.turn_status["abandoned"],
            "repaired_turns": self.repaired,
            "open_turns": self.turn_status["open"],
            "tool_calls": sum(self.tool_calls.values()),
            "tool_calls_by_tool": self.calls_by_tool(),
            "partial": self.partial,
        }


async def collect_stats(transport: Transport) -> StoreStats:
    """Read every entity of the store once and count them (:class:`StoreStats`)."""
    scan = await scan_entities(transport)
    stats = StoreStats(entities=max(scan.total, len(scan.entities)), partial=scan.partial)
    for entity in scan.entities:
        fields = entity.snapshot
        stats.by_type[entity.entity_type] += 1
        if entity.entity_type == "conversation_turn":
            status = fields.get("status")
            stats.turn_status[str(status) if status else "unknown"] += 1
            stats.repaired += ending_of(fields).repaired
        elif entity.entity_type == TOOL_TYPE:
            name, status = fields.get("tool_name"), fields.get("result_status")
            stats.tool_calls[(str(name or ""), str(status or "unknown"))] += 1
    return stats


# ---------------------------------------------------------------------------- listings


@attrs.frozen
class ConversationSummary:
    """One conversation of a store, as :func:`list_conversations` lists it."""

    #: the ``conversation_id`` it was stored under (its entity id when the snapshot has none)
    conversation_id: str
    entity_id: str
    title: str | None
    #: when the conversation entity last got an observation (ISO 8601), if known
    last_activity: str | None


@attrs.frozen
class ConversationList:
    """The conversations of a store, and whether the server let every one be read."""

    conversations: tuple[ConversationSummary, ...]
    #: the read they came from (how many the server holds; the offset it refused, if any)
    scan: Scan = attrs.field(repr=False)

    @property
    def total(self) -> int:
        """How many conversations the server says it holds."""
        return max(self.scan.total, len(self.conversations))

    @property
    def partial(self) -> bool:
        """True when some conversations could not be read (the list is the ones that were)."""
        return self.scan.partial

    def note(self) -> str:
        """Why the list is partial, in one sentence for people (empty when it is not)."""
        if self.scan.refused_offset is None:
            return ""
        return (
            f"(partial: the server caps offsets below {self.scan.refused_offset:,}; "
            f"{len(self.conversations):,} of {self.total:,} conversations listed)"
        )


async def list_conversations(transport: Transport) -> ConversationList:
    """Every conversation of the store, most recently active first (partial past a server's
    offset cap: :attr:`ConversationList.partial`)."""
    scan = await scan_entities(transport, entity_type="conversation")
    found: list[ConversationSummary] = []
    for e in scan.entities:
        cid = e.snapshot.get("conversation_id") or e.snapshot.get("session_id")
        title = e.snapshot.get("title")
        found.append(
            ConversationSummary(
                conversation_id=str(cid) if cid is not None else e.entity_id,
                entity_id=e.entity_id,
                title=title if isinstance(title, str) else None,
                last_activity=e.last_observation_at,
            )
        )
    found.sort(key=lambda c: (c.last_activity or "", c.conversation_id), reverse=True)
    return ConversationList(tuple(found), scan)


async def search(
    transport: Transport, query: str, *, limit: int = 10, conversation_id: str | None = None
) -> SearchResult:
    """Search what was said in ``transport``'s store, outside any turn: every stored message
    and the text fields of the entities, best first, at most ``limit`` (1-100) hits.

    The same search as :meth:`NeotomaMemory.search <neotoma_agent.NeotomaMemory.search>`
    (plain words, ``"..."`` for a phrase; ``conversation_id`` for one conversation's
    messages only), for a tool that holds a transport and no memory::

        result = await search(store, '"rotate the certificates"', limit=5)
        for hit in result.hits:
            print(hit.conversation_id, hit.turn_id, hit.role, hit.text)

    An empty or blank query raises :class:`~neotoma_agent.EmptySearchQueryError` and a
    ``limit`` out of range ``ValueError``, before any I/O. A store without a search of its
    own (a real Neotoma server) is searched through its generic reads
    (``SearchResult.partial`` says when those could not look at everything).
    """
    return await _search(transport, query, limit=limit, conversation_id=conversation_id)


async def turn_ending(transport: Transport, turn: StoredTurn) -> TurnEnding | None:
    """How a turn of :func:`read_conversation` ended (:func:`read_ending` on its record);
    ``None`` when the turn has no record (messages another client wrote)."""
    return None if turn.record is None else await read_ending(transport, turn.record)


@attrs.frozen
class TurnView:
    """One turn: its messages (user first) and how it ended.

    ``status`` is the turn record's: ``completed``, ``abandoned`` or ``open`` (in flight,
    or orphaned by a crash), or ``unknown`` when no turn record exists (messages written by
    another client). ``repaired`` marks a turn ``audit --repair`` closed as abandoned.
    """

    #: the stored ``turn_number`` (as ``memory.history()`` reports it) where the turn has
    #: one, else the turn's position in the conversation (1-based)
    number: int
    turn_id: str
    status: str
    messages: tuple[StoredMessage, ...]
    error_class: str | None = None
    repaired: bool = False
    turn_record_id: str | None = None
    #: the tool calls the turn made, with their arguments and results as stored
    tools: tuple[StoredToolCall, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``neotoma-agent show --json`` prints (and the web view serves)."""
        return {
            "turn": self.number,
            "turn_id": self.turn_id,
            "status": self.status,
            "abandoned": self.status == "abandoned",
            "repaired": self.repaired,
            "error_class": self.error_class,
            "turn_record_id": self.turn_record_id,
            "messages": [_message_json(m) for m in self.messages],
            "tools": [c.to_json() for c in self.tools],
        }

    @classmethod
    def of(cls, turn: StoredTurn, ending: TurnEnding | None, *, position: int) -> TurnView:
        """The view of a stored turn and its ending (:func:`turn_ending`); ``position`` is
        its place in the conversation (1-based), the number a turn without a stored
        ``turn_number`` shows."""
        stored = turn.turn_number
        return cls(
            number=stored if stored is not None else position,
            turn_id=turn.turn_id,
            status=turn.status,
            messages=turn.messages,
            error_class=ending.error_class
            if ending is not None and turn.status == "abandoned"
            else None,
            repaired=ending is not None and ending.repaired,
            turn_record_id=turn.record.entity_id if turn.record is not None else None,
            tools=turn.tools,
        )


def _message_json(message: StoredMessage) -> dict[str, Any]:
    """A message as ``show --json`` prints it."""
    return {
        "role": message.role,
        "entity_id": message.entity_id,
        "turn_key": message.turn_key,
        "content": message.content,
        "refers_to": [
            {"entity_id": r.entity_id, "entity_type": r.entity_type, "name": r.name}
            for r in message.refers_to
        ],
    }


for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) or inspect.isfunction(_value):
        # Reprs and help() name the namespace users import from, not the private module.
        _value.__module__ = __name__
del _name, _value
