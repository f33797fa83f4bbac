"""Claude Code's per-session JSON lines (``~/.claude/projects/<project>/<session>.jsonl``).

The format facts come from files the real program wrote here, against a fake model API
(``tests/data/hooks/claude_code/*/transcript.jsonl``; the version in ``program.json``
beside them). One JSON object a line, its kind in ``type``:

- ``user`` with ``message.content`` a string or text blocks: a prompt. Its ``promptId`` is
  the turn id and ``sessionId`` the session, the ids the hooks get as ``prompt_id`` and
  ``session_id`` (conversation ``claude-code-{sessionId}``). A line without ``promptId``
  (a build from before it) uses its ``uuid``: the hooks of such a build mint their own
  turn ids, so its sessions cannot be matched with what they stored;
- ``assistant``: one content block a line (``text`` or ``tool_use`` with ``id``, ``name``,
  ``input``), ``message.model`` the model; the reply is the turn's last text block, as the
  Stop hook's ``last_assistant_message`` is;
- ``user`` holding ``tool_result`` blocks (``tool_use_id``, ``content``, ``is_error``) and
  the structured result in ``toolUseResult`` (what the PostToolUse hook gets as
  ``tool_response``): the end of a tool call;
- ``user`` with the turn's own ``promptId`` and the text ``[Request interrupted by user…]``:
  the person interrupted the turn. Whatever text was streamed by then is on an
  ``assistant`` line before it (the partial reply);
- ``assistant`` with ``isApiErrorMessage: true`` (and ``error``, e.g. ``unknown``): the
  model API failed; its text (``API Error: 400 …``) is the program's, not a reply;
- every other kind (``attachment``, ``queue-operation``, ``api-request``, ``last-prompt``,
  ``cost-state``, …), ``isMeta`` notes and ``isSidechain`` lines (a subagent's own
  conversation) are skipped and counted.

A turn that ends in a tool call (no text after its last result) and is followed by another
prompt got no reply: abandoned. The file's last turn in that state is still running (the
session is live): not stored, counted as in progress.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ._event import conversation_id, turn_id
from ._transcript import ReadCounts, TranscriptCall, TranscriptTurn, json_lines, records

__all__ = ["read_claude_code"]

HARNESS: Final = "claude-code"
#: how the program marks a turn the person interrupted (its own note in the transcript)
_INTERRUPTED: Final = "[Request interrupted by user"


@attrs.define
class _Turn:
    conversation_id: str
    turn_id: str
    user: str
    reply: str | None = None
    #: the last block seen: "text", "tool_use" or "tool_result"
    last: str = "prompt"
    interrupted: bool = False
    #: the model API failed: the program's own error line ends the turn (no reply)
    api_error: str | None = None
    model: str | None = None
    calls: dict[str, TranscriptCall] = attrs.field(factory=dict)

    def ended(self, *, last_in_file: bool, counts: ReadCounts) -> TranscriptTurn | None:
        tools = records(self.calls.values(), counts)
        failed = self.interrupted or self.api_error is not None
        if not failed and self.reply is not None and self.last == "text":
            return TranscriptTurn(
                self.conversation_id,
                self.turn_id,
                self.user,
                "completed",
                self.reply,
                tools=tools,
                model=self.model,
            )
        if not failed and last_in_file:
            counts.in_progress += 1
            return None
        return TranscriptTurn(
            self.conversation_id,
            self.turn_id,
            self.user,
            "abandoned",
            self.reply or "",
            error_class=self.api_error or ("Interrupted" if self.interrupted else "NoReply"),
            tools=tools,
            model=self.model,
        )


def _blocks(content: object) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping)]


def read_claude_code(path: Path, counts: ReadCounts) -> Iterator[TranscriptTurn]:
    """The turns of one Claude Code transcript file, in order."""
    current: _Turn | None = None
    for line in json_lines(path, counts):
        kind = line.get("type")
        message = line.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, Mapping):
            counts.skipped[str(kind)] += 1
            continue
        if line.get("isSidechain") is True or line.get("isMeta") is True:
            counts.skipped["sidechain" if line.get("isSidechain") is True else "meta"] += 1
            continue
        blocks = _blocks(message.get("content"))
        if kind == "assistant":
            if current is None:
                counts.skipped["assistant before a prompt"] += 1
                continue
            _assistant(current, line, message, blocks)
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            if current is not None:
                _results(current, line, results)
            continue
        text = "\n".join(b["text"] for b in blocks if isinstance(b.get("text"), str))
        prompt_id = line.get("promptId")
        if (
            current is not None
            and text.startswith(_INTERRUPTED)
            and (prompt_id is None or turn_id(str(prompt_id)) == current.turn_id)
        ):
            current.interrupted = True
            continue
        session = line.get("sessionId")
        turn = prompt_id if isinstance(prompt_id, str) and prompt_id.strip() else line.get("uuid")
        if not isinstance(session, str) or not session.strip() or not isinstance(turn, str):
            counts.bad_lines += 1
            continue
        if current is not None and turn_id(turn) == current.turn_id:
            counts.skipped["note"] += 1  # the program's own text in the turn: not the prompt
            continue
        if current is not None:
            done = current.ended(last_in_file=False, counts=counts)
            if done is not None:
                yield done
        current = _Turn(conversation_id(HARNESS, session), turn_id(turn), text)
    if current is not None:
        done = current.ended(last_in_file=True, counts=counts)
        if done is not None:
            yield done


def _assistant(
    turn: _Turn, line: Mapping[str, Any], message: Mapping[str, Any], blocks: list[Any]
) -> None:
    if line.get("isApiErrorMessage") is True:
        # The program's own "API Error: ..." text, not the model's: no reply came.
        error = line.get("error")
        known = isinstance(error, str) and error.isidentifier() and error != "unknown"
        turn.api_error = f"APIError.{error}" if known else "APIError"
        return
    model = message.get("model")
    if isinstance(model, str) and model and not model.startswith("<"):  # "<synthetic>"
        turn.model = model
    for block in blocks:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            turn.reply, turn.last = block["text"], "text"
        elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            call_id = block.get("id") if isinstance(block.get("id"), str) else None
            key = call_id or f"{block['name']}#{len(turn.calls)}"
            turn.calls[key] = TranscriptCall(
                block["name"], call_id, block.get("input"), _timestamp(line)
            )
            turn.last = "tool_use"


def _results(turn: _Turn, line: Mapping[str, Any], results: list[Mapping[str, Any]]) -> None:
    structured = line.get("toolUseResult")
    for block in results:
        call = turn.calls.get(str(block.get("tool_use_id")))
        if call is None:
            continue
        # The structured result is what the PostToolUse hook gets (one per line: with
        # several results on a line, each block's own content).
        single = structured is not None and len(results) == 1
        call.result = structured if single else block.get("content")
        call.ended_at = _timestamp(line)
        if block.get("is_error") is True:
            call.status, call.error_class = "error", "ToolError"
            if isinstance(block.get("content"), str):
                # The error text, as PostToolUseFailure's ``error`` sends it (the
                # structured result is Claude Code's display of it: "Error: " + text).
                call.result = block["content"]
        turn.last = "tool_result"


def _timestamp(line: Mapping[str, Any]) -> str | None:
    value = line.get("timestamp")
    return value if isinstance(value, str) else None
