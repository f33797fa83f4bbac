"""The hook's own stores on a store file (``hooks._embedded``: closing a turn;
``hooks._embedded_open``: opening one) write what the turn engine writes and answer what it
answers: the recorded sessions of the real programs, replayed both ways on a frozen clock,
leave the same rows in every table of the store file, and every event's answer (a prompt's
context block) is the same text."""

from __future__ import annotations

import datetime as _dt
import sqlite3
import time
import types
from pathlib import Path
from typing import Any

import anyio
import pytest
from hook_support import DATA, Hooks, observations, recorded, summary

from neotoma_agent import EmbeddedStore
from neotoma_agent.hooks import _embedded, _embedded_open, _event, _run
from neotoma_agent.transport.embedded import _edges, _write

SCENARIOS = [
    (harness, folder.name)
    for harness in ("claude-code", "codex")
    for folder in sorted((DATA / harness.replace("-", "_")).iterdir())
    if folder.is_dir()
]

_NOW = _dt.datetime(2026, 12, 2, 6, 30, 0, 123000, tzinfo=_dt.timezone.utc)


class _FrozenDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> _FrozenDatetime:
        return cls.fromtimestamp(_NOW.timestamp(), tz)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every clock a store reads, stopped: two runs of a session write the same values."""
    ns = int(_NOW.timestamp() * 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: ns)
    stamp = "2026-12-02T06:30:00.123Z"
    monkeypatch.setattr(_write, "now_iso", lambda: stamp)
    monkeypatch.setattr(_edges, "now_iso", lambda: stamp)
    shim = types.SimpleNamespace(
        datetime=_FrozenDatetime, timezone=_dt.timezone, timedelta=_dt.timedelta
    )
    monkeypatch.setattr(_event, "_dt", shim)


def rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the store file (FTS shadow tables too), in rowid order."""
    with sqlite3.connect(db) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {
            table: sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            for table in tables
        }


def replay(
    tmp: Path, harness: str, scenario: str, **kw: Any
) -> tuple[dict[str, list[tuple[Any, ...]]], list[str | None]]:
    """The store file's rows after the session, and what each event answered (on a store
    that knows what the recorded prompts name, so retrieval finds and ranks something)."""
    tmp.mkdir()
    anyio.run(seed, tmp / "memory.db")
    outcomes = Hooks(tmp, harness).replay(recorded(harness, scenario), **kw)
    return rows(tmp / "memory.db"), [outcome.stdout for outcome in outcomes]


#: what the store knows before the session: exact matches for names the recorded prompts
#: use ("Acme Corp", "Bob", "Alice"), and partial ones ranked below or above the threshold
KNOWN = [
    {"entity_type": "company", "name": "Acme Corp", "website": "acme.com", "status": "customer"},
    {"entity_type": "company", "name": "Acme Corp Holdings", "status": "parent"},
    {"entity_type": "person", "name": "Bob", "email": "bob@example.com"},
    {"entity_type": "person", "name": "Alice Lidell", "role": "support"},
    {"entity_type": "note", "name": "Alice there", "text": "ask on Mondays"},
]


