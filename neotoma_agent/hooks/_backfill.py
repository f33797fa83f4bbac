"""Backfill: a harness's session files stored as the turns its hooks would have stored.

``neotoma-agent import --from claude-code|codex PATH`` reads Claude Code's per-session JSON
lines (``~/.claude/projects/<project>/<session>.jsonl``, :mod:`._claude_transcript`) or
Codex's rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``,
:mod:`._codex_rollout`); PATH is one file or a folder (every ``*.jsonl`` under it).

Each turn is stored as the hooks store it: the same conversation and turn ids (Claude
Code ``session_id`` + ``prompt_id``, Codex ``session_id`` + ``turn_id``), written with
``open_turn`` then ``close_turn`` (a reply) or ``abandon_turn`` (interrupted, or the model
API failed: with the partial reply the file holds), the tool uses as tool calls of the
tool-call API. A turn the store already holds as completed or abandoned (captured by the
hooks, or imported before) is left alone, so importing a session the hooks captured
writes nothing new; one the hooks opened but never closed is closed from the file; one
stored abandoned without the partial reply the file holds (a hook that could not read the
file) gets it, as one more observation of the same turn (its closing store again, same
keys: never a second turn). A turn still running (the file's last, with no end yet) is
not stored. Unknown line kinds are skipped and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import attrs

from ._transcript import ReadCounts, TranscriptTurn

__all__ = ["BACKFILL_SOURCES", "BackfillReport", "backfill", "read_turns", "transcript_files"]

#: the harnesses whose session files :func:`backfill` reads (``import --from``'s choices)
BACKFILL_SOURCES: Final = ("claude-code", "codex")


@attrs.define
class BackfillReport:
    """What a backfill read and wrote."""

    files: int = 0
    #: turns written as completed
    stored: int = 0
    #: turns written as abandoned (interrupted, a model API error, no reply)
    abandoned: int = 0
    #: turns the store already held closed (nothing written for them)
    already: int = 0
    #: abandoned turns the store held without the partial reply the file has: added
    partials: int = 0
    #: turns still running when the file was written (not stored)
    in_progress: int = 0
    #: turns the store refused (e.g. the same turn id stored with another prompt)
    refused: int = 0
    #: lines that are not a JSON object, or lack what their kind needs
    bad_lines: int = 0
    #: line kinds skipped, with their counts
    skipped: Counter[str] = attrs.field(factory=Counter)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON."""
        return {
            **attrs.asdict(self, filter=lambda a, _: a.name != "skipped"),
            "skipped": dict(self.skipped),
        }


def transcript_files(path: Path) -> list[Path]:
    """``path`` itself, or every ``*.jsonl`` under it (sorted)."""
    return sorted(p for p in path.rglob("*.jsonl") if p.is_file()) if path.is_dir() else [path]


def _reader(source: str) -> Callable[[Path, ReadCounts], Iterator[TranscriptTurn]]:
    if source == "claude-code":
        from ._claude_transcript import read_claude_code

        return read_claude_code
    if source == "codex":
        from ._codex_rollout import read_codex

        return read_codex
    raise ValueError(f"cannot import from {source!r} (known: {', '.join(BACKFILL_SOURCES)})")


def read_turns(source: str, path: Path, counts: ReadCounts) -> Iterator[TranscriptTurn]:
    """The turns of one ``source`` file (``ValueError`` for a source we do not read)."""
    return _reader(source)(path, counts)


async def backfill(transport: Any, source: str, path: Path) -> BackfillReport:
    """Store the turns of the files at ``path`` that the store lacks; what was done.

    A store that cannot be reached (or refuses us) raises, as elsewhere; a turn it
    refuses is counted in :attr:`BackfillReport.refused` and the import goes on.
    """
    read = _reader(source)
    report = BackfillReport()
    closed: dict[str, dict[str, tuple[str, str | None]]] = {}
    for file in transcript_files(path):
        report.files += 1
        counts = ReadCounts()
        for turn in read(file, counts):
            if turn.conversation_id not in closed:
                closed[turn.conversation_id] = await _statuses(transport, turn.conversation_id)
            status, reply = closed[turn.conversation_id].get(turn.turn_id, (None, None))
            if status == "abandoned" and not reply and turn.ending == "abandoned" and turn.reply:
                # Stored without the partial the person saw: its closing store again, with it.
                if await _store(transport, source, turn, opened=True):
                    closed[turn.conversation_id][turn.turn_id] = ("abandoned", turn.reply)
                    report.partials += 1
                else:
                    report.refused += 1
                continue
            if status in ("completed", "abandoned"):
                report.already += 1
                continue
            if await _store(transport, source, turn, opened=status == "open"):
                closed[turn.conversation_id][turn.turn_id] = (turn.ending, turn.reply)
                if turn.ending == "completed":
                    report.stored += 1
                else:
                    report.abandoned += 1
            else:
                report.refused += 1
        report.bad_lines += counts.bad_lines
        report.in_progress += counts.in_progress
        report.skipped.update(counts.skipped)
    return report


async def _statuses(transport: Any, conversation: str) -> dict[str, tuple[str, str | None]]:
    """Each stored turn's status and reply (``None``: none stored)."""
    from neotoma_agent import NeotomaMemory

    memory = NeotomaMemory(transport, conversation_id=conversation)
    return {h.turn_id: (h.status, h.reply) for h in await memory.history(None)}


async def _store(transport: Any, source: str, turn: TranscriptTurn, *, opened: bool) -> bool:
    """Write one turn as the hooks do; ``False`` when the store refuses it.

    ``opened``: the store holds the turn's user message already (the hooks stored it and
    never closed the turn): only the closing store is written.
    """
    from neotoma_agent import APIError, NeotomaMemory, ToolCall, TurnCloseError

    memory = NeotomaMemory(transport, conversation_id=turn.conversation_id, platform=source)
    tools = [ToolCall.from_json(record) for record in turn.tools]
    try:
        handle: Any = turn.turn_id
        if not opened:
            handle = await memory.open_turn(turn.user, turn_id=turn.turn_id, model=turn.model)
        if turn.ending == "completed":
            await memory.close_turn(handle, turn.reply, tools=tools, model=turn.model)
        else:
            await memory.abandon_turn(
                handle,
                error=turn.error_class or "Abandoned",
                partial_reply=turn.reply,
                tools=tools,
                model=turn.model,
            )
    except TurnCloseError as exc:
        if isinstance(exc.__cause__, APIError) and _refusal(exc.__cause__):
            return False
        raise
    except APIError as exc:  # ValidationError too: text no store can hold
        if _refusal(exc):
            return False
        raise
    return True


def _refusal(exc: Any) -> bool:
    # The store refused this turn's content (4xx other than auth/rate): the next turn may go.
    status = getattr(exc, "status", 0)
    return 400 <= status < 500 and status not in (401, 403, 429)
