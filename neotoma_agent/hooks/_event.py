"""What a harness's hook input means, whichever harness sent it.

Each harness module (``claude_code``, ``codex``, ``cursor``) reads its own fields into one
:class:`HookEvent`; the engine (``_run``) acts on that alone. Reading is strict about types
and silent about content: a field of the wrong type raises :class:`BadInput` naming the
field, never quoting it.
"""

from __future__ import annotations

import datetime as _dt
import enum
import hashlib
import time
from collections.abc import Mapping
from typing import Any, Final

import attrs

__all__ = [
    "BadInput",
    "HookEvent",
    "Kind",
    "conversation_id",
    "optional_str",
    "required_str",
    "tool_record",
    "turn_id",
]

#: characters the library refuses in a turn id (they join keys); a harness id holding one
#: is replaced by a digest of itself, the same in every process
_KEY_JOINERS: Final = (":", "|")


class BadInput(ValueError):
    """The hook input cannot be used (its message names fields, never their content)."""


class Kind(enum.Enum):
    """What an event does to a turn."""

    #: the person submitted a prompt: store the user message, answer with context
    PROMPT = "prompt"
    #: a tool ran (or failed): keep the call for the turn's closing store
    TOOL = "tool"
    #: the reply so far (Cursor's ``afterAgentResponse``): kept, the turn stays open
    REPLY = "reply"
    #: the agent finished its reply: store it
    STOP = "stop"
    #: the turn ended without a reply (an error, an abort): store it as abandoned
    FAILED = "failed"
    #: the session ended: abandon what is still open
    SESSION_END = "session_end"
    #: an event we are installed for but that stores nothing (e.g. a session start)
    NOTHING = "nothing"


@attrs.frozen
class HookEvent:
    """One hook input, read. ``turn_id=None``: the session's latest turn."""

    kind: Kind
    #: the harness's session, prefixed with the harness name (our conversation id)
    conversation_id: str
    turn_id: str | None = None
    prompt: str | None = None
    #: STOP: the final reply; REPLY: the text so far; FAILED: what the person saw
    reply: str | None = None
    #: FAILED / SESSION_END: why (stored as the turn's error class)
    error_class: str | None = None
    #: TOOL: the call as the tool-call API's plain JSON (``ToolCall.to_json()``)
    tool: Mapping[str, Any] | None = None


def required_str(payload: Mapping[str, Any], key: str) -> str:
    """``payload[key]`` as a non-empty string, or :class:`BadInput`."""
    value = payload.get(key)
    if not isinstance(value, str):
        kind = "missing" if value is None else f"a {type(value).__name__}, not a string"
        raise BadInput(f"field {key!r} is {kind}")
    if not value.strip():
        raise BadInput(f"field {key!r} is empty")
    return value


def optional_str(payload: Mapping[str, Any], key: str) -> str | None:
    """``payload[key]`` if it is a string, ``None`` if absent or null, else :class:`BadInput`."""
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"field {key!r} is a {type(value).__name__}, not a string")
    return value


def conversation_id(harness: str, session_id: str) -> str:
    """Our conversation id for a harness session: ``{harness}-{session_id}``.

    The prefix keeps sessions of two harnesses apart and tells a reader of ``show`` where
    a conversation came from.
    """
    return f"{harness}-{session_id.strip()}"


def turn_id(harness_id: str) -> str:
    """Our turn id for the harness's own turn id: the same, unless it holds ``:`` or ``|``."""
    value = harness_id.strip()
    if any(c in value for c in _KEY_JOINERS) or value.lower() == "assistant":
        return "h" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return value


def _iso(unix_ms: float) -> str:
    moment = _dt.datetime.fromtimestamp(unix_ms / 1000, tz=_dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tool_record(
    name: str,
    *,
    args: Any,
    result: Any,
    status: str,
    call_id: str | None,
    duration_ms: float | None,
    error_class: str | None = None,
) -> dict[str, Any]:
    """A tool call as the tool-call API's plain JSON (``ToolCall.to_json()``'s keys).

    A harness reports a call when it ended; it started ``duration_ms`` earlier.
    """
    ended = time.time() * 1000
    started = ended - duration_ms if duration_ms is not None and duration_ms >= 0 else ended
    return {
        "name": name,
        "invoked_at": _iso(started),
        "status": status,
        "args": args,
        "result": result,
        "duration_ms": duration_ms,
        "call_id": call_id,
        "error_class": error_class,
    }


def duration(payload: Mapping[str, Any], key: str) -> float | None:
    """A duration in milliseconds if the field holds a non-negative number."""
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)
