"""What the hook tests share: the recorded inputs, a harness's events run in-process, reads."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.cli import main
from neotoma_agent.hooks import HookOutcome, StoreSpec, run_hook

DATA = Path(__file__).resolve().parent.parent / "data" / "hooks"


def recorded(harness: str, scenario: str) -> list[tuple[str, dict[str, Any]]]:
    """A recorded scenario's inputs, in the order the harness sent them: ``(event, input)``."""
    folder = DATA / harness.replace("-", "_") / scenario
    return [
        (path.stem.split("-", 1)[1], json.loads(path.read_text()))
        for path in sorted(folder.glob("*.json"))
    ]


def reading_session_file(harness: str, scenario: str) -> list[tuple[str, dict[str, Any]]]:
    """A recorded scenario's inputs naming the session file recorded beside them (as the
    harness names its own, in ``transcript_path``), so the hooks can read it."""
    path = str(session_file(harness, scenario))
    return [
        (event, {**payload, "transcript_path": path} if "transcript_path" in payload else payload)
        for event, payload in recorded(harness, scenario)
    ]


def session_of(harness: str, scenario: str) -> str:
    """Our conversation id for a recorded scenario's session (as the hooks name it)."""
    return f"{harness}-{recorded(harness, scenario)[0][1]['session_id']}"


#: the session file each harness wrote beside a recorded scenario's inputs (what
#: ``import --from HARNESS`` reads): Claude Code's transcript, Codex's rollout
SESSION_FILE = {"claude-code": "transcript.jsonl", "codex": "rollout.jsonl"}


def session_files(harness: str) -> Path:
    """The folder of a harness's recorded scenarios, each with its session file."""
    return DATA / harness.replace("-", "_")


def scenarios_with_files(harness: str) -> list[str]:
    """The recorded scenarios that kept their session file, by name."""
    name = SESSION_FILE[harness]
    return sorted(p.name for p in session_files(harness).iterdir() if (p / name).exists())


def session_file(harness: str, scenario: str) -> Path:
    """A recorded scenario's session file."""
    return session_files(harness) / scenario / SESSION_FILE[harness]


def import_sessions(
    harness: str, capsys: pytest.CaptureFixture[str], db: Path, path: Path
) -> tuple[int, str]:
    """``neotoma-agent import --from HARNESS PATH --db DB`` in-process; status and stdout."""
    status = main(["import", "--from", harness, str(path), "--db", str(db)])
    return status, capsys.readouterr().out


@pytest.fixture
def cli_logging() -> Iterator[None]:
    """Undo the logging set-up of the command line's ``main()`` after the test."""
    yield
    structlog.reset_defaults()


class Hooks:
    """One harness's hook events run in-process against a store file and a state file."""

    def __init__(self, tmp: Path, harness: str, *, store: StoreSpec | None = None) -> None:
        self.harness = harness
        self.db = tmp / "memory.db"
        self.state = tmp / "state.db"
        self.store = store or StoreSpec(db=self.db)

    def send(self, event: str, payload: Mapping[str, Any] | bytes, **kw: Any) -> HookOutcome:
        """Run one event; ``payload`` as a dict (JSON-encoded here) or raw stdin bytes."""
        raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return run_hook(self.harness, event, raw, store=self.store, state_path=self.state, **kw)

    def replay(self, inputs: list[tuple[str, dict[str, Any]]], **kw: Any) -> list[HookOutcome]:
        """Run recorded inputs in order; every one must go through without a problem."""
        outcomes = [self.send(event, payload, **kw) for event, payload in inputs]
        for (event, _), outcome in zip(inputs, outcomes, strict=True):
            assert outcome.problem is None, (event, outcome.problem)
        return outcomes

    def conversation(self, session_id: str) -> str:
        """Our conversation id for the harness's session."""
        return f"{self.harness}-{session_id}"


def history(db: Path, conversation_id: str) -> list[Any]:
    """The stored turns of a conversation, oldest first (``HistoryTurn``)."""

    async def read() -> list[Any]:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id=conversation_id)
            return list(await memory.history(None))

    return asyncio.run(read())


def summary(db: Path, conversation_id: str) -> list[tuple[str, str | None, str]]:
    """``(user, reply, status)`` per stored turn."""
    return [(t.user, t.reply, str(t.status)) for t in history(db, conversation_id)]


def seed(db: Path, entity_type: str, **fields: Any) -> str:
    """Store one entity (what a prompt may name); its id."""

    async def write() -> str:
        async with EmbeddedStore.open(db) as store:
            return await NeotomaMemory(store, conversation_id="seed").remember(
                entity_type, **fields
            )

    return asyncio.run(write())


def observations(db: Path) -> int:
    """How many observations the store file holds (a replay adds none)."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
        # an entity's first is in its row (schema 11), and a turn record's close
        # (``_close_row``)
        held = conn.execute("SELECT count(first_id) + count(close_id) FROM entities").fetchone()
        return int(rows) + int(held[0])


def tool_invocations(db: Path) -> list[dict[str, Any]]:
    """The snapshots of every stored ``tool_invocation``."""

    async def read() -> list[dict[str, Any]]:
        async with EmbeddedStore.open(db) as store:
            found = await store.query_entities(entity_type="tool_invocation", limit=100)
            return [dict(e.snapshot) for e in found.entities]

    return asyncio.run(read())


def hook_process(
    harness: str,
    event: str,
    payload: bytes,
    *,
    db: Path,
    state: Path,
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """``python -m neotoma_agent hook HARNESS EVENT`` as a fresh process, stdin written."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neotoma_agent",
            "hook",
            harness,
            event,
            "--db",
            str(db),
            "--state",
            str(state),
            *extra,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(payload)
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> tuple[int, bytes, bytes]:
    """Wait for a :func:`hook_process`; its exit status, stdout and stderr."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    return proc.wait(timeout), out, err


def stored_tools(db: Path, conversation_id: str) -> list[Any]:
    """Every stored tool call of a conversation, with its arguments and results."""

    async def read() -> list[Any]:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id=conversation_id)
            calls: list[Any] = []
            for turn in await memory.history(None):
                calls += await memory.tools(turn.turn_id)
            return calls

    return asyncio.run(read())
