"""Codex: the fields its hooks send, the answer it honours, where its hooks file lives.

The contract was recorded from the real program (``npm install @openai/codex``) running
against a fake Responses API; the recordings are the fixtures in ``tests/data/hooks/codex/``
(``scripts/record_codex_inputs.py``; the version in ``program.json`` there). Every event
carries ``session_id``, ``transcript_path`` (the rollout file), ``cwd`` and
``hook_event_name``; the turn's events also ``turn_id`` (the same for every event of one
turn), ``model`` and ``permission_mode``:

- ``UserPromptSubmit``: ``prompt``; its answer may carry
  ``{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": …}}``
  (the output schema refuses unknown keys, so nothing else is added);
- ``PostToolUse``: ``tool_name``, ``tool_input``, ``tool_response``, ``tool_use_id``. A
  shell command comes as tool ``Bash`` with ``{"command": …}`` and its output as a string,
  with no exit status: a failed command looks like any other (Codex has no failure twin);
- ``Stop``: ``last_assistant_message`` (may be null), ``stop_hook_active``;
- ``StopFailure`` (published schema): the turn ended on an API error: ``error``
  (``rate_limit``, ``server_error``, …), ``last_assistant_message``. The recorded version
  did not send it for a model API answering 500: no Stop came, the session's end closed the turn;
- ``SessionEnd``: ``reason`` (``other`` at the end of every ``codex exec``), no
  ``turn_id``: what is still open is abandoned (an interrupted turn gets no Stop).

Hooks live in ``hooks.json`` beside ``config.toml`` (``$CODEX_HOME``, default ``~/.codex``,
or a project's ``.codex/``), in the same shape as Claude Code's. Codex runs a hook from it
only once the person has trusted it in its ``/hooks`` (it records a hash of the hook in
``config.toml``); until then it skips it without a word.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from ._event import context_on_prompt
from ._input import HarnessInput, failed, prompt, session_end, stop, tool

__all__ = ["EVENTS", "INPUT", "NAME", "answer", "parse", "settings_path"]

NAME: Final = "codex"

#: what each event sends (the turn's events carry ``turn_id``; ``SessionEnd`` does not)
INPUT: Final = HarnessInput(
    NAME,
    session="session_id",
    turn="turn_id",
    turn_required=("UserPromptSubmit", "PostToolUse", "Stop", "StopFailure"),
    events={
        "UserPromptSubmit": prompt("prompt", model="model", transcript="transcript_path"),
        "PostToolUse": tool(result="tool_response"),
        "Stop": stop(reply="last_assistant_message"),
        "StopFailure": failed(
            reply="last_assistant_message",
            error="error",
            prefix="StopFailure",
            transcript="transcript_path",
        ),
        "SessionEnd": session_end(transcript="transcript_path"),
    },
)

EVENTS: Final = INPUT.events

#: read one hook input (:class:`~neotoma_agent.hooks.BadInput` when it cannot be used)
parse: Final = INPUT.parse


def answer(event: str, context: str | None) -> dict[str, Any] | None:
    """What to print: the context on ``UserPromptSubmit``, else ``{}`` (an acknowledgement)."""
    return context_on_prompt(event, context, otherwise={})


def settings_path(scope: str, project: Path) -> Path:
    """``user``: ``$CODEX_HOME/hooks.json`` (``~/.codex``); ``project``: ``.codex/hooks.json``."""
    if scope == "user":
        base = os.environ.get("CODEX_HOME")
        return (Path(base).expanduser() if base else Path.home() / ".codex") / "hooks.json"
    return project / ".codex" / "hooks.json"
