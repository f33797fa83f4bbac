"""The embedded store's file: durability, permissions, WAL, schema versions, open and close."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from neotoma_agent.exceptions import NotFoundError
from neotoma_agent.transport.embedded import EmbeddedStore, _schema
from neotoma_agent.transport.embedded._rows import encode_entity
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION, SchemaTooNewError

pytestmark = pytest.mark.anyio


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_in(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


async def populate(store: EmbeddedStore) -> None:
    """A little of everything: turns, edits, corrections, edges, a rename, a deletion."""
    for turn in range(1, 4):
        await store.store(
            [
                {"entity_type": "conversation", "conversation_id": "c1", "title": f"T{turn}",
                 "participants": [f"p{turn}"]},
                {"entity_type": "conversation_message", "role": "user", "content": f"q{turn}",
                 "turn_key": f"c1:{turn}"},
                {"entity_type": "company", "name": "Acme Corp", "website": f"acme{turn}.com"},
            ],
            idempotency_key=f"turn-{turn}",
            relationships=[
                {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0},
                {"relationship_type": "REFERS_TO", "source_index": 1, "target_index": 2,
                 "metadata": {"turn": turn}},
            ],
            source_priority=100 + turn,
        )  # fmt: skip
    widget = await store.store([{"entity_type": "widget", "name": "Sprocket"}], idempotency_key="w")
    widget_id = widget.entities[0].entity_id
    await store.store(
        [{"entity_type": "widget", "target_id": widget_id, "name": "Gear"}], idempotency_key="w2"
    )
    await store.correct(
        "ent_af939bedafbd1838b259772a", "company", "website", "acme.com", idempotency_key="fix"
    )
    gone = await store.store([{"entity_type": "widget", "name": "Doomed"}], idempotency_key="d1")
    await store.store(
        [{"entity_type": "widget", "name": "Doomed", "_deleted": True}], idempotency_key="d2"
    )
    assert gone.entities
    await store.create_relationship("related_to", widget_id, "ent_af939bedafbd1838b259772a")


async def dump(store: EmbeddedStore) -> dict[str, Any]:
    """Everything the store answers about its entities, as raw JSON."""
    query = await store.query_entities(limit=500)
    out: dict[str, Any] = {"query": query.raw}
    for item in query.entities:
        entity_id = item.entity_id
        try:
            snapshot: Any = (await store.get_entity_snapshot(entity_id)).raw
        except NotFoundError as exc:
            snapshot = {k: v for k, v in exc.body.items() if k != "timestamp"}
        out[entity_id] = {
            "snapshot": snapshot,
            "observations": (await store.list_observations(entity_id, limit=1000)).raw,
            "related": (await store.retrieve_related_entities(entity_id, max_hops=2)).raw,
            "lookup": (await store.retrieve_entity_by_identifier(entity_id)).raw,
        }
    for needle in ("acme", "Gear", "sprocket", "c1:", "q2"):
        out[f"lookup:{needle}"] = (await store.retrieve_entity_by_identifier(needle)).raw
    return out


# -- durability -------------------------------------------------------------------------------


async def test_reopened_store_answers_exactly_as_before_closing(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        await populate(store)
        before = await dump(store)
    async with EmbeddedStore.open(path) as store:
        after = await dump(store)
    assert after == before
    # "Doomed" is soft-deleted: in no query, as on a Neotoma server
    assert len(before["query"]["entities"]) == 6


async def test_reopened_store_keeps_idempotency_keys(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    entities = [{"entity_type": "note", "title": "kept"}]
    async with EmbeddedStore.open(path) as store:
        first = await store.store(entities, idempotency_key="k")
    async with EmbeddedStore.open(path) as store:
        again = await store.store(entities, idempotency_key="k")
        assert again.replayed
        assert again.source_id == first.source_id


async def test_store_is_committed_when_the_call_returns(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        result = await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
        with sqlite3.connect(path) as other:
            rows = other.execute(
                "SELECT id FROM entities WHERE id = ?",
                (encode_entity(result.entities[0].entity_id),),
            ).fetchall()
        assert len(rows) == 1


async def test_aclose_finishes_work_already_queued(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = EmbeddedStore.open(path)
    results: list[str] = []

    async def one(i: int) -> None:
        r = await store.store([{"entity_type": "note", "title": f"n{i}"}], idempotency_key=f"{i}")
        results.append(r.entities[0].entity_id)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
        await anyio.wait_all_tasks_blocked()  # every store is queued on the DB thread
        await store.aclose()
    assert len(results) == 20
    async with EmbeddedStore.open(path) as reopened:
        assert (await reopened.query_entities(entity_type="note")).total == 20


# -- the file ---------------------------------------------------------------------------------


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("permissive_umask")
async def test_store_file_is_created_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
        assert mode(path) == 0o600
        # SQLite gives its side files the database file's permissions.
        for side in (tmp_path / "store.db-wal", tmp_path / "store.db-shm"):
            if side.exists():
                assert mode(side) == 0o600, side.name


async def test_store_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path):
        pass
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_store_file_user_version_is_the_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path):
        pass
    assert SCHEMA_VERSION >= 1
    assert user_version(path) == SCHEMA_VERSION


async def test_file_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaTooNewError, match=r"newer than this release.*upgrade"):
        EmbeddedStore.open(path)
    assert user_version(path) == SCHEMA_VERSION + 1


async def test_older_file_is_migrated_on_open_and_keeps_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        result = await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
    step = "CREATE TABLE added_later (x INTEGER)"
    monkeypatch.setattr(_schema, "MIGRATIONS", (*_schema.MIGRATIONS, step))
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    async with EmbeddedStore.open(path) as store:
        assert (await store.get_entity_snapshot(result.entities[0].entity_id)).snapshot == {
            "title": "x"
        }
    assert user_version(path) == SCHEMA_VERSION + 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM added_later").fetchone()[0] == 0


async def test_failed_migration_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
    steps = "CREATE TABLE half_done (x INTEGER); THIS IS NOT SQL"
    monkeypatch.setattr(_schema, "MIGRATIONS", (*_schema.MIGRATIONS, steps))
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(sqlite3.OperationalError):
        EmbeddedStore.open(path)
    assert user_version(path) == SCHEMA_VERSION
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables


async def test_memory_store_works_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with EmbeddedStore.open(":memory:") as store:
        result = await store.store(
            [{"entity_type": "company", "name": "Acme Corp"}], idempotency_key="k"
        )
        hit = await store.retrieve_entity_by_identifier("acme")
        assert [e.id for e in hit.entities] == [result.entities[0].entity_id]
    assert files_in(tmp_path) == []


async def test_default_store_is_in_memory() -> None:
    async with EmbeddedStore.open() as store:
        assert store.path == ":memory:"
        await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")


async def test_open_in_a_missing_directory_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="directory"):
        EmbeddedStore.open(tmp_path / "nowhere" / "store.db")


async def test_open_refuses_an_unknown_synchronous_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        EmbeddedStore.open(tmp_path / "store.db", synchronous="SOMETIMES")


# -- closing ----------------------------------------------------------------------------------


async def test_using_a_closed_store_raises_a_clear_error(tmp_path: Path) -> None:
    store = EmbeddedStore.open(tmp_path / "store.db")
    await store.aclose()
    assert store.closed
    assert "closed" in repr(store)
    with pytest.raises(RuntimeError, match="EmbeddedStore is closed"):
        await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
    with pytest.raises(RuntimeError, match="EmbeddedStore is closed"):
        await store.retrieve_entity_by_identifier("x")
    with pytest.raises(RuntimeError, match="EmbeddedStore is closed"):
        await store.request("entities/query", {})


async def test_aclose_is_idempotent(tmp_path: Path) -> None:
    store = EmbeddedStore.open(tmp_path / "store.db")
    assert not store.closed
    await store.aclose()
    await store.aclose()
    async with store:
        pass  # leaving the context closes again: still fine
    assert store.closed


async def test_async_with_closes_the_store(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "store.db") as store:
        assert not store.closed
    assert store.closed


async def test_a_cancelled_caller_leaves_the_store_usable(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "store.db") as store:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await store.store([{"entity_type": "note", "title": "a"}], idempotency_key="a")
        assert scope.cancelled_caught
        result = await store.store([{"entity_type": "note", "title": "b"}], idempotency_key="b")
        assert result.entities[0].action == "created"
        # A store queued before its caller gave up still ran, as a sent request would.
        await anyio.lowlevel.checkpoint()
        assert (await store.query_entities(entity_type="note")).total in (1, 2)


async def test_unknown_request_action_is_refused(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "store.db") as store:
        with pytest.raises(ValueError, match="unknown action"):
            await store.request("timeline", {})


async def test_busy_timeout_bounds_the_wait_for_another_process_lock(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with EmbeddedStore.open(db):
        pass
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        async with EmbeddedStore.open(db, busy_timeout=0) as store:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                await store.store(
                    entities=[{"entity_type": "note", "title": "x"}], idempotency_key="k"
                )
    finally:
        other.execute("ROLLBACK")
        other.close()
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="busy_timeout"):
            EmbeddedStore.open(db, busy_timeout=bad)
