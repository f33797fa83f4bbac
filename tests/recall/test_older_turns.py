"""Turns stored before tool calls and the Inspector's turn-record fields read as before.

``tests/data/v4_store`` was written by main at 962f6a5, before either landed: its turn
records have no ``harness``, ``started_at``, ``ended_at`` or ``tool_invocation_count``, and
no ``tool_invocation`` exists. What ``show`` printed of it then is :data:`SHOWN_THEN` (run
with that code on the same file); this release reads it the same way, with no tool calls.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, IdempotencyMismatchError, NeotomaMemory
from neotoma_agent.cli._show import load_transcript, render_transcript
from neotoma_agent.qa import audit
from neotoma_agent.reads import collect_stats

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

SHOWN_THEN = """\
conversation chat-v2: 2 turns

turn 1 [v2-turn-1] completed
  user: What about Acme Corp?
        refers to: Acme Corp (company)
  assistant: Reply 1.
             refers to: Acme Corp (company)

turn 2 [v2-turn-2] completed
  user: And Sprocket?
        refers to: Sprocket (widget)
  assistant: Reply 2.
             refers to: Sprocket (widget)
"""

#: the keys of a turn in ``show --json`` at 962f6a5
JSON_TURN_KEYS_THEN = {
    "abandoned",
    "error_class",
    "messages",
    "repaired",
    "status",
    "turn",
    "turn_id",
    "turn_record_id",
}


@pytest.fixture
def older(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v4_store" / "store.db", path)
    return path


async def test_an_older_stores_turns_read_as_before_with_no_tool_calls(older: Path) -> None:
    async with EmbeddedStore.open(older) as store:
        memory = NeotomaMemory(store, conversation_id="chat-v2", platform="fixture")
        history = await memory.history(limit=None)
        assert [(h.turn_id, h.user, h.reply, h.status) for h in history] == [
            ("v2-turn-1", "What about Acme Corp?", "Reply 1.", "completed"),
            ("v2-turn-2", "And Sprocket?", "Reply 2.", "completed"),
        ]
        assert [h.tools for h in history] == [(), ()]
        assert [await memory.tools(h.turn_id) for h in history] == [(), ()]

        transcript = await load_transcript(store, "chat-v2")
        out = io.StringIO()
        render_transcript(transcript, out)
        assert out.getvalue() == SHOWN_THEN
        for turn in transcript.to_json()["turns"]:
            assert set(turn) == JSON_TURN_KEYS_THEN | {"tools"}
            assert turn["tools"] == []

        stats = (await collect_stats(store)).to_json()
        assert (stats["tool_calls"], stats["tool_calls_by_tool"]) == (0, {})
        assert stats["turns_by_status"] == {"completed": stats["turns"]}
        assert (await audit(store, min_age=0)).clean


async def test_a_rerun_of_an_older_stores_turn_is_a_mismatch_as_the_changelog_says(
    older: Path,
) -> None:
    # CHANGELOG (Unreleased, Changed): the turn payloads carry the new turn-record fields, so a
    # re-run of a turn an earlier version stored is refused, not replayed; a revision is
    # the way to store it again.
    async with EmbeddedStore.open(older) as store:
        memory = NeotomaMemory(store, conversation_id="chat-v2", platform="fixture")
        with pytest.raises(IdempotencyMismatchError):
            async with memory.turn("What about Acme Corp?", turn_id="v2-turn-1") as t:
                t.reply = "Reply 1."
        async with memory.turn("What about Acme Corp?", turn_id="v2-turn-1", revision=2) as t:
            t.reply = "Reply 1."
        assert t.result.completed
        [first, _] = await memory.history(limit=None)
        assert (first.turn_id, first.reply) == ("v2-turn-1", "Reply 1.")
