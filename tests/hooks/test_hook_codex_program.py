"""End to end: the real Codex program, our hooks installed by `hooks install codex`, the store.

Slow (a native program that takes a second or two a turn here) and skipped without one
(``$CODEX_PROGRAM``, or ``codex`` on ``PATH``: ``npm install @openai/codex``); ``nox -s
hooks`` installs it and runs this.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import structlog
from codex_program import CodexProject, codex_program
from fake_model_api import Call, FakeResponses, Hang, Text
from hook_support import history, observations, seed, stored_tools
from netns_support import available

from neotoma_agent.cli import main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(codex_program() is None, reason="no Codex program (npm @openai/codex)"),
]


@pytest.fixture(autouse=True)
def _network_namespace() -> None:
    # The program runs in a network namespace of its own (unshare -n), or not at all.
    reason = available()
    if reason is not None:
        pytest.skip(reason)


def sessions(events: list[dict[str, object]]) -> str:
    [thread] = [e["thread_id"] for e in events if e.get("type") == "thread.started"]
    return f"codex-{thread}"


def test_completed_tool_using_and_interrupted_turns_are_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = codex_program()
    assert program is not None
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    acme = seed(db, "company", name="Acme Corp", website="acme.com")
    script = [
        Text("Hello."),
        Text("Acme Corp is a customer of ours."),
        Call("exec_command", {"cmd": "echo hi"}, text="Checking."),
        Text("The answer is hi."),
        Hang("partial "),
        Text("Hi again."),
    ]
    with FakeResponses(script, isolated=True) as api:
        project = CodexProject(tmp_path / "codex", api, program)
        installed = project.neotoma(
            "hooks", "install", "codex", "--db", str(db), "--state", str(state)
        )
        assert "added SessionEnd" in installed.stdout
        assert "trust these hooks in Codex (/hooks)" in installed.stdout

        # Until the person trusts them in Codex's /hooks, Codex skips them, silently.
        untrusted = sessions(project.prompt("Hello", trusted=False))
        assert history(db, untrusted) == []

        first = sessions(project.prompt("What about Acme Corp?"))
        # The context block reached the model, in the shape Codex honours.
        assert acme in json.dumps(api.turn_requests[1]["input"])

        second = sessions(project.prompt("Run echo hi"))
        assert project.interrupted("Tell me a long story") != 0
        # Codex killed its SessionEnd hook as it exited: the turn's end waits in the state
        # file, and the next prompt of any session delivers it once it has waited a while.
        with sqlite3.connect(state) as held:
            held.execute("UPDATE turns SET updated_at = updated_at - 60")
        later = sessions(project.prompt("Hello again"))

    assert [(t.user, t.reply, t.status) for t in history(db, first)] == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]
    assert [(t.user, t.reply, t.status) for t in history(db, second)] == [
        ("Run echo hi", "The answer is hi.", "completed")
    ]
    [call] = stored_tools(db, second)
    assert (call.name, call.status, call.args) == ("Bash", "ok", {"command": "echo hi"})
    interrupted = [
        turn
        for rollout in project.rollouts()
        for turn in history(db, "codex-" + rollout.stem[-36:])
        if turn.user == "Tell me a long story"
    ]
    # No Stop came: the session's end closed the turn as abandoned.
    assert [t.status for t in interrupted] == ["abandoned"]
    assert [t.status for t in history(db, later)] == ["completed"]

    # Codex's own files imported: the sessions the hooks captured are already stored, the
    # one they never saw (untrusted) is stored now; a second import writes nothing.
    sessions_dir = project.codex_home / "sessions"
    command = ["import", "--from", "codex", str(sessions_dir), "--db", str(db)]
    assert main(command) == 0
    structlog.reset_defaults()
    out = capsys.readouterr().out
    assert "codex: 5 session files: 1 turns stored, 0 stored as abandoned (no reply), 4 " in out
    assert [(t.user, t.reply) for t in history(db, untrusted)] == [("Hello", "Hello.")]
    before = observations(db)
    assert main(command) == 0
    structlog.reset_defaults()
    assert "0 turns stored, 0 stored as abandoned (no reply), 5 already" in capsys.readouterr().out
    assert observations(db) == before


def test_project_hooks_run_only_in_a_project_codex_trusts(tmp_path: Path) -> None:
    program = codex_program()
    assert program is not None
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    with FakeResponses([Text("Hello."), Text("Hi again.")], isolated=True) as api:
        project = CodexProject(tmp_path / "codex", api, program)
        project.neotoma(
            "hooks", "install", "codex", "--scope", "project",
            "--db", str(db), "--state", str(state),
        )  # fmt: skip
        assert (project.project / ".codex" / "hooks.json").exists()
        assert not project.hooks_file().exists()
        # Even with the hooks' own trust bypassed, Codex reads no layer of an untrusted
        # project: the hooks in its .codex/hooks.json do not run.
        untrusted = sessions(project.prompt("Hello"))
        # Trusting the folder (what Codex asks when it first opens in it) turns them on.
        with (project.codex_home / "config.toml").open("a") as config:
            config.write(f'\n[projects."{project.project}"]\ntrust_level = "trusted"\n')
        trusted = sessions(project.prompt("Hello again"))
    assert history(db, untrusted) == []
    assert [(t.user, t.reply, t.status) for t in history(db, trusted)] == [
        ("Hello again", "Hi again.", "completed")
    ]
