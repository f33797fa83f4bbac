"""The conversation index by entity row numbers (``_conversation_index``): each row holds its
conversation's and its message's entity rowids. A purge deletes a row with either end's
entity row, so that no row names a later entity that takes a purged rowid again (a rowid
table hands the largest rowid out again once its row is gone): after a purged forgotten
conversation, an erased user or a purged last turn, new turns list exactly their own
messages, and every row joins a conversation and a message of it. And a file as the
version before held it (by ids), upgraded, answers every read and writes every row as this
one."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from conversation_index_support import NUMBERED, by_ids, unnumber
from file_workload_support import Step, compared, same_on_both, steps, turn_on_recorded, write_steps
from hypothesis import given
from paths_support import TESTS
from version_copy_support import copy_at_version

from neotoma_agent import (
    EmbeddedStore,
    NeotomaMemory,
    purge_entities,
    purge_forgotten,
    purge_user,
)
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def index_rows(path: Path) -> list[tuple[str | None, int, str | None]]:
    """Every row of the index as (conversation name, position, message name), the names
    of the entity rows its numbers find (None: no such row), in key order."""
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT c.canonical_name, cm.seq, m.canonical_name FROM conversation_messages cm "
            "LEFT JOIN entities c ON c.rowid = cm.conversation_row "
            "LEFT JOIN entities m ON m.rowid = cm.message_row "
            "ORDER BY cm.conversation_row, cm.seq"
        ).fetchall()


def _mismatched(path: Path) -> list[tuple[str | None, int, str | None]]:
    """The index rows whose message is not one of its conversation's turns' (by the names
    the identity rules give: ``conversation:<id>``, ``conversation_message:<id>:<turn>``)."""
    return [
        (c, seq, m)
        for c, seq, m in index_rows(path)
        if c is None
        or m is None
        or not m.startswith(f"conversation_message:{c.removeprefix('conversation:')}:")
    ]


async def _turns(store: EmbeddedStore | object, conversation: str, turns: range) -> None:
    memory = NeotomaMemory(store, conversation_id=conversation)  # type: ignore[arg-type]
    for n in turns:
        async with memory.turn(f"{conversation} question {n}", turn_id=f"t{n}") as t:
            t.reply = f"{conversation} answer {n}"


async def _history(path: Path, conversation: str) -> list[tuple[str | None, str | None, str]]:
    async with EmbeddedStore.open(path) as store:
        page = await NeotomaMemory(store, conversation_id=conversation).history(limit=None)
    return [(h.user, h.reply, h.turn_id) for h in page]


def _rowids(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn:
        return {
            i: int(r) for i, r in conn.execute(f"SELECT {entity_text('id')}, rowid FROM entities")
        }


@pytest.mark.parametrize("erased", ["forgotten", "user", "last turn"])
async def test_no_index_row_names_an_entity_that_took_a_purged_rowid(
    tmp_path: Path, erased: str
) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        await _turns(store, "kept", range(2))
        # the rows erased below are the newest: their rowids are the next ones handed out
        await _turns(store.for_user("alice") if erased == "user" else store, "gone", range(3))
        forgotten = await NeotomaMemory(store, conversation_id="gone").forget()
    before = _rowids(path)
    if erased == "forgotten":
        purge_forgotten(path, forgotten)
    elif erased == "user":
        purge_user(path, "alice")
    else:
        async with EmbeddedStore.open(path) as store:
            await NeotomaMemory(store, conversation_id="gone").restore(forgotten)
        with closing(sqlite3.connect(path)) as conn:
            last = [
                str(r[0])
                for r in conn.execute(
                    f"SELECT {entity_text('id')} FROM entities WHERE canonical_name IN (?, ?)",
                    ("conversation_message:gone:t2", "conversation_message:gone:t2:assistant"),
                )
            ]
        assert len(last) == 2
        purge_entities(path, last)
    after = _rowids(path)
    assert len(after) < len(before)
    # a new conversation, and turns of an old one, take the purged rowids again
    async with EmbeddedStore.open(path) as store:
        await _turns(store, "new", range(2))
        await _turns(store, "kept", range(2, 3))
        if erased == "last turn":
            await _turns(store, "gone", range(3, 4))
    taken = {r for i, r in _rowids(path).items() if i not in after}
    assert taken & {r for i, r in before.items() if i not in after}
    assert _mismatched(path) == []
    assert await _history(path, "new") == [
        ("new question 0", "new answer 0", "t0"),
        ("new question 1", "new answer 1", "t1"),
    ]
    assert [h[2] for h in await _history(path, "kept")] == ["t0", "t1", "t2"]
    if erased == "last turn":
        # the purged turn's messages went (its record alone is no turn of the history)
        gone = await _history(path, "gone")
        assert [h[2] for h in gone] == ["t0", "t1", "t3"]
        assert gone[2] == ("gone question 3", "gone answer 3", "t3")
    else:
        assert await _history(path, "gone") == []


async def test_the_index_holds_the_entity_rows_numbers(tmp_path: Path) -> None:
    """A turn's two messages are two rows of its conversation, each end an entity row's
    rowid, in the order the turns wrote them; a second turn's at the next places."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        await _turns(store, "chat", range(2))
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT typeof(conversation_row), seq, typeof(message_row) FROM conversation_messages"
        ).fetchall()
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert rows == [("integer", n, "integer") for n in (1, 2, 3, 4)]
    assert [m for _, _, m in index_rows(path)] == [
        "conversation_message:chat:t0",
        "conversation_message:chat:t0:assistant",
        "conversation_message:chat:t1",
        "conversation_message:chat:t1:assistant",
    ]


async def test_the_upgrade_numbers_the_version_17_files_index(tmp_path: Path) -> None:
    """``tests/data/v17_store`` upgraded: the same rows (by the names of their ends), and it
    is written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v17_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert by_ids(conn)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 17 < NUMBERED
        before = conn.execute(
            "SELECT c.canonical_name, cm.seq, m.canonical_name FROM conversation_messages cm "
            "JOIN entities c ON c.id = cm.conversation_id JOIN entities m ON m.id = cm.message_id "
            "ORDER BY c.rowid, cm.seq"
        ).fetchall()
    assert len(before) >= 4
    async with EmbeddedStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as conn:
        assert not by_ids(conn)
    assert index_rows(path) == before
    await turn_on_recorded(path)
    assert _mismatched(path) == []


def _as_version_before(path: Path, to: Path) -> Path:
    return copy_at_version(path, to, NUMBERED - 1, unnumber)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns, stores, corrections, deletions, edges (PART_OF with
    metadata among them) and forgotten users: every read answers the same on the file and
    on its copy as the version before held it (by ids), upgraded, and so do the index's rows; then
    the same writes on both."""
    tmp = tmp_path_factory.mktemp("numbered")
    path = tmp / "numbered.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    old = _as_version_before(path, tmp / "before.db")
    await same_on_both(path, old, after, rows=[index_rows])
