"""The hooks' state file keeps only what later events still need, and stays bounded.

Once a turn's closing store landed, its texts (prompt, reply, context) and its tool calls
are gone from the state file; what is left of it (ids, how it ended) makes a repeated event
a no-op and counts in ``hooks status``, and is itself bounded per session and by age. An
abandoned turn keeps what a late Stop needs to complete it, for a while.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hook_support import (
    Hooks,
    cli_logging,
    history,
    observations,
    recorded,
    stored_tools,
    summary,
)

from neotoma_agent.cli import main
from neotoma_agent.hooks import HookState
from neotoma_agent.hooks._state import KEEP_PER_SESSION, KEEP_SECONDS, LATE_STOP_WINDOW

__all__ = ["cli_logging"]  # a fixture


def rows(state: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run ``sql`` on the file (as another process would: closed after)."""
    with closing(sqlite3.connect(state, isolation_level=None)) as db:
        return db.execute(sql, params).fetchall()


def file_bytes(state: Path) -> bytes:
    """The state file and its WAL, as a reader of the disk would see them."""
    wal = state.with_name(state.name + "-wal")
    return state.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def test_a_stored_turn_keeps_no_text_and_no_tool_call(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "tool")
    hooks.replay(inputs[:3])  # the prompt, the tool use, the Stop (the session goes on)
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert summary(hooks.db, conv) == [("Run echo hi", "The answer is hi.", "completed")]
    [(user, reply, context, retrieved, phase, ending)] = rows(
        hooks.state,
        "SELECT user_message, reply, context, retrieved_ids, phase, ending FROM turns",
    )
    assert (user, reply, context, retrieved) == ("", None, None, None)
    assert (phase, ending) == ("done", "completed")
    assert rows(hooks.state, "SELECT count(*) FROM tools") == [(0,)]
    # Not in the file's bytes either (freed space is zeroed, not left behind).
    data = file_bytes(hooks.state)
    for secret in ("Run echo hi", "The answer is hi.", inputs[1][1]["tool_use_id"]):
        assert secret.encode() not in data
    # What is left still makes a repeated Stop (and a repeated prompt) a no-op.
    before = observations(hooks.db)
    assert hooks.send(*inputs[2]).problem is None
    assert hooks.send(*inputs[0]).problem is None
    # A tool use that comes after the turn closed is not kept: no store would read it.
    assert hooks.send(*inputs[1]).problem is None
    assert rows(hooks.state, "SELECT count(*) FROM tools") == [(0,)]
    assert observations(hooks.db) == before
    assert summary(hooks.db, conv) == [("Run echo hi", "The answer is hi.", "completed")]
    with HookState(hooks.state) as state:
        assert state.counts("claude-code") == {"open": 0, "undelivered": 0, "done": 1}


def test_an_abandoned_turn_keeps_what_a_late_stop_needs_for_a_while(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "session")
    # The first turn's Stop comes after the second prompt: abandoned, then completed.
    hooks.replay([inputs[0], inputs[2]])
    conv = hooks.conversation(inputs[0][1]["session_id"])
    first = inputs[0][1]["prompt_id"]
    [(user, kept_id)] = rows(
        hooks.state,
        "SELECT user_message, user_message_id FROM turns WHERE turn_id = ?",
        first,
    )
    assert user == ""  # the prompt is stored: a late completion does not need it
    assert kept_id
    hooks.replay([inputs[1], inputs[3]])
    assert [t.status for t in history(hooks.db, conv)] == ["completed", "completed"]

    # Past the window, a late Stop is a no-op: what it would need is gone.
    (tmp_path / "other").mkdir()
    other = Hooks(tmp_path / "other", "claude-code")
    other.replay([inputs[0], inputs[2]])
    rows(other.state, "UPDATE turns SET updated_at = updated_at - ?", LATE_STOP_WINDOW + 60)
    other.replay([inputs[3]])  # closes the second turn: the sweep runs
    [(reply, kept_id, user_id)] = rows(
        other.state,
        "SELECT reply, retrieved_ids, user_message_id FROM turns WHERE turn_id = ?",
        first,
    )
    assert (reply, kept_id, user_id) == (None, None, None)
    before = observations(other.db)
    assert other.send(*inputs[1]).problem is None
    assert observations(other.db) == before
    assert [t.status for t in history(other.db, conv)] == ["abandoned", "completed"]


def _turn(state: HookState, conv: str, n: int, big: str, *, stop: bool = True) -> None:
    """One turn of a session as the hooks record it: prompt, opened, 3 tool calls, end."""
    turn = f"t{n}"
    state.prompt(conv, turn, "claude-code", f"prompt {n} {big}", abandon_others_as="NoStopHook")
    state.opened(conv, turn, user_message_id=f"ent_{n:024x}", retrieved_ids=(), context=big)
    for i in range(3):
        record = {"name": "Bash", "args": {"command": big}, "result": big, "status": "ok"}
        state.add_tool(conv, turn, f"call-{n}-{i}", record)
    if stop:
        state.end(conv, turn, "completed", reply=f"reply {n} {big}")
        state.closed(conv, turn, "completed")


