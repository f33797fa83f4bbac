"""Codex and Cursor hooks, from their published contracts.

Codex inputs here carry exactly the fields its generated schemas require
(``codex-rs/hooks/schema/generated/*.input.schema.json`` in openai/codex), for the events
the recordings of the real program lack (``StopFailure``, a null reply): the recorded
inputs are replayed in ``test_hook_codex_recorded.py``. Cursor inputs carry the fields its
hooks documentation lists: Cursor cannot run here, so none is a recording (see the module
docstring of ``neotoma_agent.hooks.cursor``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hook_support import Hooks, observations, seed, stored_tools, summary, tool_invocations

SESSION = "019a5e3c-7a2b-7c31-9d1e-4f0b2c6a8e11"


def codex(event: str, turn: str, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": SESSION,
        "turn_id": turn,
        "transcript_path": None,
        "cwd": "/work/project",
        "hook_event_name": event,
        "model": "gpt-5-codex",
        "permission_mode": "default",
        **fields,
    }


def cursor(event: str, generation: str | None, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "conversation_id": "c0ffee00-1111-4222-8333-444455556666",
        "hook_event_name": event,
        "workspace_roots": ["/work/project"],
        "model": "claude-4.5-sonnet",
        "cursor_version": "2.1.0",
    }
    if generation is not None:
        base["generation_id"] = generation
    return {**base, **fields}


def test_codex_pairs_prompt_and_stop_by_turn_id(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "codex")
    acme = seed(hooks.db, "company", name="Acme Corp")
    answer = hooks.send("UserPromptSubmit", codex("UserPromptSubmit", "t-1", prompt="Acme Corp?"))
    body = json.loads(answer.stdout or "{}")
    assert body["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert acme in body["hookSpecificOutput"]["additionalContext"]
    tool = codex(
        "PostToolUse",
        "t-1",
        tool_name="shell",
        tool_input={"command": ["ls"]},
        tool_response="README.md",
        tool_use_id="call_1",
    )
    assert json.loads(hooks.send("PostToolUse", tool).stdout or "") == {}
    stop = codex("Stop", "t-1", last_assistant_message="A customer.", stop_hook_active=False)
    assert json.loads(hooks.send("Stop", stop).stdout or "") == {}
    assert summary(hooks.db, f"codex-{SESSION}") == [("Acme Corp?", "A customer.", "completed")]
    [call] = tool_invocations(hooks.db)
    assert call["tool_name"] == "shell"


def test_codex_stop_failure_abandons_with_the_partial_reply(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "codex")
    hooks.send("UserPromptSubmit", codex("UserPromptSubmit", "t-1", prompt="Write a poem"))
    failed = codex(
        "StopFailure",
        "t-1",
        error="rate_limit",
        error_details=None,
        last_assistant_message="Roses are",
    )
    assert hooks.send("StopFailure", failed).problem is None
    assert summary(hooks.db, f"codex-{SESSION}") == [("Write a poem", "Roses are", "abandoned")]


def test_codex_null_reply_is_an_empty_reply(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "codex")
    hooks.send("UserPromptSubmit", codex("UserPromptSubmit", "t-1", prompt="Just do it"))
    hooks.send("Stop", codex("Stop", "t-1", last_assistant_message=None, stop_hook_active=False))
    assert summary(hooks.db, f"codex-{SESSION}") == [("Just do it", "", "completed")]


def test_cursor_pairs_by_generation_and_takes_the_reply_from_after_agent_response(
    tmp_path: Path,
) -> None:
    hooks = Hooks(tmp_path, "cursor")
    acme = seed(hooks.db, "company", name="Acme Corp")
    prompt = hooks.send(
        "beforeSubmitPrompt", cursor("beforeSubmitPrompt", "g-1", prompt="Acme Corp?")
    )
    # Cursor honours only `continue` here: the context cannot ride with the prompt.
    assert json.loads(prompt.stdout or "") == {"continue": True}
    tool = cursor(
        "postToolUse",
        "g-1",
        tool_name="Read",
        tool_input={"path": "a.txt"},
        tool_output="text",
        duration=12,
    )
    first = json.loads(hooks.send("postToolUse", tool).stdout or "")
    assert acme in first["additional_context"]  # the turn's first tool use carries it
    assert (
        json.loads(hooks.send("postToolUse", {**tool, "tool_input": {"path": "b"}}).stdout or "")
        == {}
    )
    hooks.send("afterAgentResponse", cursor("afterAgentResponse", "g-1", text="A customer."))
    assert (
        json.loads(
            hooks.send("stop", cursor("stop", "g-1", status="completed", loop_count=0)).stdout or ""
        )
        == {}
    )
    conv = "cursor-c0ffee00-1111-4222-8333-444455556666"
    assert summary(hooks.db, conv) == [("Acme Corp?", "A customer.", "completed")]
    assert sorted(c["tool_name"] for c in tool_invocations(hooks.db)) == ["Read", "Read"]


def test_cursor_aborted_stop_abandons_with_what_was_shown(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "cursor")
    hooks.send("beforeSubmitPrompt", cursor("beforeSubmitPrompt", "g-1", prompt="Long task"))
    hooks.send("afterAgentResponse", cursor("afterAgentResponse", "g-1", text="Step one"))
    hooks.send("stop", cursor("stop", "g-1", status="aborted", loop_count=0))
    conv = "cursor-c0ffee00-1111-4222-8333-444455556666"
    assert summary(hooks.db, conv) == [("Long task", "Step one", "abandoned")]


def test_cursor_session_end_abandons_the_open_turn(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "cursor")
    hooks.send("beforeSubmitPrompt", cursor("beforeSubmitPrompt", "g-1", prompt="Hello"))
    hooks.send("sessionEnd", cursor("sessionEnd", None, reason="window_closed"))
    conv = "cursor-c0ffee00-1111-4222-8333-444455556666"
    assert summary(hooks.db, conv) == [("Hello", None, "abandoned")]


CONV = {"codex": f"codex-{SESSION}", "cursor": "cursor-c0ffee00-1111-4222-8333-444455556666"}


def test_cursor_failed_tool_is_an_error_call_and_the_next_prompt_abandons_its_turn(
    tmp_path: Path,
) -> None:
    hooks = Hooks(tmp_path, "cursor")
    hooks.send("beforeSubmitPrompt", cursor("beforeSubmitPrompt", "g-1", prompt="One"))
    failed = cursor(
        "postToolUseFailure",
        "g-1",
        tool_name="Shell",
        tool_input={"command": "false"},
        tool_use_id="tu-1",
        error_message="exit 1",
        failure_type="error",
        duration=5,
    )
    assert hooks.send("postToolUseFailure", failed).problem is None
    # No stop for g-1 (Cursor was closed mid-turn, say): the next prompt abandons it.
    hooks.send("beforeSubmitPrompt", cursor("beforeSubmitPrompt", "g-2", prompt="Two"))
    hooks.send("afterAgentResponse", cursor("afterAgentResponse", "g-2", text="Done."))
    hooks.send("stop", cursor("stop", "g-2", status="completed", loop_count=0))
    assert summary(hooks.db, CONV["cursor"]) == [
        ("One", None, "abandoned"),
        ("Two", "Done.", "completed"),
    ]
    [call] = stored_tools(hooks.db, CONV["cursor"])
    assert (call.name, call.status, call.call_id) == ("Shell", "error", "tu-1")
    assert call.result == "exit 1"  # the failure's error_message


@pytest.mark.parametrize("harness", ["codex", "cursor"])
def test_a_repeated_stop_writes_nothing_new(harness: str, tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, harness)
    if harness == "codex":
        hooks.send("UserPromptSubmit", codex("UserPromptSubmit", "t-1", prompt="Hi"))
        stop = (
            "Stop",
            codex("Stop", "t-1", last_assistant_message="Hello.", stop_hook_active=False),
        )
        # A Stop hook that blocked makes Codex go on and stop again, with other text.
        again = ("Stop", {**stop[1], "last_assistant_message": "More.", "stop_hook_active": True})
    else:
        hooks.send("beforeSubmitPrompt", cursor("beforeSubmitPrompt", "g-1", prompt="Hi"))
        hooks.send("afterAgentResponse", cursor("afterAgentResponse", "g-1", text="Hello."))
        stop = ("stop", cursor("stop", "g-1", status="completed", loop_count=0))
        again = ("stop", {**stop[1], "loop_count": 1})
    assert hooks.send(*stop).problem is None
    before = observations(hooks.db)
    assert hooks.send(*stop).problem is None
    assert hooks.send(*again).problem is None
    assert observations(hooks.db) == before
    assert summary(hooks.db, CONV[harness]) == [("Hi", "Hello.", "completed")]


def test_a_failed_tools_error_text_is_capped_as_a_result_is(tmp_path: Path) -> None:
    from neotoma_agent._records.tool_payload import DEFAULT_TOOL_PAYLOAD_CHARS

    hooks = Hooks(tmp_path, "cursor")
    hooks.send("beforeSubmitPrompt", cursor("beforeSubmitPrompt", "g-1", prompt="One"))
    long_error = "E" * (DEFAULT_TOOL_PAYLOAD_CHARS * 2)
    failed = cursor(
        "postToolUseFailure", "g-1", tool_name="Shell", tool_input={}, error_message=long_error
    )
    assert hooks.send("postToolUseFailure", failed).problem is None
    hooks.send("stop", cursor("stop", "g-1", status="completed", loop_count=0))
    [call] = stored_tools(hooks.db, CONV["cursor"])
    assert call.status == "error"
    assert call.result_chars == len(json.dumps(long_error))  # counted as JSON text
    assert isinstance(call.result, str)
    assert call.result.startswith('"EEE')
    assert call.result.endswith("…[+4098 chars]")
