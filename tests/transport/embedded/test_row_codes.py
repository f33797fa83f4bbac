"""An entity row's name, aliases and times coded (``_row_codes``): a name after its type's
``{type}:`` as the bytes of the rest, no aliases as NULL, the update and last observation
times as their distance from the creation time. What matters: every statement that reads
those columns reads exactly what it read before (value and SQLite type), through the
migration, a new row, an ``UPDATE`` and a rename; a turn's rows are smaller; a version-17
file (``tests/data/v17_store``) upgrades in one transaction and is written on as a file
this release wrote; and every read and write answers as on the same file as the version
before the step held it."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from close_row_support import HELD
from file_workload_support import (
    Step,
    compared,
    same_on_both,
    steps,
    turn_on_recorded,
    write_steps,
)
from hypothesis import given
from hypothesis import strategies as st
from paths_support import TESTS
from row_codes_support import BEFORE, coded_rows, old_table, uncoded_copy
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.transport.embedded import _schema
from neotoma_agent.transport.embedded._row_codes import (
    ROW_CODES,
    encode_aliases,
    encode_name,
    recode_rows,
    set_time,
    time_code,
)
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION
from neotoma_agent.transport.embedded._words import WORDS, encode_word

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

_READ = (
    "canonical_name, typeof(canonical_name), aliases, typeof(aliases), updated_at, "
    "typeof(updated_at), last_observation_at, typeof(last_observation_at)"
)


def _as_read(name: str, aliases: str, updated: Any, last: Any) -> tuple[Any, ...]:
    def typed(value: Any) -> tuple[Any, str]:
        kind = {int: "integer", float: "real", str: "text", type(None): "null"}[type(value)]
        return value, kind

    return (*typed(name), *typed(aliases), *typed(updated), *typed(last))


_times = st.one_of(
    st.integers(-(2**46), 2**46),
    st.sampled_from([0, 1, 1.0, 0.5]),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.sampled_from(["2026-01-01T00:00:00.000Z", "0", ""]),
)
_types = st.one_of(st.sampled_from(WORDS), st.text(min_size=1, max_size=12))
#: names of any text, with the separators the store's names hold
_names = st.lists(
    st.one_of(st.text(max_size=8), st.sampled_from([":", "|", "\x00", "-", ":assistant"])),
    max_size=6,
).map("".join)


@given(
    entity_type=_types,
    name=_names,
    prefixed=st.booleans(),
    same=st.sampled_from([(), ("updated",), ("last",), ("updated", "last")]),
    aliases=st.sampled_from(["[]", '["old name"]', '["a", "b:c"]']),
    created=_times,
    updated=_times,
    last=st.one_of(st.none(), _times),
    later=_times,
    later_last=st.one_of(st.none(), _times),
)
def test_every_coded_column_reads_back_exactly(
    entity_type: str,
    name: str,
    prefixed: bool,
    same: tuple[str, ...],
    aliases: str,
    created: Any,
    updated: Any,
    last: Any,
    later: Any,
    later_last: Any,
) -> None:
    """A row of any type, name (after its type's prefix or not), aliases and times (integer
    milliseconds, text, a number of another type, its creation time or none) reads back
    the same value of the same SQLite type: moved by the migration, inserted coded by a
    store, then with its times updated and renamed."""
    if prefixed:
        name = f"{entity_type}:{name}"
    if "updated" in same:
        updated = later = created
    if "last" in same:
        last = later_last = created
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as conn:
        old_table(conn)
        conn.execute(
            "INSERT INTO entities (id, type_code, canonical_name, aliases, created_at, "
            "updated_at, snapshot, observation_count, last_observation_at) "
            "VALUES ('a', ?, ?, ?, ?, ?, '{}', 1, ?)",
            (encode_word(entity_type), name, aliases, created, updated, last),
        )
        recode_rows(conn)
        conn.execute(
            "INSERT INTO entities (id, type_code, name_code, alias_list, created_at, "
            "updated_code, snapshot, observation_count, last_code) "
            "VALUES ('b', ?, ?, ?, ?, ?, '{}', 1, ?)",
            (
                encode_word(entity_type),
                encode_name(entity_type, name),
                encode_aliases(aliases),
                created,
                time_code(updated, created),
                time_code(last, created),
            ),
        )
        expected = _as_read(name, aliases, updated, last)
        for row in ("a", "b"):
            got = conn.execute(f"SELECT {_READ} FROM entities WHERE id = ?", (row,)).fetchone()
            assert got == expected
        conn.execute(
            f"UPDATE entities SET {set_time('updated_at', 1)}, "
            f"{set_time('last_observation_at', 2)}",
            (later, later_last),
        )
        renamed = f"{entity_type}:moved"
        conn.execute(
            "UPDATE entities SET name_code = ?, alias_list = ? WHERE id = 'b'",
            (encode_name(entity_type, renamed), encode_aliases(f'["{name[:5]}"]')),
        )
        got = conn.execute(f"SELECT {_READ} FROM entities ORDER BY id").fetchall()
        assert got == [
            _as_read(name, aliases, later, later_last),
            _as_read(renamed, f'["{name[:5]}"]', later, later_last),
        ]


def _stored(path: Path) -> dict[str, tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT canonical_name, name_code, alias_list, updated_code, last_code, "
            f"aliases, {entity_text('id')} FROM entities"
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def _entity_bytes(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(
            conn.execute("SELECT sum(payload) FROM dbstat WHERE name = 'entities'").fetchone()[0]
        )


async def test_a_turns_rows_hold_their_names_after_their_types_and_no_repeated_times(
    tmp_path: Path,
) -> None:
    """A turn's messages and turn record hold their names' rest as bytes, no aliases and no
    second time; an entity named otherwise keeps its name's text, a renamed one its
    aliases; each reads back whole, and the rows are smaller than the same rows as the
    version before held them."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="c-1")
        async with memory.turn("hello there", turn_id="t-1") as t:
            t.reply = "hi"
        body = {"entity_type": "person", "name": "Maria"}
        [maria] = (await store.store([body], idempotency_key="maria")).entities
        await store.store(
            [{"entity_type": "person", "target_id": maria.entity_id, "name": "Maria Lopez"}],
            idempotency_key="rename",
        )
        page = await memory.history(limit=None)
    assert [(m.user, m.reply) for m in page] == [("hello there", "hi")]
    rows = _stored(path)
    assert rows["conversation_message:c-1:t-1"][:4] == (b"c-1:t-1", None, None, None)
    assert rows["conversation_message:c-1:t-1:assistant"][:4] == (
        b"c-1:t-1:assistant",
        None,
        None,
        None,
    )
    turn = rows["conversation_turn:c-1|t-1"]
    assert turn[:2] == (b"c-1|t-1", None)
    assert isinstance(turn[2], int)  # its close, after its enter
    assert turn[3] == turn[2]
    assert rows["conversation:c-1"][:2] == (b"c-1", None)
    renamed = [r for r in rows.values() if r[-1] == maria.entity_id]
    assert len(renamed) == 1
    assert renamed[0][1] == renamed[0][4] == '["person:Maria"]'
    old = uncoded_copy(path, tmp_path / "before.db")
    # (both with their closes as rows: a row holds its close since ``_close_row``'s step)
    rows_at = copy_at_version(path, tmp_path / "rows.db", HELD - 1)
    assert _entity_bytes(rows_at) < _entity_bytes(old)


