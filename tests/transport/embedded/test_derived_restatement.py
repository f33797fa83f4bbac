"""A conversation's restatement at a turn's enter is derived from the user message the turn
creates, not a row (``_derived_restatement``). What matters: from a conversation's second
turn on, a turn writes no observation row of it, and every read of its observations (the
GET route and its total, the list, each key's replay) answers as on the same file with each
derived restatement written back as its row; a store of the same source finds it (no second
row); a row of the conversation at its millisecond writes it as a row first; a purge of its
message alone keeps it (as a row), a purge of its conversation counts it and drops its
keys; ``tests/data/v26_store`` upgrades with its restatements derived; and every read and
write answers as on the same file as the version before held it."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from derived_restatement_support import DERIVED, derived_rows, rows_copy
from file_workload_support import Step, compared, same_on_both, steps, turn_on_recorded, write_steps
from hypothesis import given
from packed_ids_support import ids_of_type
from part_of_support import clock
from paths_support import TESTS
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_entities
from neotoma_agent.exceptions import NeotomaError
from neotoma_agent.transport.embedded import _derived_restatement as _derived
from neotoma_agent.transport.embedded import _write
from neotoma_agent.transport.embedded._codec import CODED_TYPES
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def _rows(path: Path) -> list[tuple[Any, ...]]:
    """Every observation row, and every flagged row of the conversation index."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT * FROM observations ORDER BY seq").fetchall()
        return [*rows, *derived_rows(conn)]


def _keys(path: Path) -> list[str]:
    from neotoma_agent.transport.embedded._key_rows import key_text

    with closing(sqlite3.connect(path)) as conn:
        return sorted(key_text(r[0]) for r in conn.execute("SELECT key FROM idempotency_keys"))


async def _observations(path: Path) -> list[Any]:
    """Every entity's observations (the GET route, with its total, and the list), and
    every key's replay, in the key's order."""
    out: list[Any] = []
    async with EmbeddedStore.open(path) as store:
        ids = ids_of_type(path, "conversation") + ids_of_type(path, "conversation_message")
        for entity_id in ids:
            body = {"entity_id": entity_id, "limit": 1000}
            for action in ("get_entity_observations", "list_observations"):
                try:
                    out.append(await store.request(action, body))
                except NeotomaError as exc:  # a deleted entity's, as on both files
                    out.append(repr(exc))
    return out


async def _turns(path: Path, turns: range, conversation: str = "chat-1") -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id=conversation)
        for n in turns:
            async with memory.turn(f"question {n}", turn_id=f"t{n}") as t:
                t.reply = f"answer {n}"


async def test_a_turn_writes_no_row_for_its_conversations_restatement(tmp_path: Path) -> None:
    """From a conversation's second turn on, its enter's restatement is no row: derived,
    it answers every read of observations as the same file with it as a row."""
    path = tmp_path / "store.db"
    with clock(0):
        await _turns(path, range(4))
    with closing(sqlite3.connect(path)) as conn:
        assert len(derived_rows(conn)) == 3
        (rows,) = conn.execute(
            "SELECT count(*) FROM observations o JOIN entities e ON e.rowid = o.entity_row "
            "WHERE e.entity_type = 'conversation'"
        ).fetchone()
    assert rows == 1  # the first turn's close (its started_at)
    listed = await _observations(path)
    assert listed[0]["total"] == 5
    assert await _observations(rows_copy(path, tmp_path / "rows.db")) == listed


async def test_a_store_of_the_same_source_finds_the_derived_restatement(tmp_path: Path) -> None:
    """The same entities stored under another key (the same source) write no row and
    answer the observation ids of the first; each key replays them."""
    path = tmp_path / "store.db"
    conversation = {"entity_type": "conversation", "conversation_id": "chat-1"}
    message = {
        "entity_type": "conversation_message",
        "role": "user",
        "sender_kind": "user",
        "content": "hello",
        "turn_key": "chat-1:t9",
    }
    edge = [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}]
    with clock(0):
        await _turns(path, range(1))
        async with EmbeddedStore.open(path) as store:
            body = {"entities": [conversation, message], "relationships": edge}
            first = await store.request("store", {**body, "idempotency_key": "again-1"})
            rows = _rows(path)
            second = await store.request("store", {**body, "idempotency_key": "again-2"})
            replayed = await store.request("store", {**body, "idempotency_key": "again-1"})
    with closing(sqlite3.connect(path)) as conn:
        assert len(derived_rows(conn)) == 1
    assert _rows(path) == rows
    ids = [e["observation_id"] for e in first["entities"]]
    assert [e["observation_id"] for e in second["entities"]] == ids
    assert sorted(e["observation_id"] for e in replayed["entities"]) == sorted(ids)


