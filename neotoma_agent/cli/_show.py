"""``neotoma-agent show``: a conversation's transcript, read back from the store.

Everything is read through the Transport (so it works on a store file and on a Neotoma
server alike): the conversation entity (its id is derived from the conversation id, as the
server derives it), the messages PART_OF it, each message's snapshot (the exact content) and
REFERS_TO edges, the entities at the end of those edges, and each turn's
``conversation_turn`` record, whose ``status`` says whether the turn completed, was
abandoned, is still open (in flight, or an orphan a crash left), or was closed by
``audit --repair``.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from typing import Any, TextIO

import attrs

from .._keys import conversation_entity_id, parse_turn_key, turn_record_entity_id
from .._payloads import stored_platform
from .._reads import gather_bounded, scan_entities, snapshot_or_none
from .._terminal import printer
from .._turn_record import AUDIT_REPAIR_REASON, read_ending
from ..transport._base import EntitySnapshot, Transport
from ._common import (
    CLIError,
    add_command,
    display_name,
    open_transport,
    print_json,
    store_label,
)

__all__ = [
    "ConversationList",
    "ConversationSummary",
    "MessageView",
    "Reference",
    "Transcript",
    "TurnView",
    "list_conversations",
    "load_transcript",
    "register",
    "render_transcript",
]

#: the reason ``audit --repair`` records on the turn record of an orphan it closed
REPAIR_REASON = AUDIT_REPAIR_REASON


@attrs.frozen
class Reference:
    """An entity a message REFERS_TO."""

    entity_id: str
    entity_type: str
    name: str

    def label(self) -> str:
        """``Acme Corp (company)``."""
        return f"{self.name} ({self.entity_type})" if self.entity_type else self.name

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``show --json`` prints."""
        return {"entity_id": self.entity_id, "entity_type": self.entity_type, "name": self.name}


@attrs.frozen
class MessageView:
    """One stored message: its role and exact content, and what it refers to."""

    role: str
    entity_id: str
    content: str
    turn_key: str
    refers_to: tuple[Reference, ...]
    turn_number: int | None = None
    created_at: str = ""
    observation_count: int = 1

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``show --json`` prints."""
        return {
            "role": self.role,
            "entity_id": self.entity_id,
            "turn_key": self.turn_key,
            "content": self.content,
            "refers_to": [r.to_json() for r in self.refers_to],
            "observations": self.observation_count,
        }


@attrs.frozen
class TurnView:
    """One turn: its messages (user first) and how it ended.

    ``status`` is the turn record's: ``completed``, ``abandoned`` or ``open`` (in flight,
    or orphaned by a crash), or ``unknown`` when no turn record exists (messages written by
    another client). ``repaired`` marks a turn ``audit --repair`` closed as abandoned.
    """

    number: int
    turn_id: str
    status: str
    messages: tuple[MessageView, ...]
    error_class: str | None = None
    repaired: bool = False
    turn_record_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``show --json`` prints."""
        return {
            "turn": self.number,
            "turn_id": self.turn_id,
            "status": self.status,
            "abandoned": self.status == "abandoned",
            "repaired": self.repaired,
            "error_class": self.error_class,
            "turn_record_id": self.turn_record_id,
            "messages": [m.to_json() for m in self.messages],
        }


