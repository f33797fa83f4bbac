"""Cursor: the fields its hooks send, the answers it honours, where ``hooks.json`` lives.

From Cursor's hooks documentation and the references built on it (Cursor cannot run here).
Every event carries ``conversation_id``, ``generation_id`` (one per prompt and its reply),
``hook_event_name``, ``workspace_roots`` and, optionally, ``model``, ``cursor_version``:

- ``beforeSubmitPrompt``: ``prompt``; Cursor honours only ``{"continue": …}`` here, so no
  context can go with the prompt;
- ``afterAgentResponse``: ``text``, the agent's reply (the only event that carries it);
- ``postToolUse``: ``tool_name``, ``tool_input``, ``tool_output``, ``tool_use_id``,
  ``duration``; its answer may carry ``additional_context``, which is where the turn's
  context goes (on the turn's first tool call); ``postToolUseFailure``: ``error_message``,
  ``failure_type``;
- ``stop``: ``status`` (``completed``, ``aborted``, ``error``), ``loop_count``: no text;
- ``sessionEnd``: the conversation ended.

``hooks.json`` is ``{"version": 1, "hooks": {event: [{"command": …}]}}``, in ``~/.cursor/``
or a project's ``.cursor/``.
"""

from __future__ import annotations

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

NAME: Final = "cursor"

EVENTS: Final = (
    "beforeSubmitPrompt",
    "afterAgentResponse",
    "postToolUse",
    "postToolUseFailure",
    "stop",
    "sessionEnd",
)


_STOP_ERRORS: Final = {"aborted": "Aborted", "error": "AgentError"}


def parse(event: str, payload: Mapping[str, Any]) -> HookEvent:
    """Read one hook input (:class:`BadInput` when it cannot be used)."""
    session = conversation_id(NAME, required_str(payload, "conversation_id"))
    generation = optional_str(payload, "generation_id")
    turn = turn_id(generation) if generation and generation.strip() else None
    if event == "beforeSubmitPrompt":
        prompt = text(payload, "prompt")
        if turn is None:
            raise BadInput("field 'generation_id' is missing")
        return HookEvent(
            Kind.PROMPT, session, turn, prompt=prompt, model=optional_str(payload, "model")
        )
    if event == "afterAgentResponse":
        return HookEvent(Kind.REPLY, session, turn, reply=optional_str(payload, "text") or "")
    if event in ("postToolUse", "postToolUseFailure"):
        failed = event == "postToolUseFailure"
        record = tool_record(
            required_str(payload, "tool_name"),
            args=payload.get("tool_input"),
            result=None if failed else payload.get("tool_output"),
            status="error" if failed else "ok",
            call_id=optional_str(payload, "tool_use_id"),
            duration_ms=duration(payload, "duration"),
            error_class="ToolError" if failed else None,
        )
        return HookEvent(Kind.TOOL, session, turn, tool=record)
    if event == "stop":
        status = optional_str(payload, "status") or "completed"
        if status in _STOP_ERRORS:
            return HookEvent(Kind.FAILED, session, turn, error_class=_STOP_ERRORS[status])
        # The reply came on afterAgentResponse: reply=None keeps it.
        return HookEvent(Kind.STOP, session, turn, reply=None)
    if event == "sessionEnd":
        return HookEvent(Kind.SESSION_END, session, None, error_class="SessionEnded")
    raise BadInput(f"event {event!r} is not one neotoma-agent handles for {NAME}")


def answer(event: str, context: str | None) -> dict[str, Any] | None:
    """What to print: ``continue`` on a prompt, the context on a tool use, else ``{}``."""
    if event == "beforeSubmitPrompt":
        return {"continue": True}
    if event == "postToolUse" and context:
        return {"additional_context": context}
    return {}


def settings_path(scope: str, project: Path) -> Path:
    """``user``: ``~/.cursor/hooks.json``; ``project``: ``.cursor/hooks.json``."""
    if scope == "user":
        return Path.home() / ".cursor" / "hooks.json"
    return project / ".cursor" / "hooks.json"
