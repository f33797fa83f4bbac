"""A store file another process holds locked never holds the harness.

Every event answers within its ``--timeout`` (plus the process's start), exits 0, and what
it could not write is delivered by a later event once the lock is gone: nothing lost,
nothing stored twice. Real processes on both sides: the hooks as the harness runs them,
and a second process holding ``BEGIN EXCLUSIVE`` on the store file.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hook_support import finish, hook_process, observations, recorded, stored_tools, summary
from paths_support import TESTS

from neotoma_agent import EmbeddedStore

TOOL = recorded("claude-code", "tool")
#: the hooks' budget here, and the bound each answer must keep: the budget, plus a
#: process's start on a loaded machine; SQLite's own lock wait (10 s) is well past it
BUDGET = 1.0
WITHIN = 8.0


@contextmanager
def locked(db: Path) -> Iterator[None]:
    """Another process holds the store file's write lock until the block ends."""
    child = subprocess.Popen(
        [sys.executable, str(TESTS / "hooks" / "store_lock_child.py"), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    assert child.stdin is not None
    try:
        assert child.stdout.readline() == b"locked\n"
        yield
    finally:
        child.stdin.close()
        child.stdout.close()
        child.wait(30)


def _new_store(db: Path) -> None:
    async def create() -> None:
        async with EmbeddedStore.open(db):
            pass

    asyncio.run(create())


# Four events each waiting out the budget in a fresh process: seconds, not the default
# budget's few hundred milliseconds.
@pytest.mark.budget(90)
@pytest.mark.parametrize("engine", [False, True], ids=["embedded", "engine"])
def test_every_event_answers_within_its_budget_while_the_store_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: bool
) -> None:
    if engine:  # every store through the turn engine, as a server's would go
        monkeypatch.setenv("NEOTOMA_AGENT_HOOK_ENGINE", "1")
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    _new_store(db)
    conv = f"claude-code-{TOOL[0][1]['session_id']}"
    with locked(db):
        for event, payload in TOOL:
            started = time.monotonic()
            proc = hook_process(
                "claude-code",
                event,
                json.dumps(payload).encode(),
                db=db,
                state=state,
                extra=("--timeout", f"{BUDGET:g}"),
            )
            status, _, err = finish(proc)
            took = time.monotonic() - started
            assert status == 0, (event, err)
            assert took < WITHIN, (event, took)
    assert summary(db, conv) == []  # nothing could be written meanwhile
    # The lock is gone: the next event (a repeated SessionEnd) delivers everything.
    end_event, end = TOOL[-1]
    proc = hook_process("claude-code", end_event, json.dumps(end).encode(), db=db, state=state)
    assert finish(proc)[0] == 0
    assert summary(db, conv) == [("Run echo hi", "The answer is hi.", "completed")]
    [call] = stored_tools(db, conv)
    assert (call.name, call.args) == ("Bash", {"command": "echo hi", "description": "say hi"})
    # And once more: a replay, nothing stored twice.
    stored = observations(db)
    proc = hook_process("claude-code", end_event, json.dumps(end).encode(), db=db, state=state)
    assert finish(proc)[0] == 0
    assert observations(db) == stored