async def test_a_version_17_file_upgrades_coded_and_is_written_on(tmp_path: Path) -> None:
    """The file the release before wrote (``tests/data/v17_store``): after the upgrade every
    row is coded and reads the names, aliases and times it held, and it is written on as a
    file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v17_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] <= BEFORE
        before = conn.execute(f"SELECT rowid, {_READ} FROM entities ORDER BY rowid").fetchall()
    async with EmbeddedStore.open(path):
        pass
    prefixed = "substr(canonical_name, 1, length(entity_type) + 1) = entity_type || ':'"
    with closing(sqlite3.connect(path)) as conn:
        after = conn.execute(f"SELECT rowid, {_READ} FROM entities ORDER BY rowid").fetchall()
        kinds = conn.execute(
            f"SELECT {prefixed}, typeof(name_code), count(*) FROM entities GROUP BY 1, 2"
        ).fetchall()
        assert not conn.execute("SELECT 1 FROM entities WHERE alias_list = '[]'").fetchone()
    assert after == before
    assert {(p, kind) for p, kind, _ in kinds} == {(1, "blob"), (0, "text")}
    await turn_on_recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


async def test_an_upgrade_that_fails_midway_leaves_the_version_17_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade is one transaction: a failure after this step rebuilt the table leaves the
    file as version 17 held it."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v17_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        rows = conn.execute("SELECT rowid, * FROM entities ORDER BY rowid").fetchall()
    assert version <= BEFORE

    def fail(conn: sqlite3.Connection) -> None:
        recode_rows(conn)
        raise OSError("the disk went away")

    monkeypatch.setitem(_schema._AFTER, ROW_CODES, fail)
    with pytest.raises(OSError, match="the disk went away"):
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
        assert conn.execute("SELECT rowid, * FROM entities ORDER BY rowid").fetchall() == rows
    monkeypatch.undo()
    await turn_on_recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def _renamed(path: Path) -> None:
    """A person renamed (its old name an alias), for the comparison's rows."""
    async with EmbeddedStore.open(path) as store:
        body = {"entity_type": "person", "name": "Ann"}
        [p] = (await store.store([body], idempotency_key="ann")).entities
        renamed = {"entity_type": "person", "target_id": p.entity_id, "name": "Ann Lee"}
        await store.store([renamed], idempotency_key="rename-ann")


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges, forgotten users and a rename: every read of each user
    (the Transport's, history, search, audit, backup, every GET route and point read of
    every entity, another user's included) answers the same on the file and on its copy as
    the version before held it, upgraded; then the same writes on both write the same rows and
    answer the same."""
    tmp = tmp_path_factory.mktemp("codes")
    path = tmp / "coded.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    await _renamed(path)
    old = uncoded_copy(path, tmp / "before.db")
    await same_on_both(path, old, after, rows=[coded_rows])
