"""Claude Code: the fields its hooks send, the answer it honours, where its settings live.

The contract was recorded from the real program (Claude Code 2.1.332, the one bundled in
``claude-agent-sdk``) running against a fake model API; the recordings are the fixtures in
``tests/data/hooks/claude_code/``. Every event carries ``session_id``, ``transcript_path``,
``cwd`` and ``hook_event_name``; from the prompt on, also ``prompt_id`` (the same for every
event of one turn) and ``permission_mode``:

- ``UserPromptSubmit``: ``prompt``. Its answer reaches the model only in the nested shape
  ``{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": …}}``
  (a bare top-level ``additionalContext`` is ignored);
- ``PostToolUse``: ``tool_name``, ``tool_input``, ``tool_response``, ``tool_use_id``,
  ``duration_ms``; ``PostToolUseFailure``: the same with ``error`` (text) and
  ``is_interrupt`` instead of ``tool_response``;
- ``Stop``: ``last_assistant_message`` (the reply's last text block: what the agent said
  before a tool call in the same turn is not in it), ``stop_hook_active``;
- ``SessionEnd``: ``reason``.

No Stop fires when the person interrupts the turn or the model API fails: such a turn is
abandoned by the session's next prompt, or by ``SessionEnd``.
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
    duration,
    optional_str,
    required_str,
    text,
    tool_record,
    turn_id,
)

__all__ = ["EVENTS", "NAME", "answer", "parse", "settings_path"]

NAME: Final = "claude-code"

#: the events ``hooks install`` registers, in the order Claude Code fires them
EVENTS: Final = ("UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd")


def parse(event: str, payload: Mapping[str, Any]) -> HookEvent:
    """Read one hook input (:class:`BadInput` when it cannot be used)."""
    session = conversation_id(NAME, required_str(payload, "session_id"))
    prompt_id = optional_str(payload, "prompt_id")
    turn = turn_id(prompt_id) if prompt_id and prompt_id.strip() else None
    if event == "UserPromptSubmit":
        # turn None (a build before prompt_id existed): the engine mints one.
        return HookEvent(Kind.PROMPT, session, turn, prompt=text(payload, "prompt"))
    if event in ("PostToolUse", "PostToolUseFailure"):
        failed = event == "PostToolUseFailure"
        interrupted = failed and payload.get("is_interrupt") is True
        record = tool_record(
            required_str(payload, "tool_name"),
            args=payload.get("tool_input"),
            result=None if failed else payload.get("tool_response"),
            status="cancelled" if interrupted else "error" if failed else "ok",
            call_id=optional_str(payload, "tool_use_id"),
            duration_ms=duration(payload, "duration_ms"),
            error_class=("Interrupted" if interrupted else "ToolError") if failed else None,
        )
        return HookEvent(Kind.TOOL, session, turn, tool=record)
    if event == "Stop":
        reply = optional_str(payload, "last_assistant_message")
        return HookEvent(Kind.STOP, session, turn, reply=reply or "")
    if event == "SessionEnd":
        return HookEvent(Kind.SESSION_END, session, turn, error_class="SessionEnded")
    raise BadInput(f"event {event!r} is not one neotoma-agent handles for {NAME}")


def answer(event: str, context: str | None) -> dict[str, Any] | None:
    """What to print on stdout: the context on ``UserPromptSubmit``, else nothing."""
    if event == "UserPromptSubmit" and context:
        return {
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": context,
            }
        }
    return None


def settings_path(scope: str, project: Path) -> Path:
    """The settings file for ``scope``.

    ``user``: ``~/.claude/settings.json`` (``$CLAUDE_CONFIG_DIR`` when set); ``project``:
    ``.claude/settings.local.json`` in the project, the per-person file Claude Code keeps
    out of version control (the command names this machine's store).
    """
    if scope == "user":
        base = os.environ.get("CLAUDE_CONFIG_DIR")
        return (Path(base).expanduser() if base else Path.home() / ".claude") / "settings.json"
    return project / ".claude" / "settings.local.json"
