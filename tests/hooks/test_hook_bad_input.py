"""Bad hook input is reported in one line and ignored: exit 0, nothing stored, nothing lost."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog
from hook_support import (
    Hooks,
    finish,
    hook_process,
    observations,
    recorded,
    stored_tools,
    summary,
)

from neotoma_agent.cli import main
from neotoma_agent.hooks import StoreSpec, run_hook
from neotoma_agent.hooks._run import MAX_INPUT_BYTES

PROMPT: tuple[str, dict[str, Any]] = recorded("claude-code", "completed")[0]
STOP: tuple[str, dict[str, Any]] = recorded("claude-code", "completed")[1]
SECRET = "my-secret-prompt-text"


def changed(**fields: Any) -> dict[str, Any]:
    payload = copy.deepcopy(PROMPT[1])
    for key, value in fields.items():
        if value is ...:
            payload.pop(key)
        else:
            payload[key] = value
    return payload


BAD: dict[str, bytes] = {
    "empty": b"",
    "blank": b"  \n",
    "not JSON": b"{not json",
    "a list": b"[1, 2]",
    "a string": json.dumps(SECRET).encode(),
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "invalid UTF-8": b'{"session_id": "\xff\xfe"}',
    "prompt a number": json.dumps(changed(prompt=42)).encode(),
    "no session": json.dumps(changed(session_id=...)).encode(),
    "session a dict": json.dumps(changed(session_id={"id": SECRET})).encode(),
    "renamed fields": json.dumps(
        {"sessionId": "abc", "promptId": "p", "userPrompt": SECRET}
    ).encode(),
}


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("not JSON", "stdin is not JSON"),
        ("deep nesting", "stdin is not JSON"),
        ("a list", "stdin is a JSON list, not an object"),
        ("a string", "stdin is a JSON str, not an object"),
    ],
)
def test_input_that_is_no_json_object_says_what_it_is(tmp_path: Path, name: str, says: str) -> None:
    outcome = Hooks(tmp_path, "claude-code").send("UserPromptSubmit", BAD[name])
    assert outcome.problem == f"input ignored: {says}"


@pytest.mark.parametrize("raw", BAD.values(), ids=BAD.keys())
def test_bad_input_is_ignored_and_loses_nothing(tmp_path: Path, raw: bytes) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    hooks.replay(recorded("claude-code", "completed"))  # something stored before
    conv = hooks.conversation(PROMPT[1]["session_id"])
    before, stored = observations(hooks.db), summary(hooks.db, conv)
    outcome = hooks.send("UserPromptSubmit", raw)
    assert outcome.problem is not None
    assert outcome.problem.startswith("input ignored: ")
    assert SECRET not in outcome.problem
    assert outcome.stdout is None  # Claude Code's neutral answer: nothing
    assert observations(hooks.db) == before
    assert summary(hooks.db, conv) == stored


def test_bad_input_mid_turn_keeps_the_open_turn_and_its_calls(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    prompt, used, stop, end = recorded("claude-code", "tool")
    hooks.replay([prompt, used])
    wrong_tool = json.dumps({**used[1], "tool_name": 7}).encode()
    wrong_stop = json.dumps({**stop[1], "last_assistant_message": [SECRET]}).encode()
    for event, raw in [
        ("PostToolUse", b""),
        ("PostToolUse", b"{not json"),
        ("PostToolUse", wrong_tool),
        ("Stop", b""),
        ("Stop", b"{not json"),
        ("Stop", wrong_stop),
    ]:
        outcome = hooks.send(event, raw)
        assert outcome.problem is not None
        assert outcome.problem.startswith("input ignored: ")
        assert SECRET not in outcome.problem
    conv = hooks.conversation(prompt[1]["session_id"])
    assert summary(hooks.db, conv) == [("Run echo hi", None, "open")]  # not ended by them
    hooks.replay([stop, end])  # the real Stop still completes the turn, with its one call
    assert summary(hooks.db, conv) == [("Run echo hi", "The answer is hi.", "completed")]
    [call] = stored_tools(hooks.db, conv)
    assert call.call_id == used[1]["tool_use_id"]


def test_an_unknown_event_is_ignored(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    outcome = hooks.send("PreCompact", PROMPT[1])
    assert outcome.problem == (
        "input ignored: event 'PreCompact' is not one neotoma-agent handles for claude-code"
    )
    assert observations(hooks.db) == 0


def test_a_huge_input_is_refused_whole(tmp_path: Path) -> None:
    raw = json.dumps(changed(prompt="x" * (MAX_INPUT_BYTES + 1))).encode()
    outcome = run_hook(
        "claude-code",
        "UserPromptSubmit",
        raw,
        store=Hooks(tmp_path, "claude-code").store,
        state_path=tmp_path / "state.db",
    )
    assert outcome.problem == "input ignored: input is larger than 32 MiB"
    assert not (tmp_path / "memory.db").exists()


def test_half_a_character_is_refused_and_does_not_block_the_session(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    # A lone surrogate is valid JSON but not storable text.
    bad = changed(prompt="half \ud800 a character")
    outcome = hooks.send("UserPromptSubmit", bad)
    assert outcome.problem == (
        "input ignored: field 'prompt' is not well-formed text (a lone surrogate)"
    )
    good = recorded("claude-code", "session")
    hooks.replay(good[:2])
    conv = hooks.conversation(good[0][1]["session_id"])
    assert summary(hooks.db, conv) == [("Hello, I am Bob", "Hello Bob.", "completed")]


def test_the_command_exits_0_with_one_line_on_stderr(tmp_path: Path) -> None:
    proc = hook_process(
        "claude-code",
        "UserPromptSubmit",
        b"{not json " + SECRET.encode(),
        db=tmp_path / "memory.db",
        state=tmp_path / "state.db",
    )
    status, out, err = finish(proc)
    assert status == 0
    assert out == b""
    lines = err.decode().splitlines()
    assert lines == [
        "neotoma-agent hook claude-code UserPromptSubmit: input ignored: stdin is not JSON"
    ]


def test_a_command_line_mistake_exits_0_with_one_line_on_stderr(tmp_path: Path) -> None:
    # An installed command an upgrade made wrong: argparse's status 2 would block the
    # prompt in Claude Code and Codex.
    for extra in [("--no-such-option",), ("--timeout", "soon")]:
        proc = hook_process(
            "claude-code",
            "UserPromptSubmit",
            json.dumps(PROMPT[1]).encode(),
            db=tmp_path / "memory.db",
            state=tmp_path / "state.db",
            extra=extra,
        )
        status, out, err = finish(proc)
        assert (status, out) == (0, b"")
        [line] = err.decode().splitlines()
        assert line.startswith("neotoma-agent hook: command line ignored: ")
        assert extra[-1] in line
    assert not (tmp_path / "memory.db").exists()


def test_no_stdin_at_all_reads_as_empty(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "neotoma_agent", "hook", "claude-code", "Stop",
         "--db", str(tmp_path / "memory.db"), "--state", str(tmp_path / "state.db")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        preexec_fn=lambda: os.close(0),  # the descriptor closed, not an empty pipe
        check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert proc.stderr.decode().splitlines() == [
        "neotoma-agent hook claude-code Stop: input ignored: stdin is empty"
    ]


def test_an_unknown_harness_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"{}")))
    try:
        assert main(["hook", "vim", "Stop", "--state", str(tmp_path / "state.db")]) == 0
    finally:
        structlog.reset_defaults()  # main() configured the command line's logging
    err = capsys.readouterr().err
    assert err.startswith("neotoma-agent hook vim Stop: unknown harness")
    assert len(err.splitlines()) == 1


def test_a_broken_store_file_keeps_the_turns_until_it_is_fixed(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    hooks.db.write_text("not a database")
    for event in recorded("claude-code", "completed")[:2]:
        outcome = hooks.send(*event)
        assert outcome.problem == (
            f"failed: WrongFileKind: {hooks.db} is not a neotoma-agent store "
            "(not a SQLite database); it was left as it is"
        )
    hooks.db.unlink()  # the person fixes the store: the next event delivers everything
    assert hooks.send(*recorded("claude-code", "completed")[2]).problem is None
    conv = hooks.conversation(PROMPT[1]["session_id"])
    assert summary(hooks.db, conv) == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]


def test_a_store_spec_never_shows_its_token() -> None:
    spec = StoreSpec(url="http://127.0.0.1:9", token="tok-secret", outbox=Path("o.db"))
    assert "tok-secret" not in repr(spec)
    assert "tok-secret" not in str(spec)
    assert spec.token == "tok-secret"
