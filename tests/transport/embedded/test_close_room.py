"""Room a turn record keeps for its close (``_close_room``). What matters: a turn record is
written at its enter at the size its close takes, so its close rewrites it in place and no
entity page splits and keeps the room (on turns whose ids the caller names and on turns
whose ids the library mints); the room is measured in the bytes SQLite stores; a row with
no room (every row an older version wrote, an open turn among them) is written as before; a
version-20 file (``tests/data/v20_store``) upgrades and is written on; and every read and
write answers as on the same file as the version before the step held it."""

from __future__ import annotations

import shutil
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from close_row_support import closes_kept
from derived_restatement_support import rows_kept
from file_workload_support import (
    Step,
    compared,
    same_on_both,
    steps,
    turn_on_recorded,
    write_steps,
)
from first_id_support import ids_kept
from hypothesis import given
from hypothesis import strategies as st
from paths_support import TESTS
from seq_metas_support import unseq
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.transport.embedded._close_room import (
    CLOSE_ROOM,
    FIRST_SET,
    record_size,
    spend_sql,
    text_size,
)
from neotoma_agent.transport.embedded._schema import MIGRATIONS, SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the turn records kept room for their close
BEFORE = MIGRATIONS.index(CLOSE_ROOM)

_values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, -1, 127, 128, -129, 2**15, 2**23, 2**31, 2**47, 2**47 - 1]),
    st.floats(allow_nan=False),
    st.text(max_size=300),
    st.binary(max_size=300),
)
_texts = st.one_of(st.none(), st.text(max_size=300), st.binary(max_size=300))


def _payload(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT sum(payload) FROM dbstat WHERE name = 't'").fetchone()[0])


@given(value=_values)
def test_a_values_record_size_is_the_bytes_sqlite_stores_for_it(value: Any) -> None:
    """``record_size`` (and its SQL for a text, ``text_size``) is what the value takes in a
    row: its header's type and its data."""
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("CREATE TABLE t (v)")
        conn.execute("INSERT INTO t VALUES (?)", (value,))
        assert _payload(conn) == 1 + record_size(value)  # (the header's own length: 1)
        if value is None or isinstance(value, str | bytes):
            sized = conn.execute(f"SELECT {text_size('v')}, {text_size('?1')} FROM t", (value,))
            assert sized.fetchone() == (record_size(value), record_size(value))


@given(old=st.tuples(_texts, _texts), new=st.tuples(_texts, _texts), room=st.integers(0, 200))
def test_an_update_that_spends_the_room_keeps_the_row_its_size(
    old: tuple[Any, Any], new: tuple[Any, Any], room: int
) -> None:
    """A row whose room holds what an ``UPDATE`` adds keeps its size (a byte less at most,
    where the room's own length cannot say it); one whose room is short grows by the rest
    only; a row with no room keeps none."""
    spend = spend_sql((text_size("a"), text_size("?1")), (text_size("b"), text_size("?2")))
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("CREATE TABLE t (a, b, room BLOB)")
        conn.execute("INSERT INTO t VALUES (?, ?, ?)", (*old, bytes(room)))
        before = _payload(conn)
        conn.execute("INSERT INTO t VALUES (?, ?, NULL)", old)
        plain = _payload(conn) - before
        conn.execute(f"UPDATE t SET a = ?1, b = ?2, {spend}", new)
        after = _payload(conn)
        spent = conn.execute("SELECT room FROM t ORDER BY rowid").fetchall()
    growth = sum(record_size(n) - record_size(o) for o, n in zip(old, new, strict=True))
    left = bytes(max(0, room - growth))
    assert spent == [(left,), (None,)]
    after -= plain + growth  # the row with no room grows as it would anyway
    assert after == before + growth + record_size(left) - record_size(bytes(room))
    if 0 <= growth <= room:
        assert before - 1 <= after <= before


def _row_size(conn: sqlite3.Connection, name: str) -> tuple[int, Any]:
    """The bytes of the record of the entity row named ``name`` (its stored columns, but
    the header's own length, which is the same for every row), and its room."""
    stored = [
        c for _, c, _, _, _, _, hidden in conn.execute("PRAGMA table_xinfo(entities)") if not hidden
    ]
    row = conn.execute(
        f"SELECT {', '.join(stored)} FROM entities WHERE canonical_name = ?", (name,)
    ).fetchone()
    return sum(record_size(v) for v in row), row[stored.index("room")]


def _stored_size(path: Path, name: str) -> tuple[int, Any]:
    with closing(sqlite3.connect(path)) as conn:
        return _row_size(conn, name)


def _close_fields(path: Path, name: str) -> Any:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT close_fields FROM entities WHERE canonical_name = ?", (name,)
        ).fetchone()[0]


