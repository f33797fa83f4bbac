"""A file that is not a store is refused as it is, by every command and by the library.

``--db`` pointed at another application's database (or any file that is not a store) must
not become a store: no command adds the store's tables to it, serves it, or switches its
journal mode, and the error is one line naming the file. A store of any schema version,
an empty file and a missing file are still opened (and upgraded or created) as stores.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from cli_support import assert_one_line_error, clean_env, cli, free_port, ok
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, Forgotten, OutboxTransport, purge_forgotten
from neotoma_agent._util.file_kind import WrongFileKind
from neotoma_agent.exceptions import OutboxError
from neotoma_agent.transport.http import HttpTransport


def _application_db(path: Path) -> Path:
    """An application's own database: one ``users`` table, rollback journal (SQLite's
    default), one row."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
        conn.execute("INSERT INTO users (email) VALUES ('ana@example.com')")
    conn.close()
    return path


def _fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file in ``folder``, the hash of its bytes and its mode (a new -wal or -shm
    shows, and so does a file set owner-only as if it were a store)."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
        for p in sorted(folder.iterdir())
    }


@pytest.fixture(params=["application", "text"])
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A non-empty file that is not a store, alone in its own folder."""
    folder = tmp_path / "app"
    folder.mkdir()
    if request.param == "application":
        path = _application_db(folder / "app.db")
    else:
        path = folder / "notes.db"
        path.write_text("a text file\n" * 50)
    path.chmod(0o644)  # an application's file, readable by its group
    return path


async def _make_store(path: Path) -> None:
    async with EmbeddedStore.open(path):
        pass


async def _make_outbox(path: Path) -> None:
    async with OutboxTransport(HttpTransport("http://127.0.0.1:9"), path):
        pass


COMMANDS = [
    ("import", "{turns}"),
    ("demo",),
    ("chat",),
    ("show",),
    ("show", "c"),
    ("stats",),
    ("audit",),
    ("audit", "--repair"),
    ("export",),
    ("forget", "c"),
    ("forget", "c", "--purge"),
    ("outbox", "flush", "--outbox", "{outbox}"),
    ("ui", "--port", "0"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_every_command_refuses_a_file_that_is_not_a_store(
    foreign: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    turns = tmp_path / "turns.jsonl"
    turns.write_text('{"conversation_id": "c", "user": "hi", "assistant": "hello"}\n')
    outbox = tmp_path / "outbox.db"
    if "--outbox" in command:
        anyio.run(_make_outbox, outbox)
    argv = [a.format(turns=turns, outbox=outbox) for a in command]
    before = _fingerprint(foreign.parent)
    result = cli(*argv, "--db", str(foreign), home=tmp_path, stdin="hello\n")
    assert_one_line_error(result, f"{foreign} is not a neotoma-agent store")
    assert "write access" not in result.stderr
    assert _fingerprint(foreign.parent) == before


def test_serve_refuses_a_file_that_is_not_a_store(foreign: Path, tmp_path: Path) -> None:
    before = _fingerprint(foreign.parent)
    argv = [sys.executable, "-m", "neotoma_agent.cli", "serve", "--db", str(foreign)]
    try:
        result = subprocess.run(
            [*argv, "--port", str(free_port())],
            env=clean_env(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:  # it served the file
        pytest.fail(f"serve served {foreign}")
    assert_one_line_error(result, f"{foreign} is not a neotoma-agent store")
    assert _fingerprint(foreign.parent) == before


def test_the_library_refuses_a_file_that_is_not_a_store(foreign: Path) -> None:
    before = _fingerprint(foreign.parent)
    for read_only in (False, True):
        with pytest.raises(WrongFileKind) as refused:
            EmbeddedStore.open(foreign, read_only=read_only)
        assert str(refused.value).startswith(f"{foreign} is not a neotoma-agent store")
        assert "\n" not in str(refused.value)
    with pytest.raises(WrongFileKind):
        purge_forgotten(foreign, Forgotten("c", (("ent_x", "conversation"),), ()))
    assert _fingerprint(foreign.parent) == before


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_stores_of_every_version_an_empty_file_and_no_file_still_open(
    tmp_path: Path, version: int
) -> None:
    old = tmp_path / "old.db"
    shutil.copy(TESTS / "data" / f"v{version}_store" / "store.db", old)
    empty = tmp_path / "empty.db"
    empty.touch()
    missing = tmp_path / "new.db"

    async def open_all() -> list[int]:
        totals = []
        for path in (old, empty, missing):
            async with EmbeddedStore.open(path) as store:
                totals.append((await store.query_entities(limit=1)).total)
        return totals

    old_total, empty_total, new_total = anyio.run(open_all)
    assert old_total > 0
    assert (empty_total, new_total) == (0, 0)
    assert "0 conversations" not in ok(cli("stats", "--db", str(old), home=tmp_path))


def test_an_outbox_refuses_a_file_that_is_not_an_outbox(foreign: Path, tmp_path: Path) -> None:
    """The same for the outbox file (``HttpTransport(outbox=...)``, ``outbox --outbox``)."""
    before = _fingerprint(foreign.parent)
    with pytest.raises(OutboxError, match=f"{foreign} is not an outbox"):
        anyio.run(_make_outbox, foreign)
    store = tmp_path / "store.db"
    anyio.run(_make_store, store)
    for action in (("status",), ("flush", "--db", str(store))):
        result = cli("outbox", *action, "--outbox", str(foreign), home=tmp_path)
        assert_one_line_error(result, f"{foreign} is not an outbox")
    assert _fingerprint(foreign.parent) == before