@attrs.frozen
class Transcript:
    """A conversation as the store holds it, turns in order."""

    conversation_id: str
    conversation_entity_id: str
    title: str | None
    platform: str | None
    turns: tuple[TurnView, ...]

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``show --json`` prints."""
        return {
            "conversation_id": self.conversation_id,
            "conversation_entity_id": self.conversation_entity_id,
            "title": self.title,
            "platform": self.platform,
            "turns": [t.to_json() for t in self.turns],
        }


@attrs.frozen
class ConversationSummary:
    """One line of ``show`` without a conversation id."""

    conversation_id: str
    entity_id: str
    title: str | None
    last_activity: str | None


def _split_turn_key(conversation_id: str, turn_key: str) -> tuple[str, bool]:
    """``(turn_id, is_assistant_key)`` of a message's turn key, grouped by turn."""
    parsed = parse_turn_key(turn_key, conversation_id)
    if parsed is None:
        return turn_key, False  # another writer's key: the whole key names its turn
    cid, tid, role = parsed
    # A key of another conversation keeps its conversation part, so it groups apart.
    return (tid if cid == conversation_id else f"{cid}:{tid}"), role == "assistant"


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def load_transcript(transport: Transport, conversation_id: str) -> Transcript:
    """Read one conversation back from the store; :class:`CLIError` if there is none."""
    conv_id = conversation_entity_id(conversation_id)
    conversation = await snapshot_or_none(transport, conv_id)
    if conversation is None:
        raise CLIError(
            f"no conversation {conversation_id!r} in this store",
            "`neotoma-agent show` without an id lists the conversations",
        )
    parts = await transport.retrieve_related_entities(
        conv_id, relationship_types=["PART_OF"], direction="inbound"
    )
    created: dict[str, str] = {}
    for entity in parts.entities:
        value = entity.raw.get("created_at")
        if isinstance(value, str):
            created[entity.id] = value
    message_ids = sorted(
        {
            r.source_entity_id
            for r in parts.relationships
            if r.relationship_type == "PART_OF" and r.target_entity_id == conv_id
        }
    )

    async def message(entity_id: str) -> tuple[EntitySnapshot | None, list[str]]:
        snapshot = await snapshot_or_none(transport, entity_id)
        edges = await transport.retrieve_related_entities(
            entity_id, relationship_types=["REFERS_TO"], direction="outbound"
        )
        targets = [
            r.target_entity_id
            for r in edges.relationships
            if r.relationship_type == "REFERS_TO" and r.source_entity_id == entity_id
        ]
        return snapshot, list(dict.fromkeys(targets))

    loaded = await gather_bounded([functools.partial(message, i) for i in message_ids])

    referenced = sorted({t for _, targets in loaded for t in targets})
    ref_snaps = await gather_bounded(
        [functools.partial(snapshot_or_none, transport, i) for i in referenced]
    )
    references: dict[str, Reference] = {}
    for entity_id, snap in zip(referenced, ref_snaps, strict=True):
        if snap is None:
            references[entity_id] = Reference(entity_id, "", entity_id)
        else:
            name = display_name(snap.snapshot, snap.canonical_name, entity_id)
            references[entity_id] = Reference(entity_id, snap.entity_type, name)

    by_turn: dict[str, list[MessageView]] = {}
    for entity_id, (snap, targets) in zip(message_ids, loaded, strict=True):
        if snap is None or snap.entity_type != "conversation_message":
            continue
        fields = snap.snapshot
        turn_key = str(fields.get("turn_key", ""))
        turn_id, assistant_key = _split_turn_key(conversation_id, turn_key)
        role = str(fields.get("role") or ("assistant" if assistant_key else "user"))
        content = fields.get("content")
        view = MessageView(
            role=role,
            entity_id=entity_id,
            content=content if isinstance(content, str) else "",
            turn_key=turn_key,
            refers_to=tuple(references[t] for t in targets),
            turn_number=_opt_int(fields.get("turn_number")),
            created_at=created.get(entity_id) or snap.last_observation_at or "",
            observation_count=snap.observation_count or 1,
        )
        by_turn.setdefault(turn_id or turn_key, []).append(view)

    turn_ids = list(by_turn)
    record_ids = [turn_record_entity_id(conversation_id, t) for t in turn_ids]
    records = await gather_bounded(
        [functools.partial(snapshot_or_none, transport, i) for i in record_ids]
    )
    turns: list[tuple[tuple[Any, ...], TurnView]] = []
    numbered = all(any(m.turn_number is not None for m in by_turn[t]) for t in turn_ids)
    for turn_id, record in zip(turn_ids, records, strict=True):
        msgs = sorted(by_turn[turn_id], key=lambda m: (m.role != "user", m.created_at))
        status, error_class, repaired, record_id = "unknown", None, False, None
        if record is not None and record.entity_type == "conversation_turn":
            ending = await read_ending(transport, record)
            status, error_class, repaired = ending.status, ending.error_class, ending.repaired
            record_id = record.entity_id
        number = min((m.turn_number for m in msgs if m.turn_number is not None), default=None)
        first = min(m.created_at for m in msgs)
        key: tuple[Any, ...] = (
            (number if number is not None else math.inf, first, turn_id)
            if numbered
            else (first, number if number is not None else math.inf, turn_id)
        )
        turns.append(
            (key, TurnView(0, turn_id, status, tuple(msgs), error_class, repaired, record_id))
        )
    turns.sort(key=lambda item: item[0])
    fields = conversation.snapshot
    title = fields.get("title")
    return Transcript(
        conversation_id=conversation_id,
        conversation_entity_id=conv_id,
        title=title if isinstance(title, str) else None,
        platform=stored_platform(fields),
        turns=tuple(attrs.evolve(view, number=n) for n, (_, view) in enumerate(turns, 1)),
    )


@attrs.frozen
class ConversationList:
    """The conversations ``show`` lists, and whether the server let it read them all."""

    conversations: tuple[ConversationSummary, ...]
    #: how many conversations the server says it holds
    total: int
    #: the first query offset the server refused (it caps offsets); ``None``: all were read
    refused_offset: int | None = None

    @property
    def partial(self) -> bool:
        """True when some conversations could not be read (the list is the ones that were)."""
        return self.refused_offset is not None

    def note(self) -> str:
        """Why the list is partial, for humans (empty when it is not)."""
        if self.refused_offset is None:
            return ""
        return (
            f"(partial: the server caps offsets below {self.refused_offset:,}; "
            f"{len(self.conversations):,} of {self.total:,} conversations listed)"
        )