def _first_write(path: Path, name: str) -> tuple[int, Any]:
    """The size of the row named ``name`` once a close's first write (its open fields into
    ``first_fields``) is made, on a transaction rolled back, and its room left."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                f"UPDATE entities SET {FIRST_SET} WHERE canonical_name = ?2",
                (
                    *conn.execute(
                        "SELECT json_extract(snapshot, '$.f') FROM entities "
                        "WHERE canonical_name = ?",
                        (name,),
                    ).fetchone(),
                    name,
                ),
            )
            return _row_size(conn, name)
        finally:
            conn.execute("ROLLBACK")


@pytest.mark.parametrize("named", [True, False], ids=["named ids", "minted ids"])
async def test_a_turn_record_is_written_at_its_enter_at_the_size_of_its_close(
    tmp_path: Path, named: bool
) -> None:
    """A turn record's row at its close takes the bytes it took at its enter (its room
    spent on what the close added: on its first write byte for byte, and on its state, a
    few bytes left), for the first turn of a conversation and later ones, whether the
    caller names the turn or the library mints its id."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-1")
        for n in range(3):
            turn_id = f"t{n}" if named else None
            async with memory.turn(f"question {n}: how is the plan?", turn_id=turn_id) as t:
                name = f"conversation_turn:chat-1|{t.turn_id}"
                at_enter, room = _stored_size(path, name)
                assert room is not None
                assert len(room) > 60
                size, left = _first_write(path, name)
                # (a room spent below 58 bytes takes a byte less of the row's header)
                assert size == at_enter - (len(room) > 57 >= len(left))
                t.reply = f"answer {n}: it is on track."
            at_close, left = _stored_size(path, name)
            assert left is None
            # A conversation's first turn's close keeps fields of its own (the snapshot's
            # are not all of them): its row holds them (``_close_row``), beyond the room.
            own = record_size(_close_fields(path, name)) - 1
            assert own == 0 or n == 0
            assert at_enter - 16 <= at_close - own <= at_enter
    async with EmbeddedStore.open(path) as store:
        page = await NeotomaMemory(store, conversation_id="chat-1").history(limit=None)
    assert [(m.user, m.reply) for m in page] == [
        (f"question {n}: how is the plan?", f"answer {n}: it is on track.") for n in range(3)
    ]


def _unused(path: Path) -> float:
    with closing(sqlite3.connect(path)) as conn:
        leaves, unused = conn.execute(
            "SELECT count(*), sum(unused) FROM dbstat WHERE name = 'entities' AND pagetype = 'leaf'"
        ).fetchone()
    return float(unused) / (leaves * 4096)


async def test_a_files_entity_pages_keep_no_room_that_closes_split_off(tmp_path: Path) -> None:
    """The peers benchmark's short turns over 16 conversations (where every row of a kind
    has one size, and a close that grew its row split its page every few turns, leaving
    a sixth of the entity table's leaves empty): the leaves are nearly full."""
    sys.path.insert(0, str(TESTS.parent / "benchmarks"))
    try:
        from peers import CONVERSATIONS, _Ours
    finally:
        sys.path.pop(0)
    path = tmp_path / "turns.db"
    async with _Ours(path) as turn:
        for i in range(300):
            await turn(i % CONVERSATIONS, i)
    assert _unused(path) < 0.08


async def test_a_turn_open_when_its_file_was_upgraded_closes_as_before(tmp_path: Path) -> None:
    """A turn record with no room (an older version wrote it, open) closes as it did, its
    row grown by its close, and keeps no room; the file's next turn is written with room."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-1")
        async with memory.turn("first", turn_id="t1") as t:
            with closing(sqlite3.connect(path)) as conn, conn:
                conn.execute("UPDATE entities SET room = NULL WHERE room IS NOT NULL")
            at_enter, _ = _stored_size(path, "conversation_turn:chat-1|t1")
            t.reply = "one"
        async with memory.turn("second", turn_id="t2") as t:
            assert _stored_size(path, "conversation_turn:chat-1|t2")[1] is not None
            t.reply = "two"
        page = await memory.history(limit=None)
    at_close, room = _stored_size(path, "conversation_turn:chat-1|t1")
    assert room is None
    assert at_close > at_enter
    assert [(m.user, m.reply) for m in page] == [("first", "one"), ("second", "two")]


async def test_a_version_20_file_upgrades_and_is_written_on(tmp_path: Path) -> None:
    """The file version 20 wrote (``tests/data/v20_store``): upgraded, its rows are the
    same (its closes listed by seq since version 25, ``_row_metas``) and keep no room,
    and it is written on as a file this release wrote (a closed turn keeps none either)."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v20_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] <= BEFORE
        before = conn.execute("SELECT rowid, * FROM entities ORDER BY rowid").fetchall()
    # (its restatements and closes as rows, its first ids stored: ``_derived_restatement``,
    # ``_close_row``, ``_first_id``)
    with rows_kept(), ids_kept(), closes_kept():
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        conn.execute("BEGIN")
        assert unseq(conn) > 0  # its closes listed by seq (_row_metas): back in full
        after = conn.execute("SELECT rowid, * FROM entities ORDER BY rowid").fetchall()
        conn.execute("ROLLBACK")
    # (the room, and ``_close_row``'s four columns: NULL in every row)
    assert [row[:-5] for row in after] == before
    assert {row[-5:] for row in after} == {(None,) * 5}
    await turn_on_recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT 1 FROM entities WHERE room IS NOT NULL").fetchone() is None


def _roomless_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` as the version before held it: no room."""
    return copy_at_version(path, to, BEFORE)  # (which drops the column: drop_room)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) answers the same on the file and on its copy as
    the version before held it, upgraded; then the same writes on both write the same rows and
    answer the same."""
    tmp = tmp_path_factory.mktemp("room")
    path = tmp / "room.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    old = _roomless_copy(path, tmp / "before.db")
    await same_on_both(path, old, after)
