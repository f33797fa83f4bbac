"""Claude Code: the fields its hooks send, the answer it honours, where its settings live.

The contract was recorded from the real program (Claude Code 2.1.337, the one bundled in
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
- ``StopFailure``: the model API failed (no Stop comes): ``error`` (``server_error``,
  ``rate_limit``, ``unknown``, …) and ``last_assistant_message``, which is the program's
  own ``API Error: …`` text, not the model's. Run without waiting for it: a ``claude -p``
  that exits at once may not let it finish (``SessionEnd`` then closes the turn);
- ``Interrupt``: an app or the SDK interrupted the turn (a ``control_request``
  ``interrupt``; Esc in the terminal): ``source``, ``reason``, ``via``, no text. Not sent
  when the program exits on the interrupt (SIGINT to ``claude -p``: only ``SessionEnd``),
  and run without waiting for it: it may come after the session's next prompt;
- ``SessionEnd``: ``reason``.

None of them carries the text streamed before an interrupt or an API failure: the hook
that abandons the turn (``StopFailure``, ``Interrupt``, else the session's next prompt or
``SessionEnd``) reads it from the transcript (``transcript_path``), as ``import --from
claude-code`` does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from ._event import context_on_prompt
from ._input import HarnessInput, failed, interrupted, prompt, session_end, stop, tool

__all__ = ["EVENTS", "INPUT", "NAME", "answer", "parse", "settings_path"]

NAME: Final = "claude-code"

#: what each event sends; its events in the order Claude Code fires them (``hooks
#: install`` registers them). ``prompt_id`` is missing in builds before it existed: the
#: engine then mints a turn id on the prompt, and later events go to the session's latest.
INPUT: Final = HarnessInput(
    NAME,
    session="session_id",
    turn="prompt_id",
    events={
        "UserPromptSubmit": prompt("prompt", transcript="transcript_path"),
        "PostToolUse": tool(result="tool_response", duration_ms="duration_ms"),
        "PostToolUseFailure": tool(
            result=None, error="error", duration_ms="duration_ms", interrupt="is_interrupt"
        ),
        "Stop": stop(reply="last_assistant_message"),
        # Its last_assistant_message is the program's own "API Error: ..." text, no reply:
        # what was streamed before the failure is read from the transcript.
        "StopFailure": failed(
            reply=None, error="error", prefix="APIError", transcript="transcript_path"
        ),
        "Interrupt": interrupted(transcript="transcript_path"),
        "SessionEnd": session_end(transcript="transcript_path"),
    },
)

EVENTS: Final = INPUT.events

#: read one hook input (:class:`~neotoma_agent.hooks.BadInput` when it cannot be used)
parse: Final = INPUT.parse


def answer(event: str, context: str | None) -> dict[str, Any] | None:
    """What to print on stdout: the context on ``UserPromptSubmit``, else nothing."""
    return context_on_prompt(event, context, otherwise=None)


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
