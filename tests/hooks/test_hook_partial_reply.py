"""An abandoned turn keeps the partial reply the person saw, on every path.

No hook event carries the text a turn streamed before it was interrupted (or before the
model API failed): Claude Code and Codex send no Stop then. The hook that abandons the
turn (the session's end, or its next prompt) reads it from the harness's session file
(Claude Code's transcript, Codex's rollout), with the same reader ``import --from`` uses,
so both paths give one answer: the same reply, the same error class. An import completes
a turn the hooks stored without it, on the same keys. The fixtures are the real programs'
recordings (``tests/data/hooks/``).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hook_support import (
    Hooks,
    cli_logging,
    import_sessions,
    observations,
    reading_session_file,
    recorded,
    scenarios_with_files,
    session_file,
    session_of,
)

from neotoma_agent.cli._show import load_transcript
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["cli_logging"]

pytestmark = pytest.mark.usefixtures("cli_logging")  # main() configures its logging

HARNESSES = ("claude-code", "codex")
#: Claude Code 2.1.337 interrupted after one tool call and a few streamed words
INTERRUPTED = ("claude-code", "interrupted_tool")
PROMPT = "Check, then tell me a story"


def shown(db: Path, conversation_id: str) -> list[tuple[str, str | None, list[str]]]:
    """Each turn as ``show --json`` prints it: status, error class, message texts."""
    import asyncio

    async def read() -> list[tuple[str, str | None, list[str]]]:
        async with EmbeddedStore.open(db) as store:
            transcript = await load_transcript(store, conversation_id)
        return [
            (t.status, t.error_class, [m.content for m in t.messages]) for t in transcript.turns
        ]

    return asyncio.run(read())


def test_session_end_keeps_the_partial_reply_of_an_interrupted_turn(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, INTERRUPTED[0])
    hooks.replay(reading_session_file(*INTERRUPTED))
    assert shown(hooks.db, session_of(*INTERRUPTED)) == [
        ("abandoned", "Interrupted", [PROMPT, "partial "])
    ]


def test_the_next_prompt_keeps_the_partial_reply_of_an_interrupted_turn(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, INTERRUPTED[0])
    inputs = reading_session_file(*INTERRUPTED)
    assert inputs[-1][0] == "SessionEnd"
    hooks.replay(inputs[:-1])  # the session goes on: no SessionEnd
    (event, first), *_ = inputs
    following = copy.deepcopy(first)
    following["prompt_id"] = first["prompt_id"][:-4] + "beef"
    following["prompt"] = "Go on"
    hooks.replay([(event, following)])
    status, error, messages = shown(hooks.db, session_of(*INTERRUPTED))[0]
    assert (status, error, messages) == ("abandoned", "Interrupted", [PROMPT, "partial "])


@pytest.mark.parametrize(
    ("harness", "scenario"),
    [(h, s) for h in HARNESSES for s in scenarios_with_files(h)],
)
def test_the_hooks_and_import_give_one_answer(
    harness: str, scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Interrupted, a model API error, tool calls, completed: every recorded session.
    hooks = Hooks(tmp_path, harness)
    hooks.replay(reading_session_file(harness, scenario))
    imported = tmp_path / "imported.db"
    status, _ = import_sessions(harness, capsys, imported, session_file(harness, scenario))
    assert status == 0
    conv = session_of(harness, scenario)
    assert shown(hooks.db, conv) == shown(imported, conv)


def test_import_completes_the_partial_a_hook_could_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hooks = Hooks(tmp_path, INTERRUPTED[0])
    hooks.replay(recorded(*INTERRUPTED))  # the transcript it names is not on this machine
    conv = session_of(*INTERRUPTED)
    assert shown(hooks.db, conv) == [("abandoned", "SessionEnded", [PROMPT])]
    transcript = session_file(*INTERRUPTED)
    status, out = import_sessions(INTERRUPTED[0], capsys, hooks.db, transcript)
    assert status == 0
    assert "1 abandoned turns given the partial reply the file holds" in out
    # The same turn, on the same keys, now with what the person saw.
    assert shown(hooks.db, conv) == [("abandoned", "Interrupted", [PROMPT, "partial "])]
    before = observations(hooks.db)
    status, out = import_sessions(INTERRUPTED[0], capsys, hooks.db, transcript)
    assert "0 turns stored, 0 stored as abandoned (no reply), 1 already stored" in out
    assert observations(hooks.db) == before


#: Claude Code 2.1.337: a session whose first turn an app interrupted (Interrupt fires),
#: then a second prompt
APP_INTERRUPTED = ("claude-code", "interrupted_session")
STORY = "Once upon a time word1 word2 word3 "


def test_interrupt_abandons_the_turn_at_once_with_what_it_streamed(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, APP_INTERRUPTED[0])
    inputs = reading_session_file(*APP_INTERRUPTED)
    assert [event for event, _ in inputs[:2]] == ["UserPromptSubmit", "Interrupt"]
    hooks.replay(inputs[:2])  # no next prompt needed to close it
    assert shown(hooks.db, session_of(*APP_INTERRUPTED)) == [
        ("abandoned", "Interrupted", ["Tell me a long story", STORY])
    ]


def test_an_interrupt_that_comes_after_the_next_prompt_changes_nothing(tmp_path: Path) -> None:
    # Claude Code runs the Interrupt hook without waiting for it: the next prompt's hook
    # may run first, and has abandoned the turn (from the transcript) by then.
    inputs = reading_session_file(*APP_INTERRUPTED)
    in_order = Hooks(tmp_path / "in-order", APP_INTERRUPTED[0])
    (tmp_path / "in-order").mkdir()
    in_order.replay(inputs)
    late = Hooks(tmp_path / "late", APP_INTERRUPTED[0])
    (tmp_path / "late").mkdir()
    late.replay([inputs[0], inputs[2], inputs[1], *inputs[3:]])
    conv = session_of(*APP_INTERRUPTED)
    assert shown(late.db, conv) == shown(in_order.db, conv)
    assert shown(late.db, conv) == [
        ("abandoned", "Interrupted", ["Tell me a long story", STORY]),
        ("completed", None, ["Just end it", "Fine, the end."]),
    ]


def test_stop_failure_abandons_the_turn_without_the_program_error_text(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = reading_session_file("claude-code", "api_error")
    assert [event for event, _ in inputs[:2]] == ["UserPromptSubmit", "StopFailure"]
    assert inputs[1][1]["last_assistant_message"].startswith("API Error: 400")
    hooks.replay(inputs[:2])
    # The program's own "API Error: ..." is no reply of the model's (import agrees).
    assert shown(hooks.db, session_of("claude-code", "api_error")) == [
        ("abandoned", "APIError", ["Say something"])
    ]


def test_interrupt_waits_for_the_transcript_to_show_what_it_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Claude Code runs the Interrupt hook without waiting for it, at times before it has
    # written the streamed text: the hook reads the transcript again until it shows the
    # turn's end. Here the program writes it while the hook waits (its first pause).
    import json
    import time

    from neotoma_agent.hooks import _run

    full = session_file(*APP_INTERRUPTED).read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(full) if json.loads(line).get("type") == "user")
    live = tmp_path / "transcript.jsonl"
    live.write_text("".join(full[: first + 1]))  # the prompt only, as yet

    class Clock:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            live.write_text("".join(full))  # the program catches up

    monkeypatch.setattr(_run, "time", Clock)
    hooks = Hooks(tmp_path, APP_INTERRUPTED[0])
    inputs = [
        (event, {**payload, "transcript_path": str(live)})
        for event, payload in recorded(*APP_INTERRUPTED)
    ]
    hooks.replay(inputs[:2])
    assert shown(hooks.db, session_of(*APP_INTERRUPTED)) == [
        ("abandoned", "Interrupted", ["Tell me a long story", STORY])
    ]


def test_a_turn_whose_stop_was_lost_is_stored_completed_from_the_transcript(
    tmp_path: Path,
) -> None:
    # The Stop hook killed (or failing) before it recorded anything: the session's end
    # finds the turn completed in the transcript, with its reply.
    hooks = Hooks(tmp_path, "claude-code")
    inputs = reading_session_file("claude-code", "completed")
    assert [event for event, _ in inputs] == ["UserPromptSubmit", "Stop", "SessionEnd"]
    hooks.replay([inputs[0], inputs[2]])
    assert shown(hooks.db, session_of("claude-code", "completed")) == [
        ("completed", None, ["What about Acme Corp?", "Acme Corp is a customer of ours."])
    ]
