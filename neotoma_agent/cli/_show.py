"""``neotoma-agent show``: a conversation's transcript, read back from the store.

Read through the library's history reader (:func:`neotoma_agent.reads.read_conversation`,
the same code as ``t.history``), so it works on a store file and on a Neotoma server
alike: the messages of the conversation with the entities they REFER_TO, grouped by turn
and in the turn's order, and each turn's ``conversation_turn`` record, whose ``status``
says whether the turn completed, was abandoned, is still open (in flight, or an orphan a
crash left), or was closed by ``audit --repair``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any, TextIO

import attrs

from .. import RelatedEntity, StoredToolCall, Transport
from ..reads import (
    ConversationList,
    TurnView,
    gather_bounded,
    list_conversations,
    printer,
    read_conversation,
    short_class,
    stored_platform,
    summarize_payload,
    turn_ending,
)
from ._common import (
    USER_OPTION,
    CLIError,
    Command,
    open_transport,
    option,
    print_json,
    store_label,
)

__all__ = [
    "Transcript",
    "load_transcript",
    "register",
    "render_transcript",
]


@attrs.frozen
class Transcript:
    """A conversation as the store holds it, turns in order."""

    conversation_id: str
    conversation_entity_id: str
    title: str | None
    platform: str | None
    turns: tuple[TurnView, ...]

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``show --json`` prints: the fields, in order, by name."""
        return {**attrs.asdict(self, recurse=False), "turns": [t.to_json() for t in self.turns]}


def _label(entity: RelatedEntity) -> str:
    """``Acme Corp (company)``."""
    return f"{entity.name} ({entity.entity_type})" if entity.entity_type else entity.name


async def load_transcript(transport: Transport, conversation_id: str) -> Transcript:
    """Read one conversation back from the store; :class:`CLIError` if there is none.

    The library's reader (:func:`neotoma_agent.reads.read_conversation`, which
    ``t.history`` uses too) does the reading; this only shapes it for printing.
    """
    stored = await read_conversation(transport, conversation_id, tool_details=True)
    if stored.snapshot is None:
        raise CLIError(
            f"no conversation {conversation_id!r} in this store",
            "`neotoma-agent show` without an id lists the conversations",
        )
    fields = stored.snapshot.snapshot
    title = fields.get("title")
    endings = await gather_bounded(
        [functools.partial(turn_ending, transport, t) for t in stored.turns]
    )
    return Transcript(
        conversation_id=conversation_id,
        conversation_entity_id=stored.conversation_entity_id,
        title=title if isinstance(title, str) else None,
        platform=stored_platform(fields),
        turns=tuple(
            TurnView.of(t, e, position=n)
            for n, (t, e) in enumerate(zip(stored.turns, endings, strict=True), 1)
        ),
    )


def _status_text(turn: TurnView) -> str:
    if turn.repaired:
        return "ABANDONED (repaired by audit: the reply was never stored)"
    if turn.status == "abandoned":
        # The short class name here; `show --json` has the qualified one.
        short = short_class(turn.error_class)
        return f"ABANDONED ({short})" if short else "ABANDONED"
    if turn.status == "open":
        return "OPEN (in flight, or left open by a crash: see `neotoma-agent audit`)"
    if turn.status == "unknown":
        return "no turn record"
    return turn.status


def _tool_line(call: StoredToolCall) -> str:
    """``tool search_flights: ok, 12.3 ms, args {"to":"LIS"}`` (one line, JSON-escaped)."""
    parts = [call.status]
    if call.duration_ms is not None:
        parts.append(f"{call.duration_ms:g} ms")
    if call.error_class:
        parts.append(short_class(call.error_class) or "")
    if call.args is not None:
        parts.append(f"args {summarize_payload(call.args)}")
    return f"tool {call.name}: {', '.join(parts)}"


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
                names = ", ".join(_label(r) for r in msg.refers_to)
                write(f"{' ' * len(label)}refers to: {names}\n")
        if "assistant" not in roles and turn.status in ("abandoned", "open"):
            write("  assistant: (no reply stored)\n")
        for call in turn.tools:
            write(f"  {_tool_line(call)}\n")


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
                print_json([attrs.asdict(c) for c in listing.conversations])
            else:
                _render_list(listing, out, store_label(args))
            return 0
        transcript = await load_transcript(transport, args.conversation)
    if args.json:
        print_json(transcript.to_json())
    else:
        render_transcript(transcript, out)
    return 0


COMMAND = Command(
    "show",
    help="print a conversation's transcript, read back from the store",
    description="""
        Print a conversation as the store holds it: each turn with its status, each
        message's role and exact content, and the entities it REFERS_TO. Abandoned turns
        (and turns `audit --repair` closed) are marked. Without CONVERSATION, list the
        conversations.
    """,
    run=run,
    options=(
        USER_OPTION,
        option("conversation", nargs="?", metavar="CONVERSATION", help="conversation id"),
        option("--json", action="store_true", help="print JSON (exact content)"),
    ),
)
register = COMMAND.register
