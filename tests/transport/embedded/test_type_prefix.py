"""The type index keyed by 4 bytes of the id (``_type_prefix``). What matters: each entry
holds the id's first 4 bytes, not its 12; a type's reads keep the id order where two ids
share their first 4 bytes (a page by offset and by cursor, either way, the exports' walks,
the conversations' list); a page sorts the runs of equal bytes only, never the whole type;
a version-26 file (``tests/data/v26_store``) upgrades to it and is written on; and every
read and write answers as on the same file as the version before held it."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from file_workload_support import (
    Step,
    compared,
    same_on_both,
    steps,
    turn_on_recorded,
    write_steps,
)
from hypothesis import given
from paths_support import TESTS
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore
from neotoma_agent.transport.embedded import _first_id
from neotoma_agent.transport.embedded._schema import MIGRATIONS, SCHEMA_VERSION
from neotoma_agent.transport.embedded._type_prefix import TYPE_PREFIX

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the prefix
BEFORE = MIGRATIONS.index(TYPE_PREFIX)

#: people of the local user whose ids share their first 4 bytes, two by two, each pair's
#: larger id first (so that its row, created first, has the smaller rowid): found by
#: trying names (``resolve_identity``), ids ``ent_bfb6da107e...`` and ``ent_bfb6da1031...``,
#: ``ent_271ff3c2fe...`` and ``ent_271ff3c24a...``, ``ent_9a8e6fa5ae...`` and
#: ``ent_9a8e6fa5a1...``
_TIED = ("Ada 89596", "Ada 103534", "Ada 114796", "Ada 123213", "Ada 172512", "Ada 367")


def _index_sql(path: Path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'entities_by_type'")
        return str(row.fetchone()[0])


def _index_bytes(path: Path) -> int:
    """The type index's payload: every entry's bytes (SQLite's ``dbstat``)."""
    with closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT sum(payload) FROM dbstat WHERE name = 'entities_by_type'")
        return int(row.fetchone()[0])


def _count(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM entities").fetchone()[0])


async def _people(path: Path) -> list[str]:
    """The tied people and others, each pair's larger id created first; their ids."""
    ids = []
    async with EmbeddedStore.open(path) as store:
        for n, name in enumerate((*_TIED, "Grace 1", "Grace 2", "Grace 3")):
            result = await store.store(
                entities=[{"entity_type": "person", "name": name}], idempotency_key=f"p{n}"
            )
            ids.append(result.entities[0].entity_id)
    return ids


async def _typed_reads(path: Path) -> dict[str, Any]:
    """A type's reads in id order: its query pages by offset (one entity a page) and by
    cursor, ascending and descending, a field's scan of the type, the conversations."""
    out: dict[str, Any] = {}
    async with EmbeddedStore.open(path) as store:
        for etype in ("person", "conversation_message", "conversation"):
            for order in ("asc", "desc"):
                body: dict[str, Any] = {"entity_type": etype, "sort_order": order}
                whole = await store.request("entities/query", {**body, "limit": 100})
                ids = [e["entity_id"] for e in whole["entities"]]
                out[f"{etype} {order}"] = ids
                out[f"{etype} {order} offsets"] = [
                    [
                        e["entity_id"]
                        for e in (
                            await store.request("entities/query", {**body, "limit": 1, "offset": k})
                        )["entities"]
                    ]
                    for k in range(len(ids))
                ]
                walked: list[str] = []
                page = await store.request("entities/query", {**body, "limit": 2})
                while True:
                    walked += [e["entity_id"] for e in page["entities"]]
                    if "next_cursor" not in page:
                        break
                    page = await store.request(
                        "entities/query", {**body, "limit": 2, "cursor": page["next_cursor"]}
                    )
                out[f"{etype} {order} cursor"] = walked
        out["conversations"] = await store.get_route("/recent_conversations", {"limit": 100})
        out["scan"] = await store.request(
            "retrieve_entity_by_identifier",
            {"identifier": "nobody", "entity_type": "person", "by": "nickname"},
        )
    return out


async def test_the_type_index_holds_4_bytes_of_each_id(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await _people(path)
    assert "substr(id, 1, 4)" in _index_sql(path)
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    assert "substr" not in _index_sql(old)
    # 8 bytes less an entry: the 12 of a packed id, 4 kept
    assert _index_bytes(old) - _index_bytes(path) == 8 * _count(path)


async def test_a_types_reads_keep_the_id_order_where_ids_share_their_first_4_bytes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    ids = await _people(path)
    tied = ids[: len(_TIED)]
    assert [i[4:12] for i in tied[::2]] == [i[4:12] for i in tied[1::2]]
    assert all(a > b for a, b in zip(tied[::2], tied[1::2], strict=True))
    people = sorted(ids)
    reads = await _typed_reads(path)
    for order, expected in (("asc", people), ("desc", people[::-1])):
        assert reads[f"person {order}"] == expected
        assert reads[f"person {order} offsets"] == [[i] for i in expected]
        assert reads[f"person {order} cursor"] == expected
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    assert await _typed_reads(old) == reads


async def test_a_page_of_a_type_sorts_the_runs_of_equal_bytes_only(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await _people(path)
    statements: list[str] = []
    async with EmbeddedStore.open(path) as store:
        await store._run(lambda conn, body: conn.set_trace_callback(statements.append), {})
        page = await store.request("entities/query", {"entity_type": "person", "limit": 2})
        await store.request(
            "entities/query",
            {"entity_type": "person", "limit": 2, "cursor": page["next_cursor"]},
        )
        await store.request("entities/query", {"entity_type": "person", "limit": 2, "offset": 3})
        await store._run(lambda conn, body: conn.set_trace_callback(None), {})
    pages = [s for s in statements if "LIMIT" in s and "substr(id, 1, 4)" in s]
    assert len(pages) == 3
    with closing(sqlite3.connect(path)) as conn:
        conn.create_function("current_uid", 0, lambda: 0)
        _first_id.install(conn)  # (the page's rows' FIRST_META)
        for sql in pages:
            plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            assert any(p.startswith("SEARCH entities USING INDEX entities_by_type") for p in plan)
            assert "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY" in plan
            # (a sort of the whole type's rows would be "USE TEMP B-TREE FOR ORDER BY"; the
            # page's own rows, read by rowid, are sorted so)
            assert plan.count("USE TEMP B-TREE FOR ORDER BY") <= 1
            assert not any(p.startswith("SCAN entities") for p in plan)


async def test_a_version_26_file_upgrades_to_the_prefix_and_is_written_on(
    tmp_path: Path,
) -> None:
    """The file version 26 wrote (``tests/data/v26_store``): upgraded, its type index holds
    4 bytes of each id (its answers as recorded: ``test_embedded_migration``), and it is
    written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v26_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == BEFORE
    assert "substr" not in _index_sql(path)
    async with EmbeddedStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert "substr(id, 1, 4)" in _index_sql(path)
    await turn_on_recorded(path)
    assert await _typed_reads(path) == await _typed_reads(
        copy_at_version(path, tmp_path / "before.db", BEFORE)
    )


async def test_a_prefixed_file_answers_as_its_copy_the_version_before_held(
    tmp_path: Path,
) -> None:
    """The tied people and two users' turns and stores: every read answers the same on the
    file and on its copy as the version before held it, upgraded."""
    path = tmp_path / "store.db"
    await _people(path)
    await same_on_both(
        path, copy_at_version(path, tmp_path / "before.db", BEFORE), [("turn", 0, 0)],
        reads=_typed_reads,
    )  # fmt: skip


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) and a type's pages answer the same on the file and on
    its copy as the version before held it, upgraded; then the same writes on both write
    the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("prefixed")
    path = tmp / "prefixed.db"
    await _people(path)
    await write_steps(path, [("turn", 0, 0), *before], 0)
    old = copy_at_version(path, tmp / "before.db", BEFORE)
    await same_on_both(path, old, after, reads=_typed_reads)
