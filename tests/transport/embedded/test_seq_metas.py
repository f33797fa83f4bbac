"""A turn record's winning observation rows listed in its snapshot by seq (``_row_metas``).
What matters: a closed turn record lists its close as its seq alone and a conversation its
metas in full; the state every reader decodes is the one the metas in full give; a turn
record written again after its close (deleted, restored, corrected) reads its rows and
answers as before; a version-23 file upgrades to the same rows a fresh file holds; and
every read and write answers as on the same file as the version before the step held it,
and on the file left at this version with every meta in full (both forms are read)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from close_row_support import closes_kept, unclose
from derived_restatement_support import rows_kept
from file_workload_support import (
    Step,
    answers,
    compared,
    fixed_clocks,
    same_on_both,
    steps,
    write_steps,
)
from first_id_support import ids_kept
from hypothesis import given
from meta_numbers_support import states
from packed_ids_support import entity_rows
from paths_support import TESTS
from seq_metas_support import BEFORE, by_seq, unseq
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore
from neotoma_agent._neotoma.identity import entity_id_for
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def _docs(path: Path, entity_type: str) -> list[dict[str, object]]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT snapshot FROM entities WHERE entity_type = ? ORDER BY rowid", (entity_type,)
        ).fetchall()
    return [json.loads(r[0]) for r in rows]


def _full_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` left at this version, every meta in full."""
    shutil.copyfile(path, to)
    with closing(sqlite3.connect(to, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        unseq(conn)
        conn.execute("COMMIT")
    return to


async def test_a_closed_turn_record_lists_its_close_by_seq(tmp_path: Path) -> None:
    """A turn record whose close is a row (its row holds it since ``_close_row``'s step:
    the file with every close a row, as this release reads it, as version 28 wrote it)
    lists it by its seq."""
    path = tmp_path / "store.db"
    await write_steps(path, [("turn", 0, 1), ("turn", 0, 2), ("turn", 0, 3)], 0)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        assert unclose(conn, drop=False) == 3
        conn.execute("COMMIT")
    with closing(sqlite3.connect(path)) as conn:
        closes = [
            r[0]
            for r in conn.execute(
                "SELECT o.seq FROM observations o JOIN entities e ON e.rowid = o.entity_row "
                "WHERE e.entity_type = 'conversation_turn' ORDER BY o.seq"
            )
        ]
    records = _docs(path, "conversation_turn")
    assert len(closes) == 3
    assert [d["o"] for d in records] == [[seq] for seq in closes]
    # A conversation's later observations win its fields: listed in full.
    metas = [m for d in _docs(path, "conversation") for m in d["o"]]  # type: ignore[attr-defined]
    assert any(isinstance(m, list) for m in metas)
    assert not any(type(m) is int and m > 0 for m in metas)
    full = _full_copy(path, tmp_path / "full.db")
    with closing(sqlite3.connect(full)) as conn:
        assert by_seq(conn) == 0
    assert states(full) == states(path)


async def test_a_turn_record_written_again_after_its_close_answers_as_before(
    tmp_path: Path,
) -> None:
    """Deleted, restored and corrected after its close, a turn record's fold reads its rows
    (its snapshot lists its close by seq), on a file and on its copy the version before
    held: the same rows and answers."""
    path = tmp_path / "store.db"
    await write_steps(path, [("turn", 0, 1), ("turn", 0, 2)], 0)
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    record = entity_id_for("conversation_turn", "conversation_turn:c1|t0", None)
    with closing(sqlite3.connect(path)) as conn:
        names = [r[0] for r in conn.execute("SELECT canonical_name FROM entities")]
    assert "conversation_turn:c1|t0" in names
    for at in (path, old):
        with fixed_clocks(5_000_000):
            await _again(at, record)
    assert entity_rows(old) == entity_rows(path)
    assert await answers(old) == await answers(path)


async def _again(at: Path, record: str) -> None:
    """The turn record deleted, restored and corrected on the file at ``at``."""
    async with EmbeddedStore.open(at) as store:
        snapshot = await store.get_entity_snapshot(record)
        assert snapshot.observation_count == 2
        await store.request("delete_entity", {"entity_id": record})
        await store.request("restore_entity", {"entity_id": record})
        body = {
            "entity_id": record,
            "entity_type": "conversation_turn",
            "field": "model",
            "value": "fixed",
            "idempotency_key": "fix-record",
        }
        await store.request("correct", body)


async def test_a_version_23_file_upgrades_to_the_rows_this_version_writes(
    tmp_path: Path,
) -> None:
    """The file version 23 wrote (``tests/data/v23_store``): upgraded, its closed turn
    records list their closes by seq, and every meta written back in full gives the rows
    it held."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v23_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] <= BEFORE
        before = conn.execute("SELECT rowid, * FROM entities ORDER BY rowid").fetchall()
        assert by_seq(conn) == 0
    # (its restatements and its closes as rows, its first ids stored: ``_derived_restatement``,
    # ``_close_row``, ``_first_id``)
    with rows_kept(), ids_kept(), closes_kept():
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert by_seq(conn) > 0
        conn.execute("BEGIN")
        unseq(conn)
        after = conn.execute("SELECT rowid, * FROM entities ORDER BY rowid").fetchall()
        conn.execute("ROLLBACK")
    # (the columns later steps add, NULL in every row: ``_close_row``'s four)
    assert [row[: len(before[0])] for row in after] == before
    assert {row[len(before[0]) :] for row in after} == {(None,) * 4}


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) answers the same on the file and on its copy as the
    version before held it, upgraded (the same rows too); then the same writes on both
    write the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("seq")
    path = tmp / "seq.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    old = copy_at_version(path, tmp / "before.db", BEFORE)
    await same_on_both(path, old, after)


@compared
@given(before=steps, after=steps)
async def test_every_read_is_the_same_with_every_meta_in_full(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """The same workload on the file and on its copy left at this version with every meta
    written back in full (as the migration leaves a meta it cannot list by seq): every
    read answers the same, before and after the same writes on both."""
    tmp = tmp_path_factory.mktemp("full")
    path = tmp / "seq.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    full = _full_copy(path, tmp / "full.db")
    assert await answers(full) == await answers(path)
    for at in (path, full):
        await write_steps(at, after, 5_000_000)
    assert await answers(full) == await answers(path)
