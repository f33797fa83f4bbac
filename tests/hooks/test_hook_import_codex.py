"""`import --from codex`: the rollout files the real Codex program wrote, as the hooks' turns."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from hook_support import (
    Hooks,
    cli_logging,
    history,
    import_sessions,
    observations,
    reading_session_file,
    recorded,
    scenarios_with_files,
    session_files,
    stored_tools,
    summary,
)
from hook_support import session_of as _session_of

from neotoma_agent.cli import main

__all__ = ["cli_logging"]

pytestmark = pytest.mark.usefixtures("cli_logging")  # main() configures its logging

ROLLOUTS = session_files("codex")
SCENARIOS = scenarios_with_files("codex")
run_import = partial(import_sessions, "codex")
session_of = partial(_session_of, "codex")


def prompts(scenario: str) -> list[dict[str, object]]:
    return [p for e, p in recorded("codex", scenario) if e == "UserPromptSubmit"]


def test_turns_are_stored_with_the_ids_the_hooks_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, ROLLOUTS / "session" / "rollout.jsonl")
    assert status == 0
    assert "codex: 1 session files: 2 turns stored, 0 stored as abandoned" in out
    assert "response_item.message" in out  # what it skipped, counted by kind
    assert [t.turn_id for t in history(db, session_of("session"))] == [
        p["turn_id"] for p in prompts("session")
    ]
    assert summary(db, session_of("session")) == [
        ("Hello, I am Bob", "Hello Bob.", "completed"),
        ("Is Alice there?", "Alice is here too.", "completed"),
    ]


def test_tool_uses_become_tool_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "memory.db"
    run_import(capsys, db, ROLLOUTS / "tool" / "rollout.jsonl")
    run_import(capsys, db, ROLLOUTS / "tool_failure" / "rollout.jsonl")
    assert summary(db, session_of("tool")) == [("Run echo hi", "The answer is hi.", "completed")]
    hook = dict(recorded("codex", "tool"))["PostToolUse"]
    [call] = stored_tools(db, session_of("tool"))
    # The model's own tool name and arguments (the hook is told "Bash" and {"command"}).
    assert (call.name, call.status, call.call_id) == ("exec_command", "ok", hook["tool_use_id"])
    assert call.args == {"cmd": "echo hi"}
    assert "hi" in call.result
    assert call.duration_ms is not None
    [failed] = stored_tools(db, session_of("tool_failure"))
    assert (failed.status, failed.error_class) == ("error", "ExitCode3")


@pytest.mark.parametrize(
    ("scenario", "user", "error_class"),
    [
        ("interrupted", "Tell me a long story", "Interrupted"),
        ("api_error", "Say something", "CodexError.internal_server_error"),
    ],
)
def test_a_turn_without_a_reply_is_abandoned(
    scenario: str, user: str, error_class: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, ROLLOUTS / scenario / "rollout.jsonl")
    assert status == 0
    assert "0 turns stored, 1 stored as abandoned" in out
    assert summary(db, session_of(scenario)) == [(user, None, "abandoned")]
    assert main(["show", session_of(scenario), "--db", str(db), "--json"]) == 0
    [turn] = json.loads(capsys.readouterr().out)["turns"]
    assert turn["error_class"] == error_class


def test_a_running_turn_waits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (ROLLOUTS / "tool" / "rollout.jsonl").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if "function_call_output" in line)
    live = tmp_path / "rollout-live.jsonl"
    live.write_text("\n".join(lines[: cut + 1]) + "\n")
    db = tmp_path / "memory.db"
    _, out = run_import(capsys, db, live)
    assert "0 turns stored, 0 stored as abandoned (no reply), 0 already stored, 1 still " in out
    assert observations(db) == 0


def test_a_folder_imports_every_rollout_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, ROLLOUTS)
    assert status == 0
    assert out.startswith(f"codex: {len(SCENARIOS)} session files: 5 turns stored, 2 stored as ")
    before = observations(db)
    _, again = run_import(capsys, db, ROLLOUTS)
    assert "0 turns stored, 0 stored as abandoned (no reply), 7 already stored" in again
    assert observations(db) == before


def test_a_session_the_hooks_captured_writes_nothing_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for scenario in SCENARIOS:
        hooks = Hooks(tmp_path / scenario, "codex")
        (tmp_path / scenario).mkdir()
        # The hooks read the rollout their input names, as the real program's do.
        hooks.replay(reading_session_file("codex", scenario))
        before = observations(hooks.db)
        turns = len(history(hooks.db, session_of(scenario)))
        assert before, scenario
        assert turns, scenario
        status, out = run_import(capsys, hooks.db, ROLLOUTS / scenario / "rollout.jsonl")
        assert status == 0, scenario
        assert f"0 turns stored, 0 stored as abandoned (no reply), {turns} already" in out
        assert observations(hooks.db) == before, scenario


def test_a_turn_nobody_prompted_is_skipped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A compaction or a review runs as a turn with no prompt of the person's.
    lines = (ROLLOUTS / "completed" / "rollout.jsonl").read_text().splitlines()
    unprompted = tmp_path / "rollout-unprompted.jsonl"
    unprompted.write_text("\n".join(x for x in lines if '"UserMessage"' not in x) + "\n")
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, unprompted)
    assert status == 0
    assert "0 turns stored, 0 stored as abandoned" in out
    assert "1 turn without a prompt" in out
    assert observations(db) == 0
