"""``neotoma-agent export [CONVERSATION...]``: a backup of the store, as JSON lines.

By default a backup (:mod:`._backup`): every live entity with every
observation, every edge, which ``import`` restores whole: abandoned and open turns, tool
calls with their arguments and results, the entities memories remembered, conversation
titles and platforms. Export, import into an empty store and export again give identical
bytes; ``show --json`` and ``stats --json`` read the same from both stores. With
conversation ids, the backup holds those conversations and the entities their turns refer
to.

``--turns`` writes the chat-log form instead: each finished turn one line with exactly the
keys :mod:`._import` reads, always all of them and in one order::

    {"conversation_id":"support-42","turn_id":"m-1001","turn_number":1,
     "user":"Where is my Acme Corp order?","assistant":"It shipped on Monday.",
     "refers_to":["ent_af939bedafbd1838b259772a"]}

Conversations come in id order (not activity order, which an import changes), turns in the
order ``show`` prints them. ``turn_number`` is the stored one, or the turn's position in its
conversation when it has none (an import then stores that number). ``refers_to`` lists the
entity ids the reply REFERS_TO, as stored: a fresh store that lacks those entities still
records the edges (Neotoma does not check an edge's ends), so the ids survive a round trip,
but the entities themselves are not in that form. What it cannot carry is left out and
counted on stderr, never silently dropped: abandoned and open turns (a line is a finished
turn), and tool calls. ``--json`` prints one line per conversation, ``show --json``'s record
(statuses, entity ids, the turn records and the tool calls with their arguments and
results), for reading, not for ``import``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from typing import TextIO

import attrs

from .. import Transport
from ..reads import StoredTurn, list_conversations, read_conversation
from ._common import USER_OPTION, CLIError, Command, open_transport, option, plural
from ._show import load_transcript

__all__ = ["ExportStats", "export_lines", "register"]


@attrs.define
class ExportStats:
    """What an export wrote and what the import format could not carry."""

    conversations: int = 0
    turns: int = 0
    abandoned: int = 0
    open: int = 0
    tool_calls: int = 0

    def note(self) -> str:
        """The stderr line: what was written and what was left out (and where it is)."""
        text = (
            f"exported {plural(self.turns, 'turn')} of {plural(self.conversations, 'conversation')}"
        )
        left = [
            plural(n, noun)
            for n, noun in (
                (self.abandoned, "abandoned turn"),
                (self.open, "open turn"),
                (self.tool_calls, "tool call"),
            )
            if n
        ]
        if left:
            text += (
                f"; left out (the import format cannot carry them): {', '.join(left)}; "
                "`export --json` has them"
            )
        return text


def _line(conversation_id: str, position: int, turn: StoredTurn) -> str:
    history = turn.to_history()
    number = history.turn_number if history.turn_number is not None else position
    obj = {
        "conversation_id": conversation_id,
        "turn_id": history.turn_id,
        "turn_number": number,
        "user": history.user,
        "assistant": history.reply or "",
        "refers_to": list(history.reply_refers_to),
    }
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def export_lines(
    conversation_id: str, turns: Sequence[StoredTurn], stats: ExportStats
) -> Iterator[str]:
    """The import lines of one conversation's finished turns; counts what is left out."""
    stats.conversations += 1
    for position, turn in enumerate(turns, 1):
        stats.tool_calls += len(turn.tools)
        status = turn.to_history().status
        if status == "abandoned":
            stats.abandoned += 1
            continue
        if status == "open":
            stats.open += 1
            continue
        stats.turns += 1
        yield _line(conversation_id, position, turn)


async def _conversation_ids(transport: Transport, wanted: Sequence[str]) -> list[str]:
    if wanted:
        return list(dict.fromkeys(wanted))
    listing = await list_conversations(transport)
    if listing.partial:
        raise CLIError(
            f"cannot list every conversation: {listing.note()}",
            "name the conversations to export",
        )
    return sorted(c.conversation_id for c in listing.conversations)


async def _backup(args: argparse.Namespace, out: TextIO) -> str:
    """Write the backup; the stderr line saying what it holds."""
    from ._backup import BackupError, BackupStats, read_backup

    stats = BackupStats()
    async with open_transport(args, must_exist=True, read_only=True) as transport:
        cids = await _conversation_ids(transport, args.conversations)
        lines = read_backup(transport, cids, everything=not args.conversations, stats=stats)
        try:
            async for line in lines:
                out.write(line + "\n")
        except BackupError as exc:
            raise CLIError(f"cannot export: {exc}", "name the conversations to export") from None
    return f"exported a backup of {stats.note()}"


async def _export(args: argparse.Namespace, out: TextIO) -> ExportStats:
    stats = ExportStats()
    async with open_transport(args, must_exist=True, read_only=True) as transport:
        for cid in await _conversation_ids(transport, args.conversations):
            if args.json:
                transcript = await load_transcript(transport, cid)
                stats.conversations += 1
                stats.turns += len(transcript.turns)
                out.write(json.dumps(transcript.to_json(), ensure_ascii=False) + "\n")
                continue
            stored = await read_conversation(transport, cid)
            if stored.snapshot is None:
                raise CLIError(
                    f"no conversation {cid!r} in this store",
                    "`neotoma-agent show` lists the conversations",
                )
            for line in export_lines(cid, stored.turns, stats):
                out.write(line + "\n")
    return stats


async def run(args: argparse.Namespace) -> int:
    """Write the backup (or the turns) to stdout, then say on stderr what was written."""
    if not args.turns and not args.json:
        note = await _backup(args, sys.stdout)
        sys.stdout.flush()
        print(f"neotoma-agent: {note}", file=sys.stderr)
        return 0
    stats = await _export(args, sys.stdout)
    sys.stdout.flush()
    if not args.json or stats.conversations:
        print(f"neotoma-agent: {stats.note()}", file=sys.stderr)
    return 0


COMMAND = Command(
    "export",
    help="back up the store (or conversations) as JSON lines that `import` restores",
    description="""
        Write a backup of the store to stdout (default: all of it; with conversation ids,
        those conversations and the entities their turns refer to): every entity with its
        observations and every relationship, as JSON lines that `import` restores whole
        (abandoned and open turns, tool calls, remembered entities, titles and platforms
        included). Export, import into an empty store and export again give the same
        bytes. --turns writes the chat-log form instead: one line per finished turn with
        the keys a transcript import reads (abandoned and open turns and tool calls are
        left out and counted on stderr). --json writes one line per conversation with
        everything, as `show --json` (for reading, not for import).
    """,
    run=run,
    options=(
        USER_OPTION,
        option("conversations", nargs="*", metavar="CONVERSATION", help="conversation ids"),
        option(
            "--turns",
            action="store_true",
            help="the chat-log form: one line per finished turn (a transcript)",
        ),
        option(
            "--json",
            action="store_true",
            help="one full record per conversation (not for import)",
        ),
    ),
)
register = COMMAND.register
