"""The Codex hooks on the inputs the real program sent (0.171.0, `tests/data/hooks/codex/`)."""

from __future__ import annotations

import json
import sqlite3
from functools import partial
from pathlib import Path

import pytest
from cli_support import cli
from hook_support import Hooks, history, recorded, seed, stored_tools, summary
from hook_support import session_of as _session_of

from neotoma_agent.hooks import HookState, harness_module

session_of = partial(_session_of, "codex")


def test_a_turn_is_stored_and_the_prompt_answered_with_context(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "codex")
    acme = seed(hooks.db, "company", name="Acme Corp", website="acme.com")
    outcomes = hooks.replay(recorded("codex", "completed"))
    answer = json.loads(outcomes[0].stdout or "{}")["hookSpecificOutput"]
    assert answer["hookEventName"] == "UserPromptSubmit"
    assert acme in answer["additionalContext"]
    assert summary(hooks.db, session_of("completed")) == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]


def test_a_command_is_a_tool_call_of_its_turn(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "codex")
    inputs = recorded("codex", "tool")
    hooks.replay(inputs)
    assert summary(hooks.db, session_of("tool")) == [
        ("Run echo hi", "The answer is hi.", "completed")
    ]
    sent = dict(inputs)["PostToolUse"]
    [call] = stored_tools(hooks.db, session_of("tool"))
    assert (call.name, call.status, call.call_id) == ("Bash", "ok", sent["tool_use_id"])
    assert (call.args, call.result) == ({"command": "echo hi"}, "hi\n")


@pytest.mark.parametrize("scenario", ["interrupted", "api_error"])
def test_a_turn_without_a_stop_is_abandoned_when_the_session_ends(
    scenario: str, tmp_path: Path
) -> None:
    hooks = Hooks(tmp_path, "codex")
    inputs = recorded("codex", scenario)
    # What Codex really sent: the prompt, then SessionEnd (no turn_id), no Stop.
    assert [event for event, _ in inputs] == ["UserPromptSubmit", "SessionEnd"]
    assert "turn_id" not in inputs[1][1]
    hooks.replay(inputs)
    [(_, reply, status)] = summary(hooks.db, session_of(scenario))
    assert (reply, status) == (None, "abandoned")


def test_two_prompts_of_one_session_are_two_turns(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "codex")
    hooks.replay(recorded("codex", "session"))
    assert summary(hooks.db, session_of("session")) == [
        ("Hello, I am Bob", "Hello Bob.", "completed"),
        ("Is Alice there?", "Alice is here too.", "completed"),
    ]


def test_install_registers_session_end_and_says_to_trust_the_hooks(tmp_path: Path) -> None:
    env = {"CODEX_HOME": str(tmp_path / "codex")}
    done = cli("hooks", "install", "codex", "--db", str(tmp_path / "m.db"), home=tmp_path, env=env)
    assert "added SessionEnd" in done.stdout
    assert "trust these hooks in Codex (/hooks)" in done.stdout
    hooks = json.loads((tmp_path / "codex" / "hooks.json").read_text())["hooks"]
    assert list(hooks) == list(harness_module("codex").EVENTS)
    assert "SessionEnd" in hooks
    state = str(tmp_path / "state.db")
    status = cli("hooks", "status", "codex", "--state", state, home=tmp_path, env=env)
    assert "Codex skips hooks until they are trusted in its /hooks" in status.stdout
    Hooks(tmp_path, "codex").replay(recorded("codex", "completed"))
    status = cli("hooks", "status", "codex", "--state", state, home=tmp_path, env=env)
    assert "trusted" not in status.stdout  # they fired: nothing to say


def test_a_session_end_the_harness_killed_is_delivered_by_the_next_prompt(
    tmp_path: Path,
) -> None:
    # Codex kills its SessionEnd hook as it exits after an interrupt (seen with 0.171.0):
    # the hook wrote the turn's end to the state file and died before the store.
    hooks = Hooks(tmp_path, "codex")
    interrupted = recorded("codex", "interrupted")
    hooks.replay(interrupted[:1])
    conv = session_of("interrupted")
    with HookState(hooks.state) as state:
        state.end_session(conv, "SessionEnded")
    assert [t.status for t in history(hooks.db, conv)] == ["open"]
    # Another session's prompt right away leaves it alone (its own session may be live).
    completed = recorded("codex", "completed")
    hooks.replay(completed[:1])
    assert [t.status for t in history(hooks.db, conv)] == ["open"]
    with sqlite3.connect(hooks.state) as db:
        db.execute(
            "UPDATE turns SET updated_at = updated_at - 60 WHERE conversation_id = ?", (conv,)
        )
    # Idle for a minute: the next prompt of any session delivers it.
    hooks.replay(recorded("codex", "session")[:1])
    assert summary(hooks.db, conv) == [("Tell me a long story", None, "abandoned")]
