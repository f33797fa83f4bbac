"""`import --from claude-code`: the transcripts the real program wrote, as the hooks' turns."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
from hook_support import DATA, Hooks, observations, recorded, summary

from neotoma_agent.cli import main

TRANSCRIPTS = DATA / "claude_code"


@pytest.fixture(autouse=True)
def _cli_logging() -> object:
    yield
    structlog.reset_defaults()  # main() configures the command line's logging


def run_import(capsys: pytest.CaptureFixture[str], db: Path, path: Path) -> tuple[int, str]:
    status = main(["import", "--from", "claude-code", str(path), "--db", str(db)])
    return status, capsys.readouterr().out


def test_a_session_is_stored_with_the_ids_the_hooks_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, TRANSCRIPTS / "session" / "transcript.jsonl")
    assert status == 0
    assert "2 turns stored, 0 already stored" in out
    assert "attachment" in out  # what it skipped, counted by kind
    first = recorded("claude-code", "session")[0][1]
    conv = f"claude-code-{first['session_id']}"
    assert summary(db, conv) == [
        ("Hello, I am Bob", "Hello Bob.", "completed"),
        ("Is Alice there?", "Alice is here too.", "completed"),
    ]


def test_a_session_the_hooks_captured_writes_nothing_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    hooks.replay(recorded("claude-code", "session"))
    before = observations(hooks.db)
    status, out = run_import(capsys, hooks.db, TRANSCRIPTS / "session" / "transcript.jsonl")
    assert status == 0
    assert "0 turns stored, 2 already stored" in out
    assert observations(hooks.db) == before


def test_the_reply_is_the_last_text_as_the_stop_hook_has_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    run_import(capsys, db, TRANSCRIPTS / "tool" / "transcript.jsonl")
    session = recorded("claude-code", "tool")[0][1]["session_id"]
    assert summary(db, f"claude-code-{session}") == [
        ("Run echo hi", "The answer is hi.", "completed")
    ]


def test_a_folder_of_transcripts_and_an_interrupted_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    status, out = run_import(capsys, db, TRANSCRIPTS)
    assert status == 0
    assert out.startswith("5 transcript files: 5 turns stored, 0 already stored, ")
    assert "1 without a reply (not stored)" in out  # the interrupted turn
    _, again = run_import(capsys, db, TRANSCRIPTS)
    assert "0 turns stored, 5 already stored" in again
