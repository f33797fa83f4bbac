"""What a harness's hook input means, whichever harness sent it.

Each harness module (``claude_code``, ``codex``, ``cursor``) declares its fields in a table
that the one reader in ``_input`` reads into a :class:`HookEvent`; the engine (``_run``)
acts on that alone. Reading is strict about types
and silent about content: a field of the wrong type raises :class:`BadInput` naming the
field, never quoting it.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

__all__ = [
    "NO_STOP",
    "BadInput",
    "HookEvent",
    "Kind",
    "additional_context",
    "conversation_id",
    "json_object",
    "optional_str",
    "required_str",
    "text",
    "tool_record",
    "turn_id",
]

#: characters the library refuses in a turn id (they join keys); a harness id holding one
#: is replaced by a digest of itself, the same in every process
_KEY_JOINERS: Final = (":", "|")


#: the error class of a turn that got no Stop (abandoned by the next prompt)
NO_STOP: Final = "NoStopHook"
# A century in milliseconds: a longer duration is no real call's.
_MAX_DURATION_MS: Final = 100 * 365.25 * 86_400_000


class BadInput(ValueError):
    """The hook input cannot be used (its message names fields, never their content)."""


def json_object(raw: str | bytes) -> dict[str, Any]:
    """The JSON object ``raw`` holds; ``ValueError`` when it holds none, its message saying
    what it is instead (``not JSON``, ``a JSON list, not an object``), never quoting it."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to read
        raise ValueError("not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}, not an object")
    return value


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


class HookEvent(NamedTuple):
    """One hook input, read. ``turn_id=None``: the session's latest turn.

    A named tuple, not an attrs class: every hook process builds this class, and attrs
    would cost it more than the event's own work.
    """

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
    #: the model the harness names, if any (stored on the turn record)
    model: str | None = None
    #: PROMPT / SESSION_END: the harness's session file (Claude Code's transcript, Codex's
    #: rollout), read when the event abandons a turn no harness event said the end of
    transcript: str | None = None


def _well_formed(key: str, value: str) -> str:
    # JSON can carry half a character (a lone surrogate escape); no store can hold one.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"field {key!r} is not well-formed text (a lone surrogate)") from None
    return value


def _a(value: object) -> str:
    """``value``'s type name with its article: "an int", "a list"."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def required_str(payload: Mapping[str, Any], key: str) -> str:
    """``payload[key]`` as a non-empty, well-formed string, or :class:`BadInput`."""
    value = payload.get(key)
    if not isinstance(value, str):
        kind = "missing" if value is None else f"{_a(value)}, not a string"
        raise BadInput(f"field {key!r} is {kind}")
    if not value.strip():
        raise BadInput(f"field {key!r} is empty")
    return _well_formed(key, value)


def optional_str(payload: Mapping[str, Any], key: str) -> str | None:
    """``payload[key]`` if it is a string, ``None`` if absent or null, else :class:`BadInput`."""
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"field {key!r} is {_a(value)}, not a string")
    return _well_formed(key, value)


def text(payload: Mapping[str, Any], key: str) -> str:
    """``payload[key]`` as well-formed text (empty allowed), or :class:`BadInput`."""
    value = payload.get(key)
    if not isinstance(value, str):
        kind = "missing" if value is None else f"{_a(value)}, not a string"
        raise BadInput(f"field {key!r} is {kind}")
    return _well_formed(key, value)


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
        import hashlib  # rare (an id holding a joiner): not paid by every hook process

        return "h" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return value


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
    """A tool call in the tool-call API's plain JSON shape (``ToolCall.to_json()``'s keys).

    A harness reports a call when it ended; it started ``duration_ms`` earlier (the clock
    is read here, once). Not checked here: the API checks it (``ToolCall.from_json``) when
    the turn's closing store is built, and drops a call it refuses, saying so. A tool use
    then costs its process no attrs class and no turn engine: it is the commonest event,
    and each one is a fresh process the harness waits for.
    """
    ended = _dt.datetime.now(_dt.timezone.utc)
    started = ended - _dt.timedelta(milliseconds=duration_ms or 0)
    return {
        "name": name,
        # Any ISO 8601 instant: the API normalises it to its stored form (milliseconds, Z).
        "invoked_at": started.isoformat(timespec="milliseconds"),
        "status": status,
        "args": args,
        "result": result,
        "duration_ms": duration_ms,
        "call_id": call_id,
        "error_class": error_class,
    }


def duration(payload: Mapping[str, Any], key: str) -> float | None:
    """A duration in milliseconds if the field holds a finite, non-negative number."""
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None  # `not value >= 0` also refuses NaN
    # Above a century is no tool call's (1e300 would overflow the start instant).
    return float(value) if value <= _MAX_DURATION_MS else None


def context_on_prompt(
    event: str, context: str | None, *, otherwise: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Claude Code's and Codex's answer: the context on ``UserPromptSubmit``, else
    ``otherwise`` (what the harness takes for "nothing to add")."""
    if event == "UserPromptSubmit" and context:
        return additional_context(event, context)
    return otherwise


def additional_context(event: str, context: str) -> dict[str, Any]:
    """The answer that hands ``context`` to the model, for Claude Code and Codex alike.

    Both honour only the nested shape (a bare top-level ``additionalContext`` is ignored,
    and Codex's output schema refuses any other key).
    """
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}
