"""Codex's rollout files (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``).

The format facts come from files the real program wrote here, against a fake Responses
API (``tests/data/hooks/codex/*/rollout.jsonl``; the version in ``program.json`` beside
them). One JSON object a line, ``{"timestamp", "type", "payload"}``:

- ``session_meta``: ``payload.id`` is the session, the hooks' ``session_id``
  (conversation ``codex-{id}``); ``turn_context``: ``payload.model``;
- ``event_msg`` ``task_started``: a turn begins, ``payload.turn_id`` the hooks' ``turn_id``;
- ``event_msg`` ``item_completed`` with ``item.type`` ``UserMessage`` (the prompt: the
  hook's ``prompt``), ``AgentMessage`` (text the agent said) or ``CommandExecution`` (a
  command's ``status``, ``exit_code``, ``duration``; ``item.id`` is the call's ``call_id``);
- ``response_item`` ``function_call`` / ``custom_tool_call`` (``name``, ``arguments`` or
  ``input``, ``call_id``) and their ``*_output`` (``call_id``, ``output``): a tool call;
- ``event_msg`` ``task_complete``: the turn ended, ``last_agent_message`` its reply (the
  Stop hook's ``last_assistant_message``); with ``error`` (and no reply) the model API
  failed;
- ``event_msg`` ``turn_aborted`` (``reason``: ``interrupted``): the person interrupted it.
  Codex keeps no text of a reply cut off mid-stream; what the agent said before (an
  ``AgentMessage``) is the partial reply;
- every other kind (``response_item`` ``message`` / ``reasoning``, which repeat the above
  as the model saw it, ``world_state``, ``token_usage_record``, ``event_msg``
  ``token_count``, …) is skipped and counted, as ``type`` or ``type.payload-type``.

A turn without its end at the end of the file is still running: not stored, counted as in
progress.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ._event import conversation_id, turn_id
from ._transcript import ReadCounts, TranscriptCall, TranscriptTurn, json_lines, records

__all__ = ["read_codex"]

HARNESS: Final = "codex"
_CALLS: Final = ("function_call", "custom_tool_call")
_OUTPUTS: Final = ("function_call_output", "custom_tool_call_output")


@attrs.define
class _Turn:
    turn_id: str
    user: str | None = None
    said: str | None = None
    model: str | None = None
    calls: dict[str, TranscriptCall] = attrs.field(factory=dict)


def _text(content: object, kind: str) -> str | None:
    if not isinstance(content, list):
        return None
    parts = [
        b["text"]
        for b in content
        if isinstance(b, Mapping) and b.get("type") == kind and isinstance(b.get("text"), str)
    ]
    return "\n".join(parts) if parts else None


def _arguments(raw: object) -> Any:
    # The model's arguments are a JSON text; kept as text when they are not JSON.
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw


def _error_class(prefix: str, detail: object) -> str:
    return f"{prefix}.{detail}" if isinstance(detail, str) and detail.isidentifier() else prefix


def read_codex(path: Path, counts: ReadCounts) -> Iterator[TranscriptTurn]:
    """The turns of one Codex rollout file, in order."""
    conv: str | None = None
    model: str | None = None
    current: _Turn | None = None

    def ended(turn: _Turn, ending: str, reply: str, error: str | None) -> TranscriptTurn | None:
        if conv is None:
            counts.bad_lines += 1  # a turn end with no session line before it
            return None
        if turn.user is None:
            # A turn the person did not prompt (a compaction, a review): not a turn of theirs.
            counts.skipped["turn without a prompt"] += 1
            return None
        return TranscriptTurn(
            conv,
            turn.turn_id,
            turn.user,
            "completed" if ending == "completed" else "abandoned",
            reply,
            error_class=error,
            tools=records(turn.calls.values(), counts),
            model=turn.model or model,
        )

    for line in json_lines(path, counts):
        payload = line.get("payload")
        if not isinstance(payload, dict):
            counts.bad_lines += 1
            continue
        kind, sub = line.get("type"), payload.get("type")
        label = f"{kind}.{sub}" if isinstance(sub, str) else str(kind)
        if kind == "session_meta":
            session = payload.get("id") or payload.get("session_id")
            if isinstance(session, str) and session.strip():
                conv = conversation_id(HARNESS, session)
            else:
                counts.bad_lines += 1
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                model = payload["model"]
                if current is not None:
                    current.model = model
        elif label == "event_msg.task_started":
            if isinstance(payload.get("turn_id"), str) and payload["turn_id"].strip():
                if current is not None:  # a turn that never ended: no reply came
                    done = ended(current, "abandoned", current.said or "", "NoReply")
                    if done is not None:
                        yield done
                current = _Turn(turn_id(payload["turn_id"]), model=model)
            else:
                counts.bad_lines += 1
        elif label == "event_msg.item_completed" and current is not None:
            _item(current, payload.get("item"), counts)
        elif kind == "response_item" and sub in _CALLS and current is not None:
            name, call_id = payload.get("name"), payload.get("call_id")
            if isinstance(name, str) and name and isinstance(call_id, str) and call_id:
                args = _arguments(payload.get("arguments", payload.get("input")))
                current.calls.setdefault(
                    call_id, TranscriptCall(name, call_id, args, _timestamp(line))
                )
            else:
                counts.bad_lines += 1
        elif kind == "response_item" and sub in _OUTPUTS and current is not None:
            call = current.calls.get(str(payload.get("call_id")))
            if call is not None:
                call.result, call.ended_at = payload.get("output"), _timestamp(line)
        elif label == "event_msg.task_complete" and current is not None:
            reply, error = payload.get("last_agent_message"), payload.get("error")
            if isinstance(reply, str) and not error:
                done = ended(current, "completed", reply, None)
            else:
                detail = error.get("codex_error_info") if isinstance(error, dict) else None
                failed = _error_class("CodexError", detail) if error else "NoReply"
                done = ended(current, "abandoned", current.said or "", failed)
            current = None
            if done is not None:
                yield done
        elif label == "event_msg.turn_aborted" and current is not None:
            reason = payload.get("reason")
            why = "Interrupted" if reason == "interrupted" else _error_class("Aborted", reason)
            done = ended(current, "abandoned", current.said or "", why)
            current = None
            if done is not None:
                yield done
        else:
            counts.skipped[label] += 1
    if current is not None:
        counts.in_progress += 1


def _item(turn: _Turn, item: object, counts: ReadCounts) -> None:
    if not isinstance(item, dict):
        counts.bad_lines += 1
        return
    kind = item.get("type")
    if kind == "UserMessage":
        text = _text(item.get("content"), "text")
        if turn.user is None and text is not None:
            turn.user = text  # the prompt; a later message in the turn is steering
    elif kind == "AgentMessage":
        text = _text(item.get("content"), "Text")
        if text is not None:
            turn.said = text
    elif kind == "CommandExecution":
        call = turn.calls.get(str(item.get("id")))
        if call is None:
            return
        took = item.get("duration")
        if isinstance(took, dict) and all(isinstance(took.get(k), int) for k in ("secs", "nanos")):
            call.duration_ms = took["secs"] * 1000 + took["nanos"] / 1e6
        if item.get("status") == "failed":
            call.status = "error"
            code = item.get("exit_code")
            call.error_class = f"ExitCode{code}" if isinstance(code, int) else "CommandFailed"
    else:
        counts.skipped[f"event_msg.item_completed.{kind}"] += 1


def _timestamp(line: Mapping[str, Any]) -> str | None:
    value = line.get("timestamp")
    return value if isinstance(value, str) else None
