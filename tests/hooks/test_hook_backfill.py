"""`import --from claude-code`: the transcripts the real program wrote, as the hooks' turns."""

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

TRANSCRIPTS = session_files("claude-code")
SCENARIOS = scenarios_with_files("claude-code")
run_import = partial(import_sessions, "claude-code")
session_of = partial(_session_of, "claude-code")


def test_a_session_is_stored_with_the_ids_the_hooks_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, TRANSCRIPTS / "session" / "transcript.jsonl")
    assert status == 0
    assert "1 session files: 2 turns stored, 0 stored as abandoned" in out
    assert "attachment" in out  # what it skipped, counted by kind
    inputs = recorded("claude-code", "session")
    assert [t.turn_id for t in history(db, session_of("session"))] == [
        payload["prompt_id"] for event, payload in inputs if event == "UserPromptSubmit"
    ]
    assert summary(db, session_of("session")) == [
        ("Hello, I am Bob", "Hello Bob.", "completed"),
        ("Is Alice there?", "Alice is here too.", "completed"),
    ]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_session_the_hooks_captured_writes_nothing_new(
    scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    # The hooks read the transcript their input names, as the real program's do.
    hooks.replay(reading_session_file("claude-code", scenario))
    before = observations(hooks.db)
    turns = len(history(hooks.db, session_of(scenario)))
    assert before
    assert turns
    transcript = TRANSCRIPTS / scenario / "transcript.jsonl"
    status, out = run_import(capsys, hooks.db, transcript)
    assert status == 0
    assert f"0 turns stored, 0 stored as abandoned (no reply), {turns} already stored" in out
    assert observations(hooks.db) == before


def test_tool_uses_become_tool_calls_as_the_hook_records_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    run_import(capsys, db, TRANSCRIPTS / "tool" / "transcript.jsonl")
    # The reply is the last text block, as the Stop hook's last_assistant_message is.
    assert summary(db, session_of("tool")) == [("Run echo hi", "The answer is hi.", "completed")]
    hook = dict(recorded("claude-code", "tool"))["PostToolUse"]
    [call] = stored_tools(db, session_of("tool"))
    assert (call.name, call.status, call.call_id) == ("Bash", "ok", hook["tool_use_id"])
    assert call.args == hook["tool_input"]
    assert call.result == hook["tool_response"]
    assert call.duration_ms is not None
    assert call.duration_ms > 0


def test_a_failed_tool_is_an_error_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "memory.db"
    run_import(capsys, db, TRANSCRIPTS / "tool_failure" / "transcript.jsonl")
    [call] = stored_tools(db, session_of("tool_failure"))
    assert (call.name, call.status, call.error_class) == ("Bash", "error", "ToolError")


def test_an_interrupted_turn_is_abandoned_with_its_partial_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, TRANSCRIPTS / "interrupted_tool" / "transcript.jsonl")
    assert status == 0
    assert "0 turns stored, 1 stored as abandoned" in out
    [turn] = history(db, session_of("interrupted_tool"))
    # What was streamed when the person pressed Esc: the reply in progress, not the text
    # said before the tool call.
    assert (turn.status, turn.user, turn.reply) == (
        "abandoned",
        "Check, then tell me a story",
        "partial ",
    )
    [call] = stored_tools(db, session_of("interrupted_tool"))
    assert (call.name, call.status) == ("Bash", "ok")  # it ran before the interrupt
    # Nothing streamed at all: abandoned with no reply.
    run_import(capsys, db, TRANSCRIPTS / "interrupted" / "transcript.jsonl")
    assert summary(db, session_of("interrupted")) == [("Tell me a long story", None, "abandoned")]


def test_a_model_api_error_is_an_abandoned_turn_not_a_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, TRANSCRIPTS / "api_error" / "transcript.jsonl")
    assert status == 0
    assert "0 turns stored, 1 stored as abandoned" in out
    # The program's "API Error: 400 ..." line is not the model's reply.
    assert summary(db, session_of("api_error")) == [("Say something", None, "abandoned")]
    assert main(["show", session_of("api_error"), "--db", str(db), "--json"]) == 0
    [turn] = json.loads(capsys.readouterr().out)["turns"]
    assert turn["error_class"] == "APIError"


def test_a_turn_the_hooks_left_open_is_closed_from_the_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The prompt reached the hooks, the Stop never did (hooks removed mid-turn, say).
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "completed")
    hooks.replay([e for e in inputs if e[0] == "UserPromptSubmit"])
    assert [t.status for t in history(hooks.db, session_of("completed"))] == ["open"]
    _, out = run_import(capsys, hooks.db, TRANSCRIPTS / "completed" / "transcript.jsonl")
    assert "1 turns stored" in out
    assert summary(hooks.db, session_of("completed")) == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]


def test_the_last_turn_of_a_live_session_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The file as it stood while the tool ran: the turn has no reply yet.
    lines = (TRANSCRIPTS / "tool" / "transcript.jsonl").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if '"tool_result"' in line)
    live = tmp_path / "live.jsonl"
    live.write_text("\n".join(lines[: cut + 1]) + "\n")
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, live)
    assert status == 0
    assert "0 already stored, 1 still running (not stored)" in out
    assert observations(db) == 0
    _, out = run_import(capsys, db, TRANSCRIPTS / "tool" / "transcript.jsonl")
    assert "1 turns stored" in out


def test_unknown_kinds_are_counted_and_bad_lines_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (TRANSCRIPTS / "completed" / "transcript.jsonl").read_text().splitlines()
    lines[1:1] = [json.dumps({"type": "hologram", "sessionId": "x"}), "not json", "[1, 2]"]
    odd = tmp_path / "odd.jsonl"
    odd.write_text("\n".join(lines) + "\n")
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, odd)
    assert status == 1  # some lines could not be read
    assert "1 turns stored" in out  # the rest was
    assert "2 unreadable lines" in out
    assert "1 hologram" in out


def test_a_folder_imports_every_session_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, TRANSCRIPTS)
    assert status == 0
    files = len(SCENARIOS)
    assert out.startswith(f"claude-code: {files} session files: 6 turns stored, 4 stored as ")
    before = observations(db)
    _, again = run_import(capsys, db, TRANSCRIPTS)
    assert f"{files} session files: 0 turns stored, 0 stored as abandoned (no reply), 10 " in again
    assert observations(db) == before


def test_a_missing_path_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["import", "--from", "claude-code", str(tmp_path / "nope"), "--db", "x.db"])
    assert status != 0
    assert "not found" in capsys.readouterr().err
