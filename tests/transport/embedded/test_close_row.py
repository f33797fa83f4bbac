"""A turn record's close held in its entity row (``_close_row``'s schema step): a
short turn writes no observation row for it, and every read answers as on the file the
version before held it (the close a row of ``observations``)."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from close_row_support import HELD, closes_kept, held_closes, unclose
from file_workload_support import (
    Step,
    answers,
    compared,
    fixed_clocks,
    same_on_both,
    steps,
    turn_on_recorded,
    write_steps,
)
from hypothesis import given
from paths_support import TESTS
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the close in the row
BEFORE = HELD - 1


def _before(path: Path, to: Path) -> Path:
    return copy_at_version(path, to, BEFORE)


def _held(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return held_closes(conn)


def _turn_rows(path: Path) -> int:
    """The observation rows of turn records."""
    with closing(sqlite3.connect(path)) as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM observations o JOIN entities e ON e.rowid = o.entity_row "
                "WHERE e.entity_type = 'conversation_turn'"
            ).fetchone()[0]
        )


def _turn_id(path: Path, turn: str) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return str(
            conn.execute(
                f"SELECT {entity_text('id')} FROM entities WHERE canonical_name LIKE ?",
                (f"conversation_turn:%|{turn}",),
            ).fetchone()[0]
        )


async def _observations(path: Path, entity_id: str) -> Any:
    """An entity's observations: the transport's page and the GET route's (its total)."""
    async with EmbeddedStore.open(path) as store:
        listed = await store.request("list_observations", {"entity_id": entity_id})
        page = await store.request(
            "get_entity_observations", {"entity_id": entity_id, "limit": 100}
        )
    return listed, page


async def test_a_short_turn_writes_no_observation_row_for_its_turn_records_close(
    tmp_path: Path,
) -> None:
    """Each closed turn record holds its close in its row; the only observation rows a
    short turn writes are its conversation's; the record's observations (the page, the
    GET route and its total) are the two they were, as on the copy the version before
    held."""
    path = tmp_path / "store.db"
    await write_steps(path, [("turn", 0, 1), ("turn", 0, 1), ("turn", 0, 3)], 0)
    assert _held(path) == 3
    assert _turn_rows(path) == 0
    old = _before(path, tmp_path / "before.db")
    with closing(sqlite3.connect(old)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == BEFORE
    assert _turn_rows(old) == 3
    entity_id = _turn_id(path, "t1")
    rows = tmp_path / "rows.db"
    shutil.copyfile(old, rows)
    with closes_kept():  # (upgraded, its closes kept as rows)
        before = await _observations(rows, entity_id)
    assert _turn_rows(rows) == 3
    listed, page = await _observations(path, entity_id)
    assert (listed, page) == before
    assert page["total"] == 2
    await _observations(old, entity_id)
    assert _held(old) == 3  # (upgraded, its closes are in their rows again)


async def test_a_turn_record_observed_after_its_close_answers_as_its_copy(
    tmp_path: Path,
) -> None:
    """A turn record's close held in its row, then the record observed again: the turn
    run again (its close's key replayed: its list names the close as its row's rowid, as
    the enter's names the first), a second close of other fields (which writes the held
    close as a row first, renamed in its key's list) and a correction at the close's
    very time (rows after the close), and its user forgotten, purged and restored: every
    read answers as on the file the version before held."""
    path = tmp_path / "store.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 0)], 0)
    entity_id = _turn_id(path, "t0")
    old = _before(path, tmp_path / "before.db")
    for at in (path, old):
        await write_steps(at, [("turn", 0, 0)], 0)  # the same turn again: replayed
        with fixed_clocks(5_000_000):
            async with EmbeddedStore.open(at) as store:
                fields = (await store.get_entity_snapshot(entity_id)).snapshot
                body = {"entity_type": "conversation_turn", **fields, "status": "abandoned"}
                await store.store([body], idempotency_key="close-again")
                await store.request(
                    "correct",
                    {
                        "entity_id": entity_id,
                        "entity_type": "conversation_turn",
                        "field": "status",
                        "value": "completed",
                        "idempotency_key": "fix-1",
                    },
                )
    # (observed after its close, the record's close is a row first, then the two later
    # ones: ``_close_row.materialize``; the other record's row still holds its close)
    assert _held(path) == 1
    assert _turn_rows(path) == 3
    assert await _observations(old, entity_id) == await _observations(path, entity_id)
    assert await answers(old) == await answers(path)
    for at in (path, old):
        await write_steps(at, [("forget", 1, 1), ("turn", 0, 2), ("forget", 1, 0)], 9_000_000)
    assert await answers(old) == await answers(path)


async def test_a_version_28_file_upgrades_with_its_closes_in_their_rows(tmp_path: Path) -> None:
    """The file version 28 wrote (``tests/data/v28_store``): upgraded, each turn record's
    close is in its row, no turn record keeps an observation row, its answers are those
    recorded (``test_embedded_migration``) and the same as on its copy with the closes
    written back as rows; it is written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v28_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 28  # the file 28 wrote
    closes = _turn_rows(path)
    assert closes > 0
    async with EmbeddedStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert _held(path) == closes
    assert _turn_rows(path) == 0
    rows = tmp_path / "rows.db"
    shutil.copyfile(path, rows)
    with closing(sqlite3.connect(rows, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        assert unclose(conn) == closes
        conn.execute(f"PRAGMA user_version = {BEFORE}")
        conn.execute("COMMIT")
    assert await answers(rows) == await answers(path)
    await turn_on_recorded(path)
    assert _held(path) == closes + 1
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user answers
    the same on the file and on its copy with each close a row of ``observations`` (this
    release reads both), and on its copy as the version before held it, upgraded; then
    the same writes on both write the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("close_row")
    path = tmp / "held.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    assert _held(path) > 0
    # (every read the same as with the closes as rows, which this release reads too)
    rows = tmp / "rows.db"
    shutil.copyfile(path, rows)
    with closing(sqlite3.connect(rows, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        unclose(conn, drop=False)
        conn.execute("COMMIT")
    assert await answers(rows) == await answers(path)
    old = _before(path, tmp / "before.db")
    await same_on_both(path, old, after)


async def test_a_turn_is_read_back_whole_from_its_held_close(tmp_path: Path) -> None:
    """The history reads every turn's reply and status from records whose close their rows
    hold."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-1")
        for n in range(3):
            async with memory.turn(f"question {n}", turn_id=f"t{n}") as t:
                t.reply = f"answer {n}"
        page = await memory.history(limit=None)
    assert [(m.user, m.reply) for m in page] == [(f"question {n}", f"answer {n}") for n in range(3)]
    assert _held(path) == 3


async def test_a_replayed_close_names_the_close_its_row_holds(tmp_path: Path) -> None:
    """A close's key replayed answers the close's observation, not the enter's: both are
    the row's rowid in their keys' lists, told apart by the key's source."""
    path = tmp_path / "store.db"
    fields = {"session_id": "c9", "turn_id": "t9", "turn_key": "c9:t9"}
    opened = {"entity_type": "conversation_turn", **fields, "status": "open"}
    closed = {**opened, "status": "completed"}
    async with EmbeddedStore.open(path) as store:
        await store.store([opened], idempotency_key="enter-9")
        first = await store.store([closed], idempotency_key="close-9")
        again = await store.store([closed], idempotency_key="close-9")
    assert _held(path) == 1
    assert again.entities[0].observation_id == first.entities[0].observation_id
