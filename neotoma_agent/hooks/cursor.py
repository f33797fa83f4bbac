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

from pathlib import Path
from typing import Any, Final

from ._input import HarnessInput, prompt, reply, session_end, stop, tool

__all__ = ["EVENTS", "INPUT", "NAME", "answer", "parse", "settings_path"]

NAME: Final = "cursor"

#: what each event sends. A prompt must carry ``generation_id`` (the turn); ``stop``
#: carries no text: the reply came on ``afterAgentResponse`` and stands.
INPUT: Final = HarnessInput(
    NAME,
    session="conversation_id",
    turn="generation_id",
    turn_required=("beforeSubmitPrompt",),
    events={
        "beforeSubmitPrompt": prompt("prompt", model="model"),
        "afterAgentResponse": reply("text"),
        "postToolUse": tool(result="tool_output", duration_ms="duration"),
        "postToolUseFailure": tool(result=None, error="error_message", duration_ms="duration"),
        "stop": stop(
            reply=None, status="status", failures={"aborted": "Aborted", "error": "AgentError"}
        ),
        "sessionEnd": session_end(),
    },
)

EVENTS: Final = INPUT.events

#: read one hook input (:class:`~neotoma_agent.hooks.BadInput` when it cannot be used)
parse: Final = INPUT.parse


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