def test_a_long_running_session_never_grows_the_state_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    big = "x" * 20_000
    sizes = []
    with HookState(path) as state:
        for n in range(1, 601):
            # Every tenth turn gets no Stop: the next prompt abandons it; it is closed too.
            _turn(state, "claude-code-s1", n, big, stop=n % 10 != 0)
            if n % 10 == 1 and n > 1:
                state.closed("claude-code-s1", f"t{n - 1}", "abandoned")
            if n in (200, 600):
                sizes.append(path.stat().st_size)
        counts = state.counts("claude-code")
        closed = state.tools("claude-code-s1", "t599")
        waiting = state.tools("claude-code-s1", "t600")
    assert counts["done"] == 599
    assert counts["open"] == 1  # t600 got no Stop yet
    assert closed == []
    assert len(waiting) == 3
    [(turn_rows,)] = rows(path, "SELECT count(*) FROM turns")
    assert turn_rows <= KEEP_PER_SESSION + 1
    [(tool_rows,)] = rows(path, "SELECT count(*) FROM tools")
    # Only the abandoned turns still in their late-Stop window keep their calls.
    assert tool_rows <= 3 * (KEEP_PER_SESSION // 10 + 1)
    # The file reuses its freed pages: turns 201-600 made it no bigger.
    assert sizes[1] <= sizes[0] * 1.2, sizes


def test_closed_turns_are_forgotten_after_a_while_but_still_counted(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with HookState(path) as state:
        _turn(state, "claude-code-old", 1, "old text")
        _turn(state, "claude-code-old", 2, "old text", stop=False)  # still waiting
    rows(path, "UPDATE turns SET updated_at = updated_at - ?", KEEP_SECONDS + 60)
    with HookState(path) as state:
        _turn(state, "claude-code-new", 1, "new text")
        assert state.counts("claude-code") == {"open": 1, "undelivered": 0, "done": 2}
    # The old session's closed turn is gone; its unended turn is still needed.
    assert rows(path, "SELECT conversation_id, turn_id FROM turns ORDER BY seq") == [
        ("claude-code-old", "t2"),
        ("claude-code-new", "t1"),
    ]


# The state file as neotoma-agent 0.3.0.dev (before pruning) made it.
_OLD_SCHEMA = """
CREATE TABLE turns (
    conversation_id TEXT NOT NULL, turn_id TEXT NOT NULL, harness TEXT NOT NULL,
    seq INTEGER NOT NULL, user_message TEXT NOT NULL, model TEXT,
    phase TEXT NOT NULL DEFAULT 'pending', ending TEXT, reply TEXT, error_class TEXT,
    user_message_id TEXT, retrieved_ids TEXT, context TEXT,
    context_sent INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, turn_id)
);
CREATE INDEX turns_due ON turns (conversation_id, phase, seq);
CREATE INDEX turns_undelivered ON turns (harness, seq)
    WHERE phase = 'pending' OR (phase = 'open' AND ending IS NOT NULL);
CREATE TABLE tools (
    conversation_id TEXT NOT NULL, turn_id TEXT NOT NULL, call_key TEXT NOT NULL,
    seq INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (conversation_id, turn_id, call_key)
);
CREATE TABLE fired (
    harness TEXT NOT NULL, event TEXT NOT NULL, last_at REAL NOT NULL,
    count INTEGER NOT NULL, problems INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (harness, event)
);
"""


def test_an_older_state_file_is_pruned_in_place_and_its_waiting_turn_delivered(
    tmp_path: Path,
) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    prompt, stop, _ = recorded("claude-code", "completed")
    conv = hooks.conversation(prompt[1]["session_id"])
    now = time.time()
    with closing(sqlite3.connect(hooks.state)) as db, db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_OLD_SCHEMA)
        # An earlier session's turn, stored long ago with all its texts kept.
        db.execute(
            "INSERT INTO turns VALUES ('claude-code-old', 'o1', 'claude-code', 1, "
            "'an old prompt', NULL, 'done', 'completed', 'an old reply', NULL, 'ent_1', "
            "'[]', 'an old context', 0, 0, ?, ?)",
            (now - 60, now - 60),
        )
        db.execute(
            "INSERT INTO tools VALUES ('claude-code-old', 'o1', 'k', 1, ?)",
            (json.dumps({"name": "Bash", "result": "an old result"}),),
        )
        db.execute("INSERT INTO fired VALUES ('claude-code', 'Stop', ?, 1, 0)", (now - 60,))
    # A session's prompt and Stop, by this version, on that file.
    assert hooks.send(*prompt).problem is None
    assert hooks.send(*stop).problem is None
    assert summary(hooks.db, conv) == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]
    data = file_bytes(hooks.state)
    for old in ("an old prompt", "an old reply", "an old context", "an old result"):
        assert old.encode() not in data
    with HookState(hooks.state) as state:
        assert state.counts("claude-code") == {"open": 0, "undelivered": 0, "done": 2}
        assert state.last_fired("claude-code")["Stop"][1] == 2


def test_forget_purge_drops_the_conversations_hook_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cli_logging: None
) -> None:
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "tool")
    hooks.replay(inputs[:3])
    conv = hooks.conversation(inputs[0][1]["session_id"])
    assert stored_tools(hooks.db, conv)
    with HookState(hooks.state) as state:
        # A prompt of that conversation not delivered yet (the store was away, say): it
        # must not bring the forgotten conversation back with a later event.
        state.prompt(conv, "later", "claude-code", "a later prompt", abandon_others_as="X")
        state.prompt("claude-code-other", "o1", "claude-code", "keep me", abandon_others_as="X")
    status = main(["forget", conv, "--db", str(hooks.db), "--purge", "--state", str(hooks.state)])
    assert status == 0
    out = capsys.readouterr().out
    assert "hook state: 2 turns dropped" in out
    assert rows(hooks.state, "SELECT conversation_id FROM turns") == [("claude-code-other",)]
    assert b"a later prompt" not in file_bytes(hooks.state)
    with HookState(hooks.state) as state:
        assert state.due(conv) == []
        assert state.stale("claude-code", besides="x", idle=-1, limit=10)[0].turn_id == "o1"
