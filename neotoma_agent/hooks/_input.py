"""One reader for every harness's hook input, driven by the harness's own table.

A harness module declares what its events send, and nothing else: the field naming its
session, the one naming its turn, and per event a reader built here (:func:`prompt`,
:func:`tool`, :func:`reply`, :func:`stop`, :func:`failed`, :func:`session_end`), each
told which of the harness's fields holds the prompt, the reply, the tool's result, ...::

    INPUT = HarnessInput(
        "claude-code",
        session="session_id",
        turn="prompt_id",
        events={
            "UserPromptSubmit": prompt("prompt"),
            "Stop": stop(reply="last_assistant_message"),
        },
    )
    INPUT.parse("Stop", payload)  # -> HookEvent(Kind.STOP, ...)

So a harness that renames a field, or a new harness, is one table edited, and every rule
of reading (types checked, content never quoted, ids made safe for keys) is kept here
once. Plain classes and closures, not attrs: a hook process builds the tables at import
time, on every event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._event import (
    BadInput,
    HookEvent,
    Kind,
    conversation_id,
    duration,
    optional_str,
    required_str,
    text,
    tool_record,
    turn_id,
)

__all__ = [
    "HarnessInput",
    "Reader",
    "failed",
    "interrupted",
    "prompt",
    "reply",
    "session_end",
    "stop",
    "tool",
]

#: reads one event's payload, given our conversation id and turn id (``None``: the
#: harness sent none), into a :class:`HookEvent`; :class:`BadInput` when it cannot
Reader = Callable[[str, "str | None", Mapping[str, Any]], HookEvent]


class HarnessInput:
    """How one harness's hook inputs read: its id fields, and a reader per event.

    ``session`` names the field holding the harness's session id (required in every
    event), ``turn`` the one holding its turn id. ``turn_required``: ``True``, or the
    events, whose input without a turn id is :class:`BadInput`; in the others a missing
    one is ``None`` (the session's latest turn; on a prompt, the engine mints one).
    ``events`` maps each event name, in the order the harness fires them, to its reader.
    """

    __slots__ = ("_readers", "name", "session", "turn", "turn_required")

    def __init__(
        self,
        name: str,
        *,
        session: str,
        turn: str,
        turn_required: bool | tuple[str, ...] = False,
        events: Mapping[str, Reader],
    ) -> None:
        self.name = name
        self.session = session
        self.turn = turn
        self.turn_required = turn_required
        self._readers = dict(events)

    @property
    def events(self) -> tuple[str, ...]:
        """The events read, in the order the harness fires them."""
        return tuple(self._readers)

    def parse(self, event: str, payload: Mapping[str, Any]) -> HookEvent:
        """Read one hook input (:class:`BadInput` when it cannot be used)."""
        reader = self._readers.get(event)
        if reader is None:
            raise BadInput(f"event {event!r} is not one neotoma-agent handles for {self.name}")
        conv = conversation_id(self.name, required_str(payload, self.session))
        required = self.turn_required
        if required is True or (required and event in required):
            turn: str | None = turn_id(required_str(payload, self.turn))
        else:
            given = optional_str(payload, self.turn)
            turn = turn_id(given) if given and given.strip() else None
        return reader(conv, turn, payload)


def prompt(field: str, *, model: str | None = None, transcript: str | None = None) -> Reader:
    """The person submitted a prompt (``field``; empty allowed); ``model``: the field
    naming the model, if the harness sends one; ``transcript``: the field naming the
    session file, if the hooks can read it (:func:`session_end`)."""

    def read(conv: str, turn: str | None, payload: Mapping[str, Any]) -> HookEvent:
        prompt_text = text(payload, field)
        named = None if model is None else optional_str(payload, model)
        file = None if transcript is None else optional_str(payload, transcript)
        return HookEvent(Kind.PROMPT, conv, turn, prompt=prompt_text, model=named, transcript=file)

    return read


def tool(
    *,
    result: str | None,
    error: str | None = None,
    duration_ms: str | None = None,
    interrupt: str | None = None,
) -> Reader:
    """A tool ran: ``tool_name``, ``tool_input``, ``tool_use_id`` and the harness's
    ``result`` field; ``result=None``: the failure twin (status ``error``, or
    ``cancelled`` when the boolean field ``interrupt`` is true), whose ``error`` field
    (the error text) is the call's result, as ``import`` stores a failed call;
    ``duration_ms``: the field holding the call's milliseconds."""

    def read(conv: str, turn: str | None, payload: Mapping[str, Any]) -> HookEvent:
        failed = result is None
        interrupted = failed and interrupt is not None and payload.get(interrupt) is True
        given = result if result is not None else error
        record = tool_record(
            required_str(payload, "tool_name"),
            args=payload.get("tool_input"),
            # Any JSON, as a result is: the tool-call API checks and caps it at the close.
            result=None if given is None else payload.get(given),
            status="cancelled" if interrupted else "error" if failed else "ok",
            call_id=optional_str(payload, "tool_use_id"),
            duration_ms=None if duration_ms is None else duration(payload, duration_ms),
            error_class=("Interrupted" if interrupted else "ToolError") if failed else None,
        )
        return HookEvent(Kind.TOOL, conv, turn, tool=record)

    return read


def reply(field: str) -> Reader:
    """The reply so far (``field``; absent or null: empty): kept, the turn stays open."""

    def read(conv: str, turn: str | None, payload: Mapping[str, Any]) -> HookEvent:
        return HookEvent(Kind.REPLY, conv, turn, reply=optional_str(payload, field) or "")

    return read


def stop(
    *, reply: str | None, status: str | None = None, failures: Mapping[str, str] | None = None
) -> Reader:
    """The agent stopped: its final reply in field ``reply`` (``None``: it sends none, the
    one kept from an earlier event stands). ``status``: a field whose value, when a key of
    ``failures``, makes the turn abandoned with that error class instead."""
    errors = dict(failures or {})

    def read(conv: str, turn: str | None, payload: Mapping[str, Any]) -> HookEvent:
        if status is not None:
            ended = optional_str(payload, status)
            if ended in errors:
                return HookEvent(Kind.FAILED, conv, turn, error_class=errors[ended])
        final = None if reply is None else optional_str(payload, reply) or ""
        return HookEvent(Kind.STOP, conv, turn, reply=final)

    return read


def failed(*, reply: str | None, error: str, prefix: str, transcript: str | None = None) -> Reader:
    """The turn ended on an error: what the person saw in field ``reply`` (``None``: the
    harness sends no reply of the model's, only its own error text), the error's
    kind in field ``error`` (the error class is ``{prefix}.{kind}``, or ``prefix`` when
    the kind is not a plain name or is ``unknown``); ``transcript``: the field naming the
    session file, whose account of the turn's end, when it has one, is the one kept (as
    ``import --from`` reads it: one answer on both paths)."""

    def read(conv: str, turn: str | None, payload: Mapping[str, Any]) -> HookEvent:
        kind = optional_str(payload, error) or "unknown"
        plain = kind.isidentifier() and kind != "unknown"
        return HookEvent(
            Kind.FAILED,
            conv,
            turn,
            reply=None if reply is None else optional_str(payload, reply) or "",
            error_class=f"{prefix}.{kind}" if plain else prefix,
            transcript=None if transcript is None else optional_str(payload, transcript),
        )

    return read


def interrupted(*, transcript: str | None = None) -> Reader:
    """The person interrupted the turn (``Interrupted``); no reply field: what it had
    streamed is read from the session file named in field ``transcript``."""

    def read(conv: str, turn: str | None, payload: Mapping[str, Any]) -> HookEvent:
        file = None if transcript is None else optional_str(payload, transcript)
        return HookEvent(Kind.FAILED, conv, turn, error_class="Interrupted", transcript=file)

    return read


def session_end(*, transcript: str | None = None) -> Reader:
    """The session ended: what is still open is abandoned (``SessionEnded``).

    ``transcript``: the field naming the session file (Claude Code's transcript, Codex's
    rollout): a turn abandoned here takes what the file says of its end (the partial reply
    the person saw, ``Interrupted`` or the API error), as ``import --from`` reads it.
    """

    def read(conv: str, turn: str | None, payload: Mapping[str, Any]) -> HookEvent:
        file = None if transcript is None else optional_str(payload, transcript)
        return HookEvent(Kind.SESSION_END, conv, None, error_class="SessionEnded", transcript=file)

    return read