async def list_conversations(transport: Transport) -> ConversationList:
    """Every conversation in the store, most recently active first (partial past a cap)."""
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
    return ConversationList(tuple(found), max(scan.total, len(found)), scan.refused_offset)


def _status_text(turn: TurnView) -> str:
    if turn.repaired:
        return "ABANDONED (repaired by audit: the reply was never stored)"
    if turn.status == "abandoned":
        # The short class name here; `show --json` has the qualified one.
        short = turn.error_class.rsplit(".", 1)[-1] if turn.error_class else None
        return f"ABANDONED ({short})" if short else "ABANDONED"
    if turn.status == "open":
        return "OPEN (in flight, or left open by a crash: see `neotoma-agent audit`)"
    if turn.status == "unknown":
        return "no turn record"
    return turn.status


def _indented(text: str, indent: str) -> str:
    # Continuation lines are indented for reading; `show --json` gives the exact bytes.
    return text.replace("\n", "\n" + indent)


def render_transcript(transcript: Transcript, out: TextIO, *, where: str | None = None) -> None:
    """The human-readable transcript."""
    write = printer(out)  # stored text: never raw control sequences
    head = f"conversation {transcript.conversation_id}"
    if transcript.title:
        head += f" ({transcript.title})"
    count = len(transcript.turns)
    head += f": {count} turn{'s' if count != 1 else ''}"
    if where:
        head += f", in {where}"
    write(head + "\n")
    for turn in transcript.turns:
        write(f"\nturn {turn.number} [{turn.turn_id}] {_status_text(turn)}\n")
        roles = {m.role for m in turn.messages}
        for msg in turn.messages:
            partial = msg.role == "assistant" and turn.status == "abandoned"
            label = f"  {msg.role}{' (partial reply)' if partial else ''}: "
            write(label + _indented(msg.content, " " * len(label)) + "\n")
            if msg.refers_to:
                names = ", ".join(r.label() for r in msg.refers_to)
                write(f"{' ' * len(label)}refers to: {names}\n")
        if "assistant" not in roles and turn.status in ("abandoned", "open"):
            write("  assistant: (no reply stored)\n")


def _render_list(listing: ConversationList, out: TextIO, where: str) -> None:
    write = printer(out)  # stored text: never raw control sequences
    conversations = listing.conversations
    if not conversations:
        write(f"no conversations in {where}\n")
        if listing.partial:
            write(listing.note() + "\n")
        return
    write(f"{len(conversations)} conversation(s) in {where}, most recent first:\n")
    width = max(len(c.conversation_id) for c in conversations)
    for c in conversations:
        when = (c.last_activity or "")[:19].replace("T", " ")
        title = f"  {c.title}" if c.title else ""
        write(f"  {c.conversation_id:<{width}}  {when}{title}\n")
    if listing.partial:
        write(listing.note() + "\n")


def register(subparsers: Any) -> None:
    """Add the ``show`` subcommand."""
    parser = add_command(
        subparsers,
        "show",
        run=run,
        help="print a conversation's transcript, read back from the store",
        description="Print a conversation as the store holds it: each turn with its status, "
        "each message's role and exact content, and the entities it REFERS_TO. Abandoned "
        "turns (and turns `audit --repair` closed) are marked. Without CONVERSATION, list "
        "the conversations.",
    )
    parser.add_argument("conversation", nargs="?", metavar="CONVERSATION", help="conversation id")
    parser.add_argument("--json", action="store_true", help="print JSON (exact content)")


async def run(args: argparse.Namespace) -> int:
    """Print one transcript, or the list of conversations."""
    out = sys.stdout
    async with open_transport(args, must_exist=True, read_only=True) as transport:
        if args.conversation is None:
            listing = await list_conversations(transport)
            if args.json:
                if listing.partial:
                    # stdout stays the JSON list it always is; the warning goes beside it.
                    print(f"neotoma-agent: {listing.note()}", file=sys.stderr)
                print_json(
                    [
                        {
                            "conversation_id": c.conversation_id,
                            "entity_id": c.entity_id,
                            "title": c.title,
                            "last_activity": c.last_activity,
                        }
                        for c in listing.conversations
                    ]
                )
            else:
                _render_list(listing, out, store_label(args))
            return 0
        transcript = await load_transcript(transport, args.conversation)
    if args.json:
        print_json(transcript.to_json())
    else:
        render_transcript(transcript, out)
    return 0