async def test_a_row_at_the_millisecond_of_a_derived_restatement_writes_it_as_a_row_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store of the conversation at the time of its derived restatement: that one is a
    row first (seq below the new row's), so the two list as rows of one millisecond do."""
    path = tmp_path / "store.db"
    with clock(0):
        await _turns(path, range(2))
    with closing(sqlite3.connect(path)) as conn:
        ((at,),) = conn.execute(
            "SELECT m.created_at FROM conversation_messages cm JOIN entities m "
            "ON m.rowid = cm.message_row WHERE cm.restated = 1"
        ).fetchall()
    from neotoma_agent.transport.embedded._times import decode_time

    monkeypatch.setattr(_write, "now_iso", lambda: decode_time(at))
    body = [{"entity_type": "conversation", "conversation_id": "chat-1", "title": "T"}]
    async with EmbeddedStore.open(path) as store:
        await store.store(body, idempotency_key="same-ms")
    with closing(sqlite3.connect(path)) as conn:
        assert derived_rows(conn) == []
        times = conn.execute(
            "SELECT observed_at FROM observations WHERE observed_at = ? ORDER BY seq", (at,)
        ).fetchall()
    assert len(times) == 2
    listed = await _observations(path)
    assert listed[0]["observations"][0]["fields"] == {"conversation_id": "chat-1", "title": "T"}
    assert listed[0]["observations"][1]["fields"] == {"conversation_id": "chat-1"}


async def test_purging_a_message_keeps_its_conversations_restatement(tmp_path: Path) -> None:
    """A purge of the message a restatement is derived from writes it as a row; a purge of
    the conversation counts its derived restatements and drops their keys: as on the
    file with them as rows."""
    path = tmp_path / "store.db"
    with clock(0):
        await _turns(path, range(3))
    rows = rows_copy(path, tmp_path / "rows.db")
    users = ids_of_type(path, "conversation_message")[2::2]  # the second and third turns' users
    assert users
    for at in (path, rows):
        purge_entities(at, users[:1])
    assert await _observations(path) == await _observations(rows)
    assert _keys(path) == _keys(rows)
    conversation = ids_of_type(path, "conversation")
    assert purge_entities(path, conversation) == purge_entities(rows, conversation)
    assert _keys(path) == _keys(rows)


async def test_a_version_26_file_upgrades_with_its_restatements_derived(tmp_path: Path) -> None:
    """The file version 26 wrote (``tests/data/v26_store``): upgraded, its turns'
    restatements are derived, every observation answers as with them as rows, and it is
    written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v26_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 26  # the file version 26 wrote
    async with EmbeddedStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert derived_rows(conn)
    assert await _observations(path) == await _observations(rows_copy(path, tmp_path / "r.db"))
    await turn_on_recorded(path)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user answers the
    same on the file and on its copy as the version before held it (each derived
    restatement a row), upgraded; then the same writes on both write the same rows and
    answer the same."""
    tmp = tmp_path_factory.mktemp("derived")
    path = tmp / "derived.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 0, 0), *before], 0)
    with closing(sqlite3.connect(path)) as conn:
        assert derived_rows(conn)
    old = copy_at_version(path, tmp / "before.db", DERIVED - 1)
    await same_on_both(path, old, after, rows=[_rows])


async def _plain_stores(path: Path, turns: range, title: str = "chat-1") -> None:
    """The turn-shaped store of a client of its own (``benchmarks/embedded_store``): the
    conversation stated whole each time, so its first observation shares its fields with
    the snapshot (``first_fields`` NULL)."""
    async with EmbeddedStore.open(path) as store:
        for n in turns:
            entities = [
                {"entity_type": "conversation", "conversation_id": "chat-1", "title": title},
                {
                    "entity_type": "conversation_message",
                    "role": "user",
                    "sender_kind": "user",
                    "content": f"question {n}",
                    "turn_key": f"chat-1:t{n}",
                },
            ]
            edge = [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}]
            await store.store(entities, idempotency_key=f"plain-{n}", relationships=edge)


def _first_fields(path: Path) -> list[Any]:
    with closing(sqlite3.connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT first_fields FROM entities WHERE type_code = 0")]


async def test_a_conversation_sharing_its_first_fields_with_the_snapshot_derives_too(
    tmp_path: Path,
) -> None:
    """A plain store of the conversation as it stands (its first observation's fields the
    snapshot's, no ``first_fields``) derives its restatement as a turn's does; every read
    answers as with it as a row, before and after the snapshot moves on (the first
    observation's fields then held in ``first_fields``)."""
    path = tmp_path / "store.db"
    with clock(0):
        await _plain_stores(path, range(4))
    assert _first_fields(path) == [None]
    with closing(sqlite3.connect(path)) as conn:
        assert len(derived_rows(conn)) == 3
        assert conn.execute("SELECT count(*) FROM observations").fetchone() == (0,)
    listed = await _observations(path)
    assert listed[0]["total"] == 4
    rows = rows_copy(path, tmp_path / "rows.db")
    assert await _observations(rows) == listed
    with closing(sqlite3.connect(rows)) as conn:  # as a store writes them: no mark
        assert {type(t) for (t,) in conn.execute("SELECT fields FROM observations")} == {str}
    assert "conversation" not in CODED_TYPES  # (a derived restatement reads its text as held)
    with clock(100):
        await _plain_stores(path, range(4, 5), title="renamed")
    assert _first_fields(path) != [None]
    moved = await _observations(path)
    assert moved[0]["observations"][1:] == listed[0]["observations"]
    assert await _observations(rows_copy(path, tmp_path / "rows2.db")) == moved


async def test_the_migration_derives_the_rows_of_a_conversation_sharing_its_first_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the version before wrote with plain stores (each restatement a row of its
    fields' text: no mark, the first observation's fields being the snapshot's): upgraded,
    those rows are derived, and every observation answers as before."""
    path = tmp_path / "store.db"
    monkeypatch.setattr(_derived, "outcome", lambda *args: None)  # the version before's rows
    with clock(0):
        await _plain_stores(path, range(4))
    monkeypatch.undo()
    with closing(sqlite3.connect(path)) as conn:
        texts = conn.execute("SELECT fields FROM observations").fetchall()
    assert len(texts) == 3
    assert all(isinstance(t, str) for (t,) in texts)  # not marked
    before = await _observations(path)
    old = copy_at_version(path, tmp_path / "old.db", DERIVED - 1)
    async with EmbeddedStore.open(old):
        pass
    with closing(sqlite3.connect(old)) as conn:
        assert len(derived_rows(conn)) == 3
        assert conn.execute("SELECT count(*) FROM observations").fetchone() == (0,)
    assert await _observations(old) == before
