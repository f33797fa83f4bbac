"""The one reader every harness's field table drives (``hooks/_input.py``).

Each harness declares its fields; these check that the table reads what the harness sends
(the recorded Claude Code inputs, the published Codex and Cursor shapes) into the event the
engine acts on, and that the rules of reading hold for all three: ids made safe for keys,
a missing or mistyped field refused by name, content never quoted.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hook_support import recorded

from neotoma_agent.hooks import BadInput, HookEvent, Kind, harness_module

CLAUDE = dict(recorded("claude-code", "tool"))
CLAUDE_FAILURE = dict(recorded("claude-code", "tool_failure"))


def parse(harness: str, event: str, payload: dict[str, Any]) -> HookEvent:
    return harness_module(harness).parse(event, payload)


def test_claude_code_events_read_from_the_recorded_inputs() -> None:
    prompt = parse("claude-code", "UserPromptSubmit", CLAUDE["UserPromptSubmit"])
    session = CLAUDE["UserPromptSubmit"]["session_id"]
    turn = CLAUDE["UserPromptSubmit"]["prompt_id"]
    assert (prompt.kind, prompt.conversation_id, prompt.turn_id) == (
        Kind.PROMPT,
        f"claude-code-{session}",
        turn,
    )
    assert prompt.prompt == CLAUDE["UserPromptSubmit"]["prompt"]

    used = parse("claude-code", "PostToolUse", CLAUDE["PostToolUse"])
    assert used.kind is Kind.TOOL
    assert used.turn_id == turn
    assert used.tool is not None
    assert used.tool["status"] == "ok"
    assert used.tool["call_id"] == CLAUDE["PostToolUse"]["tool_use_id"]

    stop = parse("claude-code", "Stop", CLAUDE["Stop"])
    assert (stop.kind, stop.reply) == (Kind.STOP, CLAUDE["Stop"]["last_assistant_message"])

    end = parse("claude-code", "SessionEnd", CLAUDE["SessionEnd"])
    assert (end.kind, end.error_class) == (Kind.SESSION_END, "SessionEnded")


def test_claude_code_failure_twin_and_interrupt() -> None:
    payload = CLAUDE_FAILURE["PostToolUseFailure"]
    failed = parse("claude-code", "PostToolUseFailure", payload)
    assert failed.tool is not None
    assert (failed.tool["status"], failed.tool["error_class"]) == ("error", "ToolError")
    assert failed.tool["result"] == payload["error"]  # the error text is the result

    interrupted = parse("claude-code", "PostToolUseFailure", {**payload, "is_interrupt": True})
    assert interrupted.tool is not None
    assert (interrupted.tool["status"], interrupted.tool["error_class"]) == (
        "cancelled",
        "Interrupted",
    )


def test_a_build_without_prompt_id_reads_as_the_sessions_latest_turn() -> None:
    payload = copy.deepcopy(CLAUDE["Stop"])
    del payload["prompt_id"]
    assert parse("claude-code", "Stop", payload).turn_id is None


def codex(event: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": "s-1", "turn_id": "t-1", "hook_event_name": event, **fields}


def test_codex_events() -> None:
    prompt = parse("codex", "UserPromptSubmit", codex("UserPromptSubmit", prompt="Hi", model="m"))
    assert (prompt.conversation_id, prompt.turn_id, prompt.model) == ("codex-s-1", "t-1", "m")

    tool = parse("codex", "PostToolUse", codex("PostToolUse", tool_name="shell", tool_response=1))
    assert tool.tool is not None
    assert tool.tool["status"] == "ok"

    stop = parse("codex", "Stop", codex("Stop", last_assistant_message=None))
    assert (stop.kind, stop.reply) == (Kind.STOP, "")

    rate = parse("codex", "StopFailure", codex("StopFailure", error="rate_limit"))
    assert (rate.kind, rate.error_class) == (Kind.FAILED, "StopFailure.rate_limit")
    odd = parse("codex", "StopFailure", codex("StopFailure", error="not a name"))
    assert odd.error_class == "StopFailure"


def test_codex_refuses_an_event_without_its_turn_id() -> None:
    payload = codex("Stop")
    del payload["turn_id"]
    with pytest.raises(BadInput, match="'turn_id' is missing"):
        parse("codex", "Stop", payload)
    # SessionEnd names no turn (recorded from Codex 0.171.0): it ends the session's.
    del payload["hook_event_name"]
    assert parse("codex", "SessionEnd", payload).kind is Kind.SESSION_END


def cursor(event: str, **fields: Any) -> dict[str, Any]:
    return {"conversation_id": "c-1", "generation_id": "g-1", "hook_event_name": event, **fields}


def test_cursor_events() -> None:
    reply = parse("cursor", "afterAgentResponse", cursor("afterAgentResponse", text="So far"))
    assert (reply.kind, reply.reply) == (Kind.REPLY, "So far")

    done = parse("cursor", "stop", cursor("stop", status="completed"))
    assert (done.kind, done.reply) == (Kind.STOP, None)  # the reply kept from before stands
    aborted = parse("cursor", "stop", cursor("stop", status="aborted"))
    assert (aborted.kind, aborted.error_class) == (Kind.FAILED, "Aborted")
    errored = parse("cursor", "stop", cursor("stop", status="error"))
    assert errored.error_class == "AgentError"

    failure = parse("cursor", "postToolUseFailure", cursor("postToolUseFailure", tool_name="x"))
    assert failure.tool is not None
    assert failure.tool["status"] == "error"

    end = parse("cursor", "sessionEnd", cursor("sessionEnd"))
    assert (end.kind, end.turn_id) == (Kind.SESSION_END, None)


def test_cursor_refuses_a_prompt_without_its_generation_but_not_a_reply() -> None:
    payload = cursor("beforeSubmitPrompt", prompt="Hi")
    del payload["generation_id"]
    with pytest.raises(BadInput, match="'generation_id' is missing"):
        parse("cursor", "beforeSubmitPrompt", payload)
    reply = cursor("afterAgentResponse", text="x")
    del reply["generation_id"]
    assert parse("cursor", "afterAgentResponse", reply).turn_id is None


@pytest.mark.parametrize(
    ("harness", "event", "payload", "field"),
    [
        ("claude-code", "UserPromptSubmit", {"session_id": 7, "prompt": "secret"}, "session_id"),
        ("claude-code", "UserPromptSubmit", {"session_id": "s", "prompt": 3}, "prompt"),
        (
            "codex",
            "Stop",
            codex("Stop", last_assistant_message=["secret"]),
            "last_assistant_message",
        ),
        ("cursor", "postToolUse", cursor("postToolUse", tool_name=None), "tool_name"),
        ("cursor", "stop", cursor("stop", status=1), "status"),
    ],
)
def test_a_wrong_field_is_refused_by_name_never_quoted(
    harness: str, event: str, payload: dict[str, Any], field: str
) -> None:
    with pytest.raises(BadInput, match=repr(field)) as caught:
        parse(harness, event, payload)
    assert "secret" not in str(caught.value)


def test_ids_holding_a_key_joiner_become_the_same_digest_everywhere() -> None:
    first = parse("codex", "Stop", {**codex("Stop"), "turn_id": "a:b"})
    again = parse("codex", "Stop", {**codex("Stop"), "turn_id": " a:b "})
    assert first.turn_id == again.turn_id
    assert first.turn_id is not None
    assert ":" not in first.turn_id


def test_every_table_names_its_events_in_firing_order() -> None:
    assert harness_module("claude-code").EVENTS == (
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUseFailure",
        "Stop",
        "StopFailure",
        "Interrupt",
        "SessionEnd",
    )
    assert harness_module("codex").EVENTS == (
        "UserPromptSubmit",
        "PostToolUse",
        "Stop",
        "StopFailure",
        "SessionEnd",
    )
    with pytest.raises(BadInput, match="not one neotoma-agent handles"):
        parse("cursor", "Stop", cursor("Stop"))


@pytest.mark.parametrize(
    ("value", "said"),
    [(3, "an int"), (["x"], "a list"), (1.5, "a float"), ({"a": 1}, "a dict"), (True, "a bool")],
)
def test_a_wrong_type_is_named_in_good_english(value: object, said: str) -> None:
    # session_id (a required field) and prompt_id (an optional one) word it the same way.
    for payload in ({"session_id": value, "prompt": "p"}, {"session_id": "s", "prompt_id": value}):
        with pytest.raises(BadInput, match=f"is {said}, not a string"):
            parse("claude-code", "UserPromptSubmit", {"prompt": "p", **payload})