async def seed(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        await store.store(KNOWN, idempotency_key="seed")


def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The turns ``_embedded.close`` stores (the hook's own path)."""
    closed: list[str] = []
    real = _embedded.close

    def close(file: Any, harness: str, row: Any, tools: Any) -> None:
        closed.append(row.turn_id)
        real(file, harness, row, tools)

    monkeypatch.setattr(_embedded, "close", close)
    return closed


def spy_open(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The turns ``_embedded_open.open_turn`` opens (the hook's own path)."""
    opened: list[str] = []
    real = _embedded_open.open_turn

    def open_turn(file: Any, harness: str, row: Any, context_chars: int) -> Any:
        opened.append(row.turn_id)
        return real(file, harness, row, context_chars)

    monkeypatch.setattr(_embedded_open, "open_turn", open_turn)
    return opened


@pytest.mark.parametrize(("harness", "scenario"), SCENARIOS)
def test_a_recorded_session_stores_the_same_rows_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen: None, harness: str, scenario: str
) -> None:
    monkeypatch.setenv(_run._ENGINE_ENV, "1")
    engine, engine_answers = replay(tmp_path / "engine", harness, scenario)
    monkeypatch.delenv(_run._ENGINE_ENV)
    closed, opened = spy(monkeypatch), spy_open(monkeypatch)
    here, answers = replay(tmp_path / "here", harness, scenario)
    assert closed, "every recorded session closes a turn: the hook's own path ran"
    assert opened, "every recorded session opens a turn: the hook's own path ran"
    assert here.keys() == engine.keys()
    for table, engine_rows in engine.items():
        assert here[table] == engine_rows, table
    assert engine["entities"], "the sessions stored something"
    assert answers == engine_answers


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_a_context_block_cut_to_its_budget_is_cut_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen: None, harness: str
) -> None:
    """A budget that cuts the block (entities and history both): the same text both ways."""
    monkeypatch.setenv(_run._ENGINE_ENV, "1")
    _, engine = replay(tmp_path / "engine", harness, "session", context_chars=120)
    monkeypatch.delenv(_run._ENGINE_ENV)
    opened = spy_open(monkeypatch)
    _, here = replay(tmp_path / "here", harness, "session", context_chars=120)
    assert opened
    assert here == engine
    assert any(answer and "context cut to 120 chars" in answer for answer in here)


def test_a_prompt_opened_here_finds_and_shows_what_the_engine_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen: None
) -> None:
    """The seeded store gives the recorded prompts something to retrieve: the context block
    shows it, and so does the turn's REFERS_TO edge (compared row by row above)."""
    opened = spy_open(monkeypatch)
    _, answers = replay(tmp_path / "here", "claude-code", "completed")
    assert opened
    assert answers[0] is not None
    assert 'company \\"Acme Corp\\"' in answers[0]


def test_a_repeated_close_the_state_forgot_replays_on_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Stop whose store landed but whose state write did not (a hook killed between the
    two) is sent again by the next event with a new ``ended_at``: it replays (the earlier
    run's fields are found), it adds nothing."""
    hooks = Hooks(tmp_path, "claude-code")
    inputs = recorded("claude-code", "completed")
    hooks.replay(inputs[:1])
    with monkeypatch.context() as lost:
        # The Stop's store lands; the state write after it (``closed``) never happens.
        lost.setattr(_run.HookState, "closed", lambda *args, **kw: None)
        assert hooks.send(*inputs[1]).problem is None
    before = observations(hooks.db)
    time.sleep(0.01)  # a later ended_at
    closed = spy(monkeypatch)
    outcome = hooks.send(*inputs[2])  # SessionEnd: delivers what is due
    assert outcome.problem is None
    assert closed
    assert observations(hooks.db) == before


def test_a_store_file_locked_past_the_budget_is_kept_for_the_next_event(tmp_path: Path) -> None:
    """The hook waits for another writer's lock no longer than its ``timeout``, answers, and
    keeps the closing store; the session's next event delivers it."""
    hooks = Hooks(tmp_path, "claude-code")
    prompt, stop, end = (payload for _, payload in recorded("claude-code", "completed"))
    hooks.send("UserPromptSubmit", prompt)
    blocker = sqlite3.connect(hooks.db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        locked = hooks.send("Stop", stop, timeout=0.3)
        waited = time.monotonic() - started
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert locked.problem is not None
    assert locked.problem.startswith("store failed, kept for the next event: ")
    assert waited < 5  # the store's own 10 s lock wait was not sat out
    assert hooks.send("SessionEnd", end).problem is None
    conv = hooks.conversation(prompt["session_id"])
    assert summary(hooks.db, conv) == [
        ("What about Acme Corp?", "Acme Corp is a customer of ours.", "completed")
    ]
