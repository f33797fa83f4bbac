"""Claude Code's hooks, replayed from the inputs the real program sent (tests/data/hooks)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from pathlib import Path

import pytest
from hook_support import (
    Hooks,
    cli_logging,
    history,
    import_sessions,
    observations,
    recorded,
    seed,
    session_files,
    session_of,
    stored_tools,
    summary,
    tool_invocations,
)

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.cli import main
from neotoma_agent.hooks import HookState

__all__ = ["cli_logging"]


def test_a_completed_turn_is_paired_by_session_and_prompt_id(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "completed")
    prompt, stop = inputs[0][1], inputs[1][1]
    assert prompt["prompt_id"] == stop["prompt_id"]  # what the pairing rests on
    hooks.replay(inputs)
    conv = hooks.conversation(prompt["session_id"])
    assert summary(hooks.db, conv) == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]
    [turn] = history(hooks.db, conv)
    assert turn.turn_id == prompt["prompt_id"]


def test_the_prompt_answer_carries_the_context_in_the_nested_shape(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    acme = seed(hooks.db, "company", name="Acme Corp", website="acme.com")
    event, prompt = recorded("claude-code", "completed")[0]
    outcome = hooks.send(event, prompt)
    answer = json.loads(outcome.stdout or "null")
    # A bare top-level additionalContext is ignored by Claude Code: only this shape works.
    assert set(answer) == {"hookSpecificOutput"}
    inner = answer["hookSpecificOutput"]
    assert inner["hookEventName"] == "UserPromptSubmit"
    assert inner["additionalContext"].startswith("Known entities (best match first):")
    assert acme in inner["additionalContext"]
    assert hooks.send(event, prompt, context_chars=0).stdout is None  # nothing to say


def test_no_context_means_no_output(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    outcomes = hooks.replay(recorded("claude-code", "completed"))
    assert [o.stdout for o in outcomes] == [None, None, None]


def test_tool_calls_ride_on_the_closing_store(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "tool")
    assert [e for e, _ in inputs] == ["UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"]
    hooks.replay(inputs[:2])
    assert tool_invocations(hooks.db) == []  # kept in the state until the turn closes
    hooks.replay(inputs[2:])
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert summary(hooks.db, conv) == [("Run echo hi", "The answer is hi.", "completed")]
    [call] = tool_invocations(hooks.db)
    assert call["tool_name"] == "Bash"
    assert call["result_status"] == "ok"
    assert call["duration_ms"] == inputs[1][1]["duration_ms"]


def test_a_call_the_tool_call_api_refuses_is_left_out_at_the_close(tmp_path: Path) -> None:
    # A tool use is only kept (no check, no attrs: the commonest event stays cheap); the
    # API checks each call when the closing store is built and leaves out one it refuses.
    hooks = Hooks(tmp_path, "claude-code")
    prompt, used, stop, _ = recorded("claude-code", "tool")
    hooks.replay([prompt, used])
    bad = copy.deepcopy(used[1])
    bad["tool_use_id"] = "toolu_refused"
    bad["tool_name"] = " Bash "  # outer whitespace: the server would fold it into "Bash"
    bad["tool_input"] = {"command": "secret-command"}
    assert hooks.send("PostToolUse", bad).problem is None

    outcome = hooks.send(*stop)

    assert outcome.problem == ("stored; 1 tool call(s) left out: the tool-call API refused them")
    conv = hooks.conversation(prompt[1]["session_id"])
    assert summary(hooks.db, conv) == [("Run echo hi", "The answer is hi.", "completed")]
    [call] = tool_invocations(hooks.db)
    assert call["tool_name"] == "Bash"
    # The clock read at the tool use, in the API's stored form (milliseconds, UTC).
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", call["invoked_at"])


def test_a_failed_tool_is_recorded_as_an_error(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "tool_failure")
    assert inputs[1][0] == "PostToolUseFailure"
    hooks.replay(inputs)
    [call] = tool_invocations(hooks.db)
    assert (call["tool_name"], call["result_status"]) == ("Bash", "error")
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert summary(hooks.db, conv) == [("Run exit 3", "It failed.", "completed")]
    # The error text the failure twin sends is the call's result (not None).
    [stored] = stored_tools(hooks.db, conv)
    assert (stored.status, stored.error_class) == ("error", "ToolError")
    assert stored.result == inputs[1][1]["error"] == "Exit code 3"


def test_a_failed_tool_is_stored_as_import_stores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cli_logging: None
) -> None:
    # The same session captured by the hooks, and imported from its transcript into
    # another store: the failed call is the same call either way.
    hooks = Hooks(tmp_path, "claude-code")
    hooks.replay(recorded("claude-code", "tool_failure"))
    imported = tmp_path / "imported.db"
    transcript = session_files("claude-code") / "tool_failure" / "transcript.jsonl"
    assert import_sessions("claude-code", capsys, imported, transcript)[0] == 0
    conv = session_of("claude-code", "tool_failure")

    def call(db: Path) -> tuple[object, ...]:
        [c] = stored_tools(db, conv)
        return (c.name, c.call_id, c.status, c.error_class, c.args, c.result)

    assert call(hooks.db) == call(imported)


def test_an_interrupted_turn_is_abandoned_by_the_session_end(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "interrupted")
    assert [e for e, _ in inputs] == ["UserPromptSubmit", "SessionEnd"]  # no Stop
    hooks.replay(inputs[:1])
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert summary(hooks.db, conv) == [("Tell me a long story", None, "open")]
    hooks.replay(inputs[1:])
    assert summary(hooks.db, conv) == [("Tell me a long story", None, "abandoned")]


def test_an_interrupted_tool_using_turn_is_abandoned_with_its_calls(tmp_path: Path) -> None:
    # Interrupted after a tool ran: the call, kept in the state file by the PostToolUse
    # process, rides on the abandoning store that the SessionEnd process makes.
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "interrupted_tool")
    assert [e for e, _ in inputs] == ["UserPromptSubmit", "PostToolUse", "SessionEnd"]
    hooks.replay(inputs)
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert summary(hooks.db, conv) == [("Check, then tell me a story", None, "abandoned")]
    [call] = stored_tools(hooks.db, conv)
    assert (call.name, call.status, call.call_id) == ("Bash", "ok", inputs[1][1]["tool_use_id"])


@pytest.mark.usefixtures("cli_logging")  # main() configures its logging
def test_audit_finds_a_turn_the_hooks_left_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The prompt was stored, then nothing: the harness died before any Stop or SessionEnd.
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "interrupted")
    hooks.replay(inputs[:1])
    audit = ["audit", "--db", str(hooks.db), "--min-age", "0", "--json"]
    assert main(audit) == 1
    [found] = json.loads(capsys.readouterr().out)["remaining"]
    assert (found["kind"], found["turn_id"]) == ("orphan_turn", inputs[0][1]["prompt_id"])
    # The session's end abandons it: nothing is left for the audit.
    hooks.replay(inputs[1:])
    assert main(audit) == 0
    assert json.loads(capsys.readouterr().out)["remaining"] == []


def test_a_turn_without_stop_is_abandoned_by_the_next_prompt(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "session")
    events = [e for e, _ in inputs]
    assert events == ["UserPromptSubmit", "Stop", "UserPromptSubmit", "Stop", "SessionEnd"]
    first, second = inputs[0][1], inputs[2][1]
    assert first["session_id"] == second["session_id"]
    assert first["prompt_id"] != second["prompt_id"]
    hooks.replay([inputs[0], inputs[2], inputs[3]])  # the first turn's Stop never came
    conv = hooks.conversation(first["session_id"])
    assert summary(hooks.db, conv) == [
        ("Hello, I am Bob", None, "abandoned"),
        ("Is Alice there?", "Alice is here too.", "completed"),
    ]


def test_a_late_stop_completes_an_abandoned_turn(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "session")
    hooks.replay([inputs[0], inputs[2], inputs[1], inputs[3]])
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert summary(hooks.db, conv) == [
        ("Hello, I am Bob", "Hello Bob.", "completed"),
        ("Is Alice there?", "Alice is here too.", "completed"),
    ]


def test_a_stop_for_a_prompt_the_store_refused_stores_nothing(tmp_path: Path) -> None:
    # The store already holds this turn id with another prompt (a harness that reused
    # it): the prompt is refused for good, and its Stop must not pair with that prompt.
    hooks = Hooks(tmp_path, "claude-code")
    prompt, stop, end = recorded("claude-code", "completed")
    conv = hooks.conversation(prompt[1]["session_id"])

    async def store_other_prompt() -> None:
        async with EmbeddedStore.open(hooks.db) as store:
            memory = NeotomaMemory(store, conversation_id=conv, platform="claude-code")
            await memory.open_turn("Another prompt", turn_id=prompt[1]["prompt_id"])

    asyncio.run(store_other_prompt())
    before = observations(hooks.db)
    refused = hooks.send(*prompt).problem
    assert refused is not None
    assert refused.startswith("refused by the store, dropped: IdempotencyMismatchError")
    assert hooks.send(*stop).problem is None
    assert hooks.send(*end).problem is None
    assert observations(hooks.db) == before
    assert summary(hooks.db, conv) == [("Another prompt", None, "open")]


def test_a_repeated_stop_writes_nothing_new(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "completed")
    hooks.replay(inputs[:2])
    before = observations(hooks.db)
    again = hooks.send(*inputs[1])
    assert again.problem is None
    assert observations(hooks.db) == before
    # Even a Stop that repeats with other text (a continuation) keeps the first reply.
    other = copy.deepcopy(inputs[1][1])
    other["last_assistant_message"] = "Something else."
    other["stop_hook_active"] = True
    assert hooks.send("Stop", other).problem is None
    assert observations(hooks.db) == before
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert summary(hooks.db, conv)[0][1] == "Acme Corp is a customer of ours."


def test_a_repeated_prompt_replays(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    event, prompt = recorded("claude-code", "completed")[0]
    hooks.send(event, prompt)
    before = observations(hooks.db)
    assert hooks.send(event, prompt).problem is None
    assert observations(hooks.db) == before


def test_a_stop_for_a_prompt_never_seen_stores_nothing(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    stop = recorded("claude-code", "completed")[1]
    outcome = hooks.send(*stop)
    assert outcome.problem == "ignored: no prompt was recorded for this turn"
    assert outcome.stdout is None
    assert observations(hooks.db) == 0


def test_status_counts_what_fired(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    hooks.replay(recorded("claude-code", "tool"))
    with HookState(hooks.state) as state:
        fired = state.last_fired("claude-code")
        counts = state.counts("claude-code")
    assert {e: n for e, (_, n, _) in fired.items()} == {
        "UserPromptSubmit": 1,
        "PostToolUse": 1,
        "Stop": 1,
        "SessionEnd": 1,
    }
    assert counts == {"open": 0, "undelivered": 0, "done": 1}
