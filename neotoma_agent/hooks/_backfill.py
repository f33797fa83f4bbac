"""Backfill: a harness's session transcripts stored as the turns its hooks would have stored.

``neotoma-agent import --from claude-code PATH`` reads Claude Code's per-session JSON
lines (``~/.claude/projects/<project>/<session>.jsonl``; PATH is one file or a folder of
them). The format facts come from files the real program wrote here (Claude Code 2.1.332;
``tests/data/hooks/claude_code/*/transcript.jsonl``):

- a ``user`` line whose ``message.content`` is the prompt (a string, or text blocks) opens a
  turn: its ``promptId`` is the turn id and its ``sessionId`` the session, the same ids the
  hooks use (conversation ``claude-code-{sessionId}``);
- ``assistant`` lines carry the reply's content blocks, one block a line; the turn's reply
  is its last text block, as the Stop hook's ``last_assistant_message`` is;
- a ``user`` line holding ``tool_result`` blocks, or with the turn's own ``promptId`` (the
  program's "[Request interrupted by user]" note), belongs to the turn in progress;
- every other kind (``attachment``, ``queue-operation``, ``api-request``, ``system``, …) is
  skipped and counted.

A turn with no reply (interrupted) is not stored (no half turns: the hooks abandon those
as they happen) and is counted. A turn the store already holds as completed (captured by
the hooks) is left alone, so importing a session the hooks captured writes nothing new.
Codex rollout files are not read yet: no Codex program ran here to write one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from ._event import conversation_id, turn_id

__all__ = ["BackfillReport", "TranscriptTurn", "backfill", "read_claude_code"]

SOURCES = ("claude-code",)


@attrs.frozen
class TranscriptTurn:
    """One finished turn read from a transcript."""

    conversation_id: str
    turn_id: str
    user: str
    reply: str | None


@attrs.define
class BackfillReport:
    """What a backfill read and wrote."""

    files: int = 0
    stored: int = 0
    already: int = 0
    no_reply: int = 0
    bad_lines: int = 0
    #: line kinds skipped, with their counts
    skipped: Counter[str] = attrs.field(factory=Counter)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON."""
        return {
            **attrs.asdict(self, filter=lambda a, _: a.name != "skipped"),
            "skipped": dict(self.skipped),
        }


def _texts(content: object) -> list[str] | None:
    """The text blocks of a message's content (``None`` if it holds a tool result)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    texts = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "tool_result":
            return None
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return texts


def read_claude_code(path: Path, report: BackfillReport) -> Iterator[TranscriptTurn]:
    """The finished turns of one Claude Code transcript file, in order."""
    current: dict[str, Any] | None = None

    def finished() -> Iterator[TranscriptTurn]:
        if current is None:
            return
        if current["reply"] is None:
            report.no_reply += 1
            return
        yield TranscriptTurn(current["conv"], current["turn"], current["user"], current["reply"])

    with path.open("rb") as lines:
        for raw in lines:
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                report.bad_lines += 1
                continue
            if not isinstance(line, dict):
                report.bad_lines += 1
                continue
            kind = line.get("type")
            message = line.get("message")
            if kind not in ("user", "assistant") or not isinstance(message, Mapping):
                report.skipped[str(kind)] += 1
                continue
            texts = _texts(message.get("content"))
            if kind == "user":
                session, prompt_id = line.get("sessionId"), line.get("promptId")
                if texts is None or line.get("isMeta"):
                    continue  # a tool result, or the program's own note: the same turn
                if not isinstance(session, str) or not isinstance(prompt_id, str):
                    report.bad_lines += 1
                    continue
                if current is not None and current["turn"] == turn_id(prompt_id):
                    continue  # the program's note in the same turn ("[Request interrupted…")
                yield from finished()
                current = {
                    "conv": conversation_id("claude-code", session),
                    "turn": turn_id(prompt_id),
                    "user": "\n".join(texts),
                    "reply": None,
                }
            elif current is not None and texts:
                current["reply"] = texts[-1]
    yield from finished()


def transcript_files(path: Path) -> list[Path]:
    """``path`` itself, or every ``*.jsonl`` under it (sorted)."""
    return sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]


async def backfill(transport: Any, source: str, path: Path) -> BackfillReport:
    """Store the turns of the transcripts at ``path`` that the store lacks."""
    from neotoma_agent import NeotomaMemory

    if source not in SOURCES:
        raise ValueError(f"cannot import from {source!r} (known: {', '.join(SOURCES)})")
    report = BackfillReport()
    completed: dict[str, set[str]] = {}
    for file in transcript_files(path):
        report.files += 1
        for turn in read_claude_code(file, report):
            memory = NeotomaMemory(transport, conversation_id=turn.conversation_id, platform=source)
            if turn.conversation_id not in completed:
                completed[turn.conversation_id] = {
                    h.turn_id for h in await memory.history(None) if h.status == "completed"
                }
            if turn.turn_id in completed[turn.conversation_id]:
                report.already += 1
                continue
            await memory.record_turn(turn.user, turn.reply or "", turn_id=turn.turn_id)
            report.stored += 1
    return report
