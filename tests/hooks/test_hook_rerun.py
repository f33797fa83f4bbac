"""A Stop for a re-run of a turn whose tool calls ran again closes it on the store file as
the engine's close does: the hook's synchronous driver answers the turn machine's read of
the calls stored before (``ToolObservations``), so the closing store takes their clock
readings and replays, instead of ending as a mismatch. A call that differs otherwise still
does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hook_support import tool_invocations

from neotoma_agent import EmbeddedStore, IdempotencyMismatchError, ToolCall
from neotoma_agent.hooks import _embedded, _embedded_open
from neotoma_agent.hooks._core import turn_file
from neotoma_agent.hooks._state import PendingTurn

ARGS: dict[str, Any] = {"args": {"command": "ls"}, "result": "a.txt", "call_id": "toolu_1"}
FIRST = ToolCall.create("Bash", invoked_at="2026-12-01T10:00:01.000Z", duration_ms=5, **ARGS)
#: the same call, run again later and for another while
AGAIN = ToolCall.create("Bash", invoked_at="2026-12-01T10:07:00.000Z", duration_ms=9, **ARGS)


def row(**changes: Any) -> PendingTurn:
    turn = PendingTurn(
        conversation_id="claude-code:session-1",
        turn_id="prompt-1",
        harness="claude-code",
        user_message="list the files",
        phase="pending",
        ending=None,
        reply=None,
        error_class=None,
        user_message_id=None,
        retrieved_ids=None,
        context=None,
        context_sent=False,
    )
    return turn._replace(**changes)


async def _create(db: Path) -> None:
    async with EmbeddedStore.open(db):
        pass


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    anyio.run(_create, path)
    return path


def close(db: Path, ending: str, tools: list[ToolCall], **changes: Any) -> None:
    """Open the turn (again: a replay) and close it as a Stop does, on the store file."""
    with turn_file(str(db), busy_timeout=5) as file:
        opened = _embedded_open.open_turn(file, "claude-code", row(), 2000)
        closing = row(
            phase="open",
            ending=ending,
            user_message_id=opened.user_message_id,
            retrieved_ids=opened.retrieved_ids,
            **changes,
        )
        _embedded.close(file, "claude-code", closing, tools)


def stored_calls(db: Path) -> list[tuple[Any, Any]]:
    """Each stored call's clock readings."""
    return [(c["invoked_at"], c["duration_ms"]) for c in tool_invocations(db)]


@pytest.mark.parametrize(
    ("ending", "changes"),
    [("completed", {"reply": "a.txt"}), ("abandoned", {"reply": "a.t", "error_class": "Stop"})],
)
def test_a_rerun_whose_calls_ran_again_replays_with_the_stored_readings(
    db: Path, ending: str, changes: dict[str, Any]
) -> None:
    close(db, ending, [FIRST], **changes)
    close(db, ending, [AGAIN], **changes)  # a mismatch without the read of the stored calls
    assert stored_calls(db) == [(FIRST.invoked_at, FIRST.duration_ms)]


def test_a_rerun_whose_calls_differ_keeps_the_mismatch(db: Path) -> None:
    close(db, "completed", [FIRST], reply="a.txt")
    other = ToolCall.create(
        "Bash", invoked_at=AGAIN.invoked_at, duration_ms=9, **{**ARGS, "result": "b.txt"}
    )
    with pytest.raises(IdempotencyMismatchError):
        close(db, "completed", [other], reply="a.txt")
    assert stored_calls(db) == [(FIRST.invoked_at, FIRST.duration_ms)]
