"""A store file and an outbox file passed for each other are named for what they are.

Both are SQLite files versioned with ``PRAGMA user_version``; without a kind check a store
opened with write access would "upgrade" an outbox into a store (losing its queue to the
outbox's own reader), and each would tell the user to use another neotoma-agent.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from cli_support import assert_one_line_error, cli
from server_support import TOKEN

from neotoma_agent import EmbeddedStore, NeotomaMemory, OutboxTransport
from neotoma_agent.exceptions import OutboxError
from neotoma_agent.transport.embedded import WrongFileKind
from neotoma_agent.transport.http import HttpTransport


async def _make_both(tmp_path: Path) -> tuple[Path, Path]:
    store, outbox = tmp_path / "memory.db", tmp_path / "outbox.db"
    async with (
        EmbeddedStore.open(store) as s,
        NeotomaMemory(s, conversation_id="c").turn("hi") as t,
    ):
        t.reply = "hello"
    async with OutboxTransport(HttpTransport("http://127.0.0.1:9", token=TOKEN), outbox):
        pass
    return store, outbox


def _version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_a_store_refuses_an_outbox_file_and_leaves_it_an_outbox(tmp_path: Path) -> None:
    _, outbox = anyio.run(_make_both, tmp_path)
    before = _version(outbox)

    async def open_it(read_only: bool) -> None:
        async with EmbeddedStore.open(outbox, read_only=read_only) as s:
            await s.query_entities(limit=1)

    for read_only in (False, True):
        with pytest.raises(WrongFileKind, match=r"outbox\.db is an outbox.*not a store") as info:
            anyio.run(open_it, read_only)
        assert "neotoma-agent outbox status" in info.value.hint
        assert isinstance(info.value, sqlite3.DatabaseError)
    assert _version(outbox) == before  # not migrated into a store


def test_an_outbox_refuses_a_store_file_by_name(tmp_path: Path) -> None:
    store, _ = anyio.run(_make_both, tmp_path)

    async def open_it() -> None:
        async with OutboxTransport(HttpTransport("http://127.0.0.1:9", token=TOKEN), store):
            pass

    with pytest.raises(OutboxError, match="is a neotoma-agent store, not an outbox"):
        anyio.run(open_it)


def test_the_command_line_names_the_file_for_what_it_is(tmp_path: Path) -> None:
    store, outbox = anyio.run(_make_both, tmp_path)
    result = cli("show", "--db", str(outbox), home=tmp_path)
    assert_one_line_error(result, f"{outbox} is an outbox", "not a store")
    assert "newer" not in result.stderr
    result = cli("outbox", "status", "--outbox", str(store), home=tmp_path)
    assert "not an outbox" in result.stderr
    assert "newer" not in result.stderr


def test_another_programs_database_is_refused_by_the_public_error(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    before = foreign.read_bytes()

    async def open_it() -> None:
        async with EmbeddedStore.open(foreign):
            pass

    with pytest.raises(WrongFileKind, match=r"app\.db is not a neotoma-agent store") as info:
        anyio.run(open_it)
    assert "--db takes a store file" in info.value.hint
    assert foreign.read_bytes() == before
