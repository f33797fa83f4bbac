"""A snapshot's meta of its entity row's first observation as the number 0 (schema version
13): every read answers, and every write writes, as on the same file with those metas in
full, as version 12 held it (upgraded) and as version 13 reads it (not rewritten)."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from close_row_support import closes_kept, unclose
from derived_restatement_support import rows_kept, underive
from file_workload_support import (
    USERS,
    Step,
    answers,
    compared,
    steps,
    turn_on_recorded,
    view_of,
    write_steps,
)
from hypothesis import given
from meta_numbers_support import expanded_copy, numbered_metas, states
from packed_ids_support import entity_rows
from paths_support import TESTS
from users_support import seed_user

from neotoma_agent import EmbeddedStore, NeotomaMemory

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def _rows_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` with its closes and its derived restatements
    as rows, in the order :func:`expanded_copy` writes them (this release reads both)."""
    shutil.copyfile(path, to)
    with closing(sqlite3.connect(to, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        unclose(conn, drop=False)
        underive(conn, drop=False)
        conn.execute("COMMIT")
    return to


async def test_a_new_entity_lists_its_first_observation_as_0(tmp_path: Path) -> None:
    """(The file with its turn records' closes as rows, as this release reads it: an
    expanded copy writes them so, ``_close_row``.)"""
    written = tmp_path / "written.db"
    async with EmbeddedStore.open(written) as store:
        for user in USERS:
            await seed_user(view_of(store, user), "Xmark")
    path = _rows_copy(written, tmp_path / "store.db")
    numbered, full = numbered_metas(path)
    assert numbered > 0
    assert full == 0
    expanded = expanded_copy(path, tmp_path / "full.db")
    assert numbered_metas(expanded) == (0, numbered)
    assert states(expanded) == states(path)
    with rows_kept(), closes_kept():  # (as on ``path``: rows)
        async with EmbeddedStore.open(expanded):
            pass
    assert numbered_metas(expanded) == (numbered, 0)
    assert entity_rows(expanded) == entity_rows(path)


async def test_a_history_page_reads_an_open_turn_record_and_its_tool_calls(
    tmp_path: Path,
) -> None:
    """A page's statement leaves the first observation's columns out of its turn records
    (a closed one's close wins every field); an open one lists its first observation, and
    the page reads it then, as it reads a tool call's."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="c")
        async with memory.turn("hi Acme Corp", turn_id="t1") as t:
            t.record_tool("lookup", args={"q": 1}, result={"hit": 1})
            during = await memory.history(limit=None)
            t.reply = "answer"
        after = await memory.history(limit=None)
    assert [(x.turn_id, x.status) for x in during] == [("t1", "open")]
    assert [(x.turn_id, x.status, x.reply) for x in after] == [("t1", "completed", "answer")]


async def test_a_version_12_file_lists_first_observations_as_0_and_answers_as_recorded(
    tmp_path: Path,
) -> None:
    """The file the release before wrote (``tests/data/v12_store``): after the upgrade no
    snapshot lists a first observation in full, and it is written on as a file this
    release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v12_store" / "store.db", path)
    before = numbered_metas(path)
    assert before[0] == 0
    assert before[1] > 0
    await turn_on_recorded(path)
    after = numbered_metas(path)
    assert after[0] >= before[1]
    assert after[1] == 0


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_with_the_metas_in_full(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) answers the same on the file, on its copy with
    every first observation's meta in full as version 13 reads it (not rewritten), and on
    that copy as version 12 held it, upgraded; then the same writes on all three write the
    same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("metas")
    path = tmp / "numbered.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    full = expanded_copy(path, tmp / "full.db", version=13)
    assert numbered_metas(full)[0] == 0
    # each winner's id, time, priority, rank, ... (the restatements derived from messages
    # as rows on both: ``_derived_restatement``, a seq of their own)
    assert states(full) == states(_rows_copy(path, tmp / "rows.db"))
    old = expanded_copy(path, tmp / "v12.db")
    expected = await answers(path)
    assert await answers(full) == expected
    assert await answers(old) == expected
    assert entity_rows(old) == entity_rows(path)
    for copy in (path, full, old):
        await write_steps(copy, after, 5_000_000)
    assert entity_rows(old) == entity_rows(path)
    expected = await answers(path)
    assert await answers(full) == expected
    assert await answers(old) == expected
