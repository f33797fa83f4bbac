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
from pathlib import Path
from typing import Any, Final

from ._event import additional_context
from ._input import HarnessInput, failed, prompt, stop, tool

__all__ = ["EVENTS", "INPUT", "NAME", "answer", "parse", "settings_path"]

NAME: Final = "codex"

#: what each event sends (every one carries ``turn_id``)
INPUT: Final = HarnessInput(
    NAME,
    session="session_id",
    turn="turn_id",
    turn_required=True,
    events={
        "UserPromptSubmit": prompt("prompt", model="model"),
        "PostToolUse": tool(result="tool_response"),
        "Stop": stop(reply="last_assistant_message"),
        "StopFailure": failed(reply="last_assistant_message", error="error", prefix="StopFailure"),
    },
)

EVENTS: Final = INPUT.events

#: read one hook input (:class:`~neotoma_agent.hooks.BadInput` when it cannot be used)
parse: Final = INPUT.parse


def answer(event: str, context: str | None) -> dict[str, Any] | None:
    """What to print: the context on ``UserPromptSubmit``, else ``{}`` (an acknowledgement)."""
    if event == "UserPromptSubmit" and context:
        return additional_context(event, context)
    return {}


def settings_path(scope: str, project: Path) -> Path:
    """``user``: ``$CODEX_HOME/hooks.json`` (``~/.codex``); ``project``: ``.codex/hooks.json``."""
    if scope == "user":
        base = os.environ.get("CODEX_HOME")
        return (Path(base).expanduser() if base else Path.home() / ".codex") / "hooks.json"
    return project / ".codex" / "hooks.json"
