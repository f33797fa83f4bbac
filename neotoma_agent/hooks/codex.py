"""Codex: the fields its hooks send, the answer it honours, where its hooks file lives.

From Codex's published hook schemas (``codex-rs/hooks/schema/generated/*.input.schema.json``
in openai/codex; the program itself could not be run here). Every event carries
``session_id``, ``turn_id`` (the same for every event of one turn), ``transcript_path``,
``cwd``, ``hook_event_name``, ``model`` and ``permission_mode``:

- ``UserPromptSubmit``: ``prompt``; its answer may carry
  ``{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": …}}``
  (the output schema refuses unknown keys, so nothing else is added);
- ``PostToolUse``: ``tool_name``, ``tool_input``, ``tool_response``, ``tool_use_id``
  (Codex has no failure twin: a failed command is a ``tool_response`` too);
- ``Stop``: ``last_assistant_message`` (may be null), ``stop_hook_active``;
- ``StopFailure``: the turn ended on an API error: ``error`` (``rate_limit``,
  ``server_error``, …), ``last_assistant_message``.

Hooks live in ``hooks.json`` beside ``config.toml`` (``$CODEX_HOME``, default ``~/.codex``,
or a project's ``.codex/``), in the same shape as Claude Code's; the ``hooks`` feature is on
by default. Codex has no session-end event: a turn left open is abandoned by the session's
next prompt, or by ``audit``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ._event import (
    BadInput,
    HookEvent,
    Kind,
    conversation_id,
    optional_str,
    required_str,
    text,
    tool_record,
    turn_id,
)

__all__ = ["EVENTS", "NAME", "answer", "parse", "settings_path"]

NAME: Final = "codex"

EVENTS: Final = ("UserPromptSubmit", "PostToolUse", "Stop", "StopFailure")


def parse(event: str, payload: Mapping[str, Any]) -> HookEvent:
    """Read one hook input (:class:`BadInput` when it cannot be used)."""
    session = conversation_id(NAME, required_str(payload, "session_id"))
    turn = turn_id(required_str(payload, "turn_id"))
    if event == "UserPromptSubmit":
        prompt = text(payload, "prompt")
        return HookEvent(
            Kind.PROMPT, session, turn, prompt=prompt, model=optional_str(payload, "model")
        )
    if event == "PostToolUse":
        record = tool_record(
            required_str(payload, "tool_name"),
            args=payload.get("tool_input"),
            result=payload.get("tool_response"),
            status="ok",
            call_id=optional_str(payload, "tool_use_id"),
            duration_ms=None,
        )
        return HookEvent(Kind.TOOL, session, turn, tool=record)
    if event == "Stop":
        return HookEvent(
            Kind.STOP, session, turn, reply=optional_str(payload, "last_assistant_message") or ""
        )
    if event == "StopFailure":
        error = optional_str(payload, "error") or "unknown"
        return HookEvent(
            Kind.FAILED,
            session,
            turn,
            reply=optional_str(payload, "last_assistant_message") or "",
            error_class=f"StopFailure.{error}" if error.isidentifier() else "StopFailure",
        )
    raise BadInput(f"event {event!r} is not one neotoma-agent handles for {NAME}")


def answer(event: str, context: str | None) -> dict[str, Any] | None:
    """What to print: the context on ``UserPromptSubmit``, else ``{}`` (an acknowledgement)."""
    if event == "UserPromptSubmit" and context:
        return {
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": context,
            }
        }
    return {}


def settings_path(scope: str, project: Path) -> Path:
    """``user``: ``$CODEX_HOME/hooks.json`` (``~/.codex``); ``project``: ``.codex/hooks.json``."""
    if scope == "user":
        base = os.environ.get("CODEX_HOME")
        return (Path(base).expanduser() if base else Path.home() / ".codex") / "hooks.json"
    return project / ".codex" / "hooks.json"
