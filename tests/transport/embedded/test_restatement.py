"""A restatement of an entity's first observation holds its fields as a mark
(``_restatement``). What matters: the conversation's restatement at a turn's enter (from
its second turn on) is a row without its fields' copy, and reads its fields back exactly,
with every other column as before; a row whose fields are not its first observation's
keeps its text; a later store from the same source finds the marked observation (no second
row); a version-23 file (``tests/data/v23_store``) upgrades with its restatements marked
and answers as before; and every read and write answers as on the same file as the
version before held it."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from close_row_support import closes_kept
from derived_restatement_support import rows_kept, underive
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
from packed_ids_support import entity_rows, ids_of_type
from paths_support import TESTS
from restatement_support import unmark
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.exceptions import NeotomaError
from neotoma_agent.transport.embedded import _first, _shared_fields
from neotoma_agent.transport.embedded._restatement import RESTATED
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._schema import MIGRATIONS, SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the mark
BEFORE = MIGRATIONS.index(RESTATED)


def _rows(path: Path) -> list[tuple[Any, ...]]:
    """Every observation row: (seq, whether its fields are the mark, every other column)."""
    with closing(sqlite3.connect(path)) as conn:
        return [
            (r[0], r[1] == b"", *r[2:])
            for r in conn.execute(
                "SELECT seq, fields, id, entity_row, entity_type, source_id, observed_at, "
                "source_priority, observation_source, specificity_score, idempotency_key, "
                "identity_basis, identity_rule FROM observations ORDER BY seq"
            )
        ]


def _kinds(path: Path, entity_id: str) -> list[str]:
    """The kind of each of an entity's rows' ``fields``: blob (the mark), text or null."""
    with closing(sqlite3.connect(path)) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT typeof(o.fields) FROM observations o JOIN entities e "
                f"ON e.rowid = o.entity_row WHERE {entity_text('e.id')} = ? ORDER BY o.seq",
                (entity_id,),
            )
        ]


def _as_rows(path: Path) -> None:
    """The file's derived restatements written as the rows they stand for."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        underive(conn, drop=False)
        conn.execute("COMMIT")


def _marked(path: Path) -> list[int]:
    return [r[0] for r in _rows(path) if r[1]]


def _unmarked(path: Path, to: Path) -> Path:
    """The file as the version before held it (each mark its text)."""
    return copy_at_version(path, to, BEFORE)


async def _observations(path: Path, entity_id: str) -> Any:
    """The observations of ``entity_id`` (its error, for a deleted or another user's)."""
    async with EmbeddedStore.open(path) as store:
        try:
            return await store.request("get_entity_observations", {"entity_id": entity_id})
        except NeotomaError as exc:
            return repr(exc)


async def _turns(path: Path, turns: range) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-1")
        for n in turns:
            async with memory.turn(f"question {n}", turn_id=f"t{n}") as t:
                t.reply = f"answer {n}"


async def test_a_conversations_restatement_at_a_turns_enter_holds_no_copy_of_its_fields(
    tmp_path: Path,
) -> None:
    """From a conversation's second turn on, its enter's observation of the conversation
    holds the mark; it lists the fields the turn stored, with its id, source, time and
    rules, as the same file with every row's text answers; and only that text differs
    between the rows."""
    path = tmp_path / "store.db"
    await _turns(path, range(4))
    _as_rows(path)  # (derived since ``_derived_restatement``: the rows they stand for)
    conversation = ids_of_type(path, "conversation")[0]
    listed = await _observations(path, conversation)
    restated = [o for o in listed["observations"] if o["fields"] == {"conversation_id": "chat-1"}]
    assert len(restated) == 4  # the first turn's (the entity row's own) and three rows
    assert len(_marked(path)) == 3
    unmarked = tmp_path / "unmarked.db"
    shutil.copyfile(path, unmarked)
    with closing(sqlite3.connect(unmarked)) as conn, conn:
        assert unmark(conn) == 3
    assert await _observations(unmarked, conversation) == listed
    assert [r[2:] for r in _rows(unmarked)] == [r[2:] for r in _rows(path)]


