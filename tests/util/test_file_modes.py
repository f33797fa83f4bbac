"""Every file the library and the command line write is 0600, under the common umask 022.

The store, the outbox, the hooks' state (and each one's ``-wal`` / ``-shm``), ``forget
--save`` and the data directory: created owner-only, and an older file or directory left
0644 / 0755 is set owner-only when it is opened.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from cli_support import cli, ok

from neotoma_agent import NeotomaMemory
from neotoma_agent.hooks import HookState
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.embedded._connect import connect
from neotoma_agent.transport.outbox import Outbox

pytestmark = pytest.mark.one_backend


@pytest.fixture(autouse=True)
def _umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _sqlite_files(path: Path) -> list[Path]:
    return [p for p in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm"))) if p.exists()]


def _old_0644_file(path: Path) -> None:
    """A WAL file written 0644, its -wal and -shm left behind as an older version did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS t (x)")
    db.execute("INSERT INTO t VALUES (1)")
    keep = sqlite3.connect(path)  # a second connection keeps -wal / -shm after close
    keep.execute("SELECT * FROM t").fetchall()
    db.close()
    for p in _sqlite_files(path):
        p.chmod(0o644)
    keep.close()


def test_a_new_hook_state_file_is_owner_only_in_an_owner_only_directory(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "hooks-state.db"
    with HookState(path) as state:
        state.counts("claude-code")
        files = _sqlite_files(path)
        assert len(files) == 3  # the file, its -wal and -shm while open
        assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    assert mode(path.parent) == 0o700


def test_an_old_world_readable_hook_state_file_is_made_owner_only_on_open(tmp_path: Path) -> None:
    path = tmp_path / "hooks-state.db"
    _old_0644_file(path)
    os.close(os.open(f"{path}-journal", os.O_CREAT | os.O_WRONLY, 0o644))
    with HookState(path):
        pass
    for p in (*_sqlite_files(path), Path(f"{path}-journal")):
        assert mode(p) == 0o600, p.name


def test_an_old_world_readable_store_is_made_owner_only_on_open(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"

    async def go() -> None:
        async with EmbeddedStore.open(path) as store:
            await NeotomaMemory(store, conversation_id="c").remember("company", name="Acme")
        for p in _sqlite_files(path):
            p.chmod(0o644)
        async with EmbeddedStore.open(path) as store:
            await NeotomaMemory(store, conversation_id="c").remember("company", name="Bolt")
            assert {mode(p) for p in _sqlite_files(path)} == {0o600}

    anyio.run(go)


def test_an_old_world_readable_outbox_is_made_owner_only_on_open(tmp_path: Path) -> None:
    path = tmp_path / "outbox.db"
    Outbox(path).close()
    path.chmod(0o644)
    outbox = Outbox(path)
    try:
        assert {mode(p) for p in _sqlite_files(path)} == {0o600}
    finally:
        outbox.close()


def test_forget_save_writes_the_conversation_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "a.db"

    async def seed() -> None:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id="zeta")
            async with memory.turn("secret plan") as t:
                t.reply = "noted"

    anyio.run(seed)
    record = tmp_path / "forgot.json"
    record.write_text("old")
    record.chmod(0o644)  # an existing file is overwritten, and made owner-only
    ok(cli("--db", str(db), "forget", "zeta", "--save", str(record), home=tmp_path))
    assert json.loads(record.read_text())["conversation_id"] == "zeta"
    assert mode(record) == 0o600
    fresh = tmp_path / "fresh.json"
    ok(cli("--db", str(db), "forget", "--restore", str(record), home=tmp_path))
    ok(cli("--db", str(db), "forget", "zeta", "--save", str(fresh), home=tmp_path))
    assert mode(fresh) == 0o600


def test_the_hook_makes_the_data_directory_and_its_files_owner_only(tmp_path: Path) -> None:
    # An older version left ~/.local/share/neotoma-agent 0755 and its files 0644.
    data = tmp_path / "data" / "neotoma-agent"
    _old_0644_file(data / "hooks-state.db")
    data.chmod(0o755)
    event = {"session_id": "s", "prompt_id": "p", "hook_event_name": "Stop"}
    result = cli(
        "hook", "claude-code", "Stop", "--db", str(tmp_path / "m.db"),
        home=tmp_path, stdin=json.dumps(event),
    )  # fmt: skip
    assert result.returncode == 0
    assert mode(data) == 0o700
    assert {p.name: mode(p) for p in _sqlite_files(data / "hooks-state.db")} == {
        p.name: 0o600 for p in _sqlite_files(data / "hooks-state.db")
    }


def test_a_store_in_a_new_default_directory_is_owner_only(tmp_path: Path) -> None:
    turn = {"conversation_id": "c", "user": "hi", "assistant": "hello"}
    (tmp_path / "t.jsonl").write_text(json.dumps(turn) + "\n")
    ok(cli("import", str(tmp_path / "t.jsonl"), home=tmp_path))
    data = tmp_path / "data" / "neotoma-agent"
    assert mode(data) == 0o700
    assert mode(data / "memory.db") == 0o600


def test_a_directory_the_user_named_keeps_its_mode(tmp_path: Path) -> None:
    # Only the library's own data directory is tightened; a folder the user chose is theirs.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    with HookState(shared / "state.db"):
        pass
    assert mode(shared) == 0o755
    assert mode(shared / "state.db") == 0o600


def test_opening_a_store_again_keeps_the_locks_of_its_open_connection(tmp_path: Path) -> None:
    """A second opening in the same process (which sets the file 0600) must not drop the
    first connection's locks: POSIX locks go with any descriptor of the file closed. Lost,
    another process's connection, closing, takes itself for the last one and checkpoints
    and deletes the WAL under the first (hooks at once on one store: "malformed")."""
    path = tmp_path / "memory.db"
    first = connect(str(path), "NORMAL")()
    try:
        first.execute("SELECT count(*) FROM entities").fetchall()
        connect(str(path), "NORMAL")().close()  # the store opened again here
        other = (
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute(\"INSERT INTO trigram_df VALUES ('zzz', 1)\")\n"
            "c.close()\n"
        )
        subprocess.run([sys.executable, "-c", other, str(path)], check=True, timeout=60)
        # Still open here: the other process's close left the WAL alone.
        assert Path(f"{path}-wal").exists()
        assert first.execute("SELECT n FROM trigram_df WHERE gram = 'zzz'").fetchall() == [(1,)]
    finally:
        first.close()
