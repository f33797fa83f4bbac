"""What a harness's session file says, read: its turns, their tool calls, what was skipped.

The readers (``_claude_transcript`` for Claude Code's per-session JSON lines,
``_codex_rollout`` for Codex's rollout files) turn one file into :class:`TranscriptTurn`
values, each with the ids the hooks use for the same turn, and count in a
:class:`ReadCounts` the lines they could not use; ``_backfill`` stores the turns.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import attrs

from ._event import json_object

__all__ = ["Ending", "ReadCounts", "TranscriptCall", "TranscriptTurn", "elapsed_ms", "records"]

#: how a turn read from a file ended: its final reply, or none (interrupted, an error)
Ending = Literal["completed", "abandoned"]


@attrs.define
class ReadCounts:
    """Lines a reader could not use."""

    #: lines that are not a JSON object, or lack what their kind needs
    bad_lines: int = 0
    #: line kinds read past (the program's own bookkeeping, kinds we do not know), by kind
    skipped: Counter[str] = attrs.field(factory=Counter)
    #: turns still running when the file was last written (no end yet): not stored
    in_progress: int = 0


@attrs.define
class TranscriptCall:
    """A tool call as a file shows it: its start, then (if the file has it) its result."""

    name: str
    call_id: str | None
    args: Any
    invoked_at: str | None
    result: Any = None
    status: str | None = None
    ended_at: str | None = None
    error_class: str | None = None
    #: what the file says the call took, when it says (else the time between the lines)
    duration_ms: float | None = None

    def record(self) -> dict[str, Any]:
        """The call as the tool-call API's plain JSON (``ToolCall.to_json()``).

        A call whose result the file never shows was cut off: ``cancelled``.
        """
        from neotoma_agent import ToolCall

        status = self.status or ("cancelled" if self.ended_at is None else "ok")
        error = self.error_class or ("Interrupted" if status == "cancelled" else None)
        call = ToolCall.create(
            self.name,
            args=self.args,
            result=self.result,
            status=status,  # type: ignore[arg-type]
            invoked_at=self.invoked_at,
            duration_ms=(
                self.duration_ms
                if self.duration_ms is not None
                else elapsed_ms(self.invoked_at, self.ended_at)
            ),
            call_id=self.call_id,
            error_class=error if status != "ok" else None,
        )
        return call.to_json()


def json_lines(path: Path, counts: ReadCounts) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order; blank lines skipped, a line that is
    not a JSON object counted in ``counts.bad_lines``."""
    with path.open("rb") as lines:
        for raw in lines:
            if not raw.strip():
                continue
            try:
                line = json_object(raw)
            except ValueError:
                counts.bad_lines += 1
                continue
            yield line


def records(calls: Iterable[TranscriptCall], counts: ReadCounts) -> tuple[dict[str, Any], ...]:
    """The calls as plain JSON records; one the tool-call API refuses is counted, not kept."""
    kept = []
    for call in calls:
        try:
            kept.append(call.record())
        except (TypeError, ValueError):
            counts.bad_lines += 1
    return tuple(kept)


@attrs.frozen
class TranscriptTurn:
    """One turn read from a file, under the ids its hooks use."""

    conversation_id: str
    turn_id: str
    user: str
    ending: Ending
    #: the final reply (completed), or the text of the reply so far (abandoned; may be "")
    reply: str
    #: abandoned: why (stored as the turn's error class)
    error_class: str | None = None
    #: the calls as the tool-call API's plain JSON, in the order they started
    tools: tuple[dict[str, Any], ...] = ()
    model: str | None = None


def _instant(value: str | None) -> _dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        # Python 3.10's fromisoformat does not read a "Z" suffix.
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def elapsed_ms(start: str | None, end: str | None) -> float | None:
    """Milliseconds from ``start`` to ``end`` (ISO 8601), or ``None`` if either is unknown."""
    a, b = _instant(start), _instant(end)
    if a is None or b is None or a.tzinfo is None or b.tzinfo is None or b < a:
        return None
    return (b - a).total_seconds() * 1000