async def test_a_row_whose_fields_are_not_its_first_observations_keeps_their_text(
    tmp_path: Path,
) -> None:
    """An entity stored again with other fields (or the same ones in another order) keeps
    them as text; the same fields again are marked: as they are written, or, written while
    its first observation's fields were its snapshot's (no text to name), as they become
    its row's ``first_fields``."""
    path = tmp_path / "store.db"
    first = {"entity_type": "task", "title": "Call Acme", "status": "open"}
    other = {"entity_type": "task", "title": "Call Other", "status": "open"}
    swapped = {"entity_type": "task", "status": "open", "title": "Call Acme"}
    async with EmbeddedStore.open(path) as store:
        await store.store([first], idempotency_key="k1")
        await store.store([first, other], idempotency_key="k2")
        assert _kinds(path, ids_of_type(path, "task")[0]) == ["text"]
        await store.store([{**first, "status": "done"}], idempotency_key="k3")
        await store.store([swapped], idempotency_key="k4")
        await store.store([first, {**other, "status": "done"}], idempotency_key="k5")
        acme = ids_of_type(path, "task")[0]
        listed = await store.request("get_entity_observations", {"entity_id": acme})
    # (k5's fields are the snapshot's again: shared, NULL)
    assert _kinds(path, acme) == ["blob", "text", "text", "null"]
    assert [o["fields"] for o in reversed(listed["observations"])] == [
        {"title": "Call Acme", "status": "open"},
        {"title": "Call Acme", "status": "open"},
        {"title": "Call Acme", "status": "done"},
        {"status": "open", "title": "Call Acme"},
        {"title": "Call Acme", "status": "open"},
    ]


async def test_a_later_store_from_the_same_source_finds_the_marked_observation(
    tmp_path: Path,
) -> None:
    """The marked row keeps its id (the digest of its fields' text): the same entities
    stored under another key (the same source) write no second row, and that key replays
    the observation ids of the first."""
    path = tmp_path / "store.db"
    await _turns(path, range(2))
    body = [{"entity_type": "conversation", "conversation_id": "chat-1"}]
    async with EmbeddedStore.open(path) as store:
        first = await store.store(body, idempotency_key="again-1")
        rows = _rows(path)
        second = await store.store(body, idempotency_key="again-2")
        replayed = await store.store(body, idempotency_key="again-2")
    assert _rows(path) == rows
    assert rows[-1][1]  # the store's own row, marked
    ids = [o["observation_id"] for o in first.raw["entities"]]
    assert [o["observation_id"] for o in second.raw["entities"]] == ids
    assert [o["observation_id"] for o in replayed.raw["entities"]] == ids


