"""End to end: the real Claude Code program, our hooks installed by `hooks install`, the store.

Slow (the program is a 380 MB binary that takes a few seconds a turn here) and skipped
without ``claude-agent-sdk``; ``nox -s hooks`` (or ``pytest -m slow tests/hooks``) runs it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from claude_program import ClaudeProject, claude_program
from fake_model_api import Call, Fail, FakeAnthropic, Hang, Text
from hook_support import tool_invocations
from netns_support import available

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.cli._show import load_transcript

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(claude_program() is None, reason="claude-agent-sdk is not installed"),
]


@pytest.fixture(autouse=True)
def _network_namespace() -> None:
    # The program runs in a network namespace of its own (unshare -n), or not at all.
    reason = available()
    if reason is not None:
        pytest.skip(reason)


def history(db: Path, conversation_id: str) -> list[tuple[str, str | None, object]]:
    async def read() -> list[tuple[str, str | None, object]]:
        async with EmbeddedStore.open(db) as store:
            turns = await NeotomaMemory(store, conversation_id=conversation_id).history(None)
            return [(t.user, t.reply, getattr(t.status, "value", t.status)) for t in turns]

    return asyncio.run(read())


def seed(db: Path) -> str:
    async def write() -> str:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id="seed")
            return await memory.remember("company", name="Acme Corp", website="acme.com")

    return asyncio.run(write())


def sessions(state: Path) -> list[str]:
    with sqlite3.connect(state) as db:
        rows = db.execute("SELECT DISTINCT conversation_id FROM turns ORDER BY seq").fetchall()
    return [r[0] for r in rows]


def test_completed_tool_using_and_interrupted_turns_are_stored(tmp_path: Path) -> None:
    program = claude_program()
    assert program is not None
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    acme = seed(db)
    script = [
        Text("Acme Corp is a customer of ours."),
        Call("Bash", {"command": "echo hi", "description": "say hi"}, text="Checking."),
        Text("The answer is hi."),
        Hang("partial "),
    ]
    with FakeAnthropic(script, isolated=True) as api:
        project = ClaudeProject(tmp_path / "claude", api, program)
        installed = project.neotoma(
            "hooks", "install", "claude-code", "--scope", "project",
            "--db", str(db), "--state", str(state),
        )  # fmt: skip
        assert "added UserPromptSubmit" in installed.stdout

        first = project.prompt("What about Acme Corp?")
        # The context block reached the model, in the shape Claude Code honours.
        sent = str(api.turn_requests[0]["messages"])
        assert "UserPromptSubmit hook additional context" in sent
        assert acme in sent

        second = project.prompt("Run echo hi")
        assert second["result"] == "The answer is hi."
        project.interrupted("Tell me a long story")

    conv_first = f"claude-code-{first['session_id']}"
    conv_second = f"claude-code-{second['session_id']}"
    assert history(db, conv_first) == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]
    assert history(db, conv_second) == [("Run echo hi", "The answer is hi.", "completed")]
    [call] = tool_invocations(db)  # the Bash call the program really ran, from PostToolUse
    assert (call["tool_name"], call["result_status"]) == ("Bash", "ok")
    (conv_third,) = [c for c in sessions(state) if c not in (conv_first, conv_second)]
    # No Stop fires on an interrupt: the session's end abandons the turn, and says why
    # as the transcript does.
    [(user, _reply, status)] = history(db, conv_third)
    assert (user, status) == ("Tell me a long story", "abandoned")
    assert error_classes(db, conv_third) == ["Interrupted"]


def error_classes(db: Path, conversation_id: str) -> list[str | None]:
    async def read() -> list[str | None]:
        async with EmbeddedStore.open(db) as store:
            shown = await load_transcript(store, conversation_id)
        return [t.error_class for t in shown.turns]

    return asyncio.run(read())


def test_an_interrupted_turn_keeps_the_partial_reply_the_person_saw(tmp_path: Path) -> None:
    # Interrupted as an app interrupts a live session (Interrupt fires), mid-stream; then
    # an API failure (StopFailure fires) in a second session.
    program = claude_program()
    assert program is not None
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    story = "Once upon a time word1 word2 word3 "
    with FakeAnthropic([Hang(story), Text("Fine, the end.")], isolated=True) as api:
        project = ClaudeProject(tmp_path / "claude", api, program)
        project.neotoma(
            "hooks", "install", "claude-code", "--scope", "project",
            "--db", str(db), "--state", str(state),
        )  # fmt: skip
        results = project.session("Tell me a long story", "Just end it", interrupt_first=True)
        api.add(*[Fail(500, "boom")] * 3)
        project.extra_env["CLAUDE_CODE_MAX_RETRIES"] = "0"  # fail now, not after minutes
        failed = project.prompt("Say something", check=False)
    assert results[1]["result"] == "Fine, the end."
    (conv, conv_failed) = sessions(state)
    assert history(db, conv) == [
        ("Tell me a long story", story, "abandoned"),
        ("Just end it", "Fine, the end.", "completed"),
    ]
    assert error_classes(db, conv) == ["Interrupted", None]
    assert f"claude-code-{failed['session_id']}" == conv_failed
    # The program's own "API Error: ..." text is not stored as a reply.
    assert history(db, conv_failed) == [("Say something", None, "abandoned")]
    assert error_classes(db, conv_failed) == ["APIError.server_error"]


def test_a_session_of_two_prompts_is_two_paired_turns(tmp_path: Path) -> None:
    program = claude_program()
    assert program is not None
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    with FakeAnthropic([Text("Hello Bob."), Text("Alice is here too.")], isolated=True) as api:
        project = ClaudeProject(tmp_path / "claude", api, program)
        project.neotoma(
            "hooks", "install", "claude-code", "--scope", "project",
            "--db", str(db), "--state", str(state),
        )  # fmt: skip
        results = project.session("Hello, I am Bob", "Is Alice there?")
    assert [r["result"] for r in results] == ["Hello Bob.", "Alice is here too."]
    (conv,) = sessions(state)
    assert history(db, conv) == [
        ("Hello, I am Bob", "Hello Bob.", "completed"),
        ("Is Alice there?", "Alice is here too.", "completed"),
    ]


def test_a_hook_whose_command_line_went_wrong_does_not_block_the_prompt(tmp_path: Path) -> None:
    # An installed command an upgrade broke (an option renamed): Claude Code blocks the
    # prompt when a UserPromptSubmit hook exits 2, which is argparse's own status.
    program = claude_program()
    assert program is not None
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    with FakeAnthropic([Text("Hello.")], isolated=True) as api:
        project = ClaudeProject(tmp_path / "claude", api, program)
        project.neotoma(
            "hooks", "install", "claude-code", "--scope", "project",
            "--db", str(db), "--state", str(state),
        )  # fmt: skip
        settings = project.settings()
        [group] = settings["hooks"]["UserPromptSubmit"]
        group["hooks"][0]["command"] += " --option-of-another-release"
        project.write_settings(settings)
        result = project.prompt("Hi")
    assert result["result"] == "Hello."
    assert len(api.turn_requests) == 1  # the prompt reached the model