async def test_a_version_23_file_upgrades_with_its_restatements_marked(tmp_path: Path) -> None:
    """The file version 23 wrote (``tests/data/v23_store``): upgraded, each row whose
    fields were its entity's first observation's text is marked, every other column the
    same, and every entity's observations answer as with the text (its answers as
    recorded: ``test_embedded_migration``); it is written on as a file this release
    wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v23_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 23
        ids = [r[0] for r in conn.execute(f"SELECT {entity_text('id')} FROM entities")]
    before = _rows(path)
    # (its restatements and closes as rows: ``_derived_restatement``, ``_close_row``)
    with rows_kept(), closes_kept():
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    after = _rows(path)
    assert [r[0] for r in after if r[1]] == [6, 21]
    assert [r[2:] for r in after] == [r[2:] for r in before]
    unmarked = tmp_path / "unmarked.db"
    shutil.copyfile(path, unmarked)
    with closing(sqlite3.connect(unmarked)) as conn, conn:
        unmark(conn)
    assert [await _observations(path, i) for i in ids] == [
        await _observations(unmarked, i) for i in ids
    ]
    await turn_on_recorded(path)
    # (its restatement of chat-v2 is of other fields than the recorded turns': its text)
    assert _marked(path) == [6, 21]


async def test_a_marked_file_answers_as_its_copy_the_version_before_held(
    tmp_path: Path,
) -> None:
    """Turns of two users with tools and remembered entities, stores, corrections and
    deletions: every read answers the same on the file and on its copy as the version
    before held it (its marks as text), upgraded."""
    path = tmp_path / "store.db"
    workload: list[Step] = [("turn", 0, 0), ("turn", 1, 1), ("turn", 0, 2), ("turn", 1, 3)]
    workload += [("store", 0, 3), ("store", 0, 3), ("correct", 0, 1), ("turn", 0, 4)]
    await write_steps(path, workload, 0)
    _as_rows(path)  # (derived since ``_derived_restatement``: the rows they stand for)
    assert _marked(path)
    old = _unmarked(path, tmp_path / "before.db")
    assert not _marked(old)
    # (upgraded to its marks: ``_derived_restatement`` would derive them; its closes
    # rows: ``_close_row``)
    with rows_kept(), closes_kept():
        assert await answers(old) == await answers(path)
    assert _marked(old) == _marked(path)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) answers the same on the file and on its copy as the
    version before held it, upgraded; then the same writes on both write the same rows and
    answer the same."""
    tmp = tmp_path_factory.mktemp("restated")
    path = tmp / "restated.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 0, 0), *before], 0)
    old = _unmarked(path, tmp / "before.db")
    await same_on_both(path, old, after, rows=[_rows])


def _always_marking(
    conn: sqlite3.Connection, entity_id: str, seq: int, text: str | None, mark: bool = True
) -> None:
    _first.set_fields(conn, entity_id, seq, text)


async def _restating(path: Path) -> None:
    """A task whose first observation's fields another source restates (a row of their
    text, while they are its snapshot's), then changes (they become its row's text)."""
    first = {"entity_type": "task", "title": "Call Acme", "status": "open"}
    other = {"entity_type": "task", "title": "Call Other", "status": "open"}
    with fixed_clocks(0):
        async with EmbeddedStore.open(path) as store:
            await store.store([first], idempotency_key="k1")
            await store.store([first, other], idempotency_key="k2")
            await store.store([{**first, "status": "done"}], idempotency_key="k3")


@compared
@given(work=steps)
async def test_a_first_observation_given_its_text_marks_the_rows_a_search_for_them_would(
    tmp_path_factory: pytest.TempPathFactory, work: list[Step]
) -> None:
    """As an entity row's first observation gets its fields' text, its rows that restate
    them are marked; where it knows its rows (two observations: a turn record's close, which
    shares the snapshot's fields) it looks for none, and the file's rows are those the
    search would have left, on any workload."""
    tmp = tmp_path_factory.mktemp("marks")
    workload: list[Step] = [("turn", 0, 0), ("turn", 0, 1), *work]
    for name, set_fields in (("known", _first.set_fields), ("searched", _always_marking)):
        with mock.patch.object(_shared_fields, "set_fields", set_fields):
            await _restating(tmp / f"{name}.db")
            await write_steps(tmp / f"{name}.db", workload, 1_000)
    assert _marked(tmp / "known.db")
    assert _rows(tmp / "known.db") == _rows(tmp / "searched.db")
    assert entity_rows(tmp / "known.db") == entity_rows(tmp / "searched.db")


async def test_a_turn_records_close_looks_for_no_row_to_mark(tmp_path: Path) -> None:
    """A plain turn's close (its record's two observations: the row's first and the close,
    which shares the snapshot's fields) runs no search for rows restating the first."""
    searched: list[bool] = []

    def recording(
        conn: sqlite3.Connection, entity_id: str, seq: int, text: str | None, mark: bool = True
    ) -> None:
        if seq == _first.FIRST_SEQ and text is not None:
            searched.append(mark)
        _first.set_fields(conn, entity_id, seq, text, mark)

    with mock.patch.object(_shared_fields, "set_fields", recording):
        await _turns(tmp_path / "store.db", range(3))
    assert searched  # (each close gives its record's first observation its text)
    assert not any(searched)
