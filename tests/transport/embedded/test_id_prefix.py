"""The id index keyed by 4 bytes of the id (``_id_prefix``). What matters: the entity table
has no key on its id and its id index holds the id's first 4 bytes, not its 12; every
statement that compares an entity row's id seeks that index, never a scan (a statement
written as before, ``id = ?``, would scan the table: no index holds the whole id); ids
that share their first 4 bytes are each found as themselves; a version-28 file
(``tests/data/v28_store``) upgrades, rowids kept, and is written on; and every read and
write answers as on the same file as the version before held it."""

from __future__ import annotations

import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from file_workload_support import (
    Step,
    compared,
    fixed_clocks,
    same_on_both,
    steps,
    turn_on_recorded,
    write_steps,
)
from hypothesis import given
from part_of_support import clock
from paths_support import TESTS
from users_support import MARKS, everything_visible, seed_user
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore
from neotoma_agent.transport.embedded._conversation_index import row_of
from neotoma_agent.transport.embedded._db_thread import Job
from neotoma_agent.transport.embedded._id_prefix import ID_INDEX, ID_PREFIX, id_among, id_is, ids_in
from neotoma_agent.transport.embedded._purge import purge_entities
from neotoma_agent.transport.embedded._rows import entity_text, install
from neotoma_agent.transport.embedded._schema import MIGRATIONS, SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the prefix
BEFORE = MIGRATIONS.index(ID_PREFIX)

#: people of the local user whose ids share their first 4 bytes, two by two
#: (``test_type_prefix``: ``ent_bfb6da10...``, ``ent_271ff3c2...``, ``ent_9a8e6fa5...``)
_TIED = ("Ada 89596", "Ada 103534", "Ada 114796", "Ada 123213", "Ada 172512", "Ada 367")

#: an entity row's id compared through its prefix (what :func:`id_is` and the others write)
_PREFIXED = re.compile(r"substr\((\w+\.)?id, 1, 4\) (=|IN) ")
#: an entity row's id compared with a value as before the step (``id = ?``, ``e.id IN``)
_WHOLE = re.compile(r"(?<![\w.+])(?:(\w+)\.)?id (?:=|IN) ")
#: the aliases a statement gives the entity table
_ALIASES = re.compile(r"\bentities(?: AS)? (?!WHERE|ON|SET|NOT|CROSS|JOIN|USING)(\w+)")


def _schema(path: Path) -> dict[str, str]:
    with closing(sqlite3.connect(path)) as conn:
        return {
            str(name): str(sql)
            for name, sql in conn.execute(
                "SELECT name, coalesce(sql, '') FROM sqlite_master WHERE tbl_name = 'entities'"
            )
        }


def _payload(path: Path, index: str) -> int:
    with closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT sum(payload) FROM dbstat WHERE name = ?", (index,))
        return int(row.fetchone()[0])


def _ids_by_rowid(path: Path) -> list[tuple[int, Any]]:
    with closing(sqlite3.connect(path)) as conn:
        return [
            (int(r), i) for r, i in conn.execute("SELECT rowid, id FROM entities ORDER BY rowid")
        ]


async def _people(path: Path) -> list[str]:
    ids = []
    async with EmbeddedStore.open(path) as store:
        for n, name in enumerate((*_TIED, "Grace 1", "Grace 2")):
            result = await store.store(
                entities=[{"entity_type": "person", "name": name}], idempotency_key=f"p{n}"
            )
            ids.append(result.entities[0].entity_id)
    return ids


async def _point_reads(path: Path) -> dict[str, Any]:
    """Each person read by its id (a snapshot, the direct pass of a lookup, its
    observations) and each one's store again (merged into its own row)."""
    out: dict[str, Any] = {}
    with clock(10_000_000), fixed_clocks(10_000_000):
        async with EmbeddedStore.open(path) as store:
            query = {"entity_type": "person", "limit": 100}
            for person in (await store.request("entities/query", query))["entities"]:
                eid = person["entity_id"]
                out[eid] = [
                    await store.request(action, {"entity_id": eid})
                    for action in ("get_entity_snapshot", "list_observations", "get_entity")
                ] + [await store.request("retrieve_entity_by_identifier", {"identifier": eid})]
    return out


async def test_the_table_has_no_key_and_its_id_index_holds_4_bytes_of_each_id(
    tmp_path: Path,
) -> None:
    """And the migration keeps each row's rowid (a purged entity's is a gap: the rows after
    it keep theirs), and a purge finds its rows by the prefix."""
    path = tmp_path / "store.db"
    ids = await _people(path)
    assert purge_entities(path, [ids[1]]).entities == 1
    schema = _schema(path)
    assert "sqlite_autoindex_entities_1" not in schema
    assert "id TEXT NOT NULL," in schema["entities"]
    assert schema[ID_INDEX] == f"CREATE INDEX {ID_INDEX} ON entities (substr(id, 1, 4))"
    rows = _ids_by_rowid(path)
    assert [r for r, _ in rows] == [1, *range(3, len(ids) + 1)]
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    assert ID_INDEX not in _schema(old)
    # 8 bytes less an entry: the 12 of a packed id, 4 kept
    assert _payload(old, "sqlite_autoindex_entities_1") - _payload(path, ID_INDEX) == 8 * len(rows)
    async with EmbeddedStore.open(old):  # upgraded: the same rows at the same rowids
        pass
    assert _ids_by_rowid(old) == rows
    assert _schema(old) == schema


async def test_ids_that_share_their_first_4_bytes_are_each_found_as_themselves(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    ids = await _people(path)
    tied = ids[: len(_TIED)]
    assert [i[4:12] for i in tied[::2]] == [i[4:12] for i in tied[1::2]]
    async with EmbeddedStore.open(path) as store:
        for n, name in enumerate(_TIED):  # each one's store again: merged into its own row
            result = await store.store(
                entities=[{"entity_type": "person", "name": name, "notes": f"again {n}"}],
                idempotency_key=f"again{n}",
            )
            assert result.entities[0].entity_id == tied[n]
    reads = await _point_reads(path)
    for n, eid in enumerate(tied):
        snapshot, observations, _, direct = reads[eid]
        assert snapshot["entity_id"] == eid
        assert snapshot["snapshot"]["notes"] == f"again {n}"
        assert len(observations["observations"]) == 2
        assert [e["id"] for e in direct["entities"]] == [eid]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM entities").fetchone()[0] == len(ids)
    assert await _point_reads(copy_at_version(path, tmp_path / "before.db", BEFORE)) == reads


def _seeks_the_prefix(plan: list[str], aliases: set[str]) -> bool:
    """Whether each entity row a plan reads is sought (by the id's prefix or a rowid), and
    the id's prefix is sought at least once."""
    scans = [p for p in plan if re.match(rf"SCAN ({'|'.join(aliases)})\b", p)]
    return not scans and any(
        ID_INDEX in p or ("entities_by_type" in p and "<expr>=?" in p) for p in plan
    )


def _entity_aliases(sql: str) -> set[str]:
    return {"entities", *_ALIASES.findall(sql)}


async def test_every_statement_that_compares_an_entity_id_seeks_the_id_index(
    tmp_path: Path,
) -> None:
    """Traced: every statement the workload of ``test_user_plans`` runs (turns, stores,
    every read path, of three users), and the helpers' own forms (a purge's lists): each
    comparison of an entity row's id is through its prefix, and the plan seeks the id
    index (or the type index by the prefix), never a scan of the entity rows."""
    path = tmp_path / "memory.db"
    statements: list[str] = []
    async with EmbeddedStore.open(path) as store:
        for user, mark in MARKS.items():
            await seed_user(store.for_user(user), mark)
        job: Job[None] = Job(lambda conn: conn.set_trace_callback(statements.append))
        store._thread.submit(job)
        await job.wait()
        view = store.for_user("carol")
        await seed_user(view, "Rviewmark")
        with closing(sqlite3.connect(path)) as conn:
            ids = [r[0] for r in conn.execute(f"SELECT {entity_text('id')} FROM entities")]
        await everything_visible(view, ids)
        await everything_visible(store, ids)
        # a turn record observed after its close: its user's forgotten and restored (the
        # close its row held written as a row first, ``_close_row.materialize``)
        await store.forget_user("carol")
        await store.restore_user("carol")
    assert len(statements) > 200
    # the helpers' own forms (a purge's lists, a parameter by its place), with values bound
    forms = {
        f"SELECT * FROM entities WHERE {id_is('?1')}": (b"k" * 12,),
        f"SELECT * FROM entities WHERE {id_among(3)} AND +uid = 0": (b"k" * 12,) * 3,
        f"SELECT * FROM entities WHERE {id_among(40)}": (b"k" * 12,) * 40,
        f"SELECT * FROM entities WHERE {ids_in('?1')}": ("[]",),
        f"SELECT * FROM conversation_messages WHERE conversation_row = {row_of('?')}": ("k",),
        f"SELECT * FROM conversation_messages WHERE conversation_row = {row_of('?1')}": ("k",),
    }
    compared = {s: () for s in statements if _PREFIXED.search(s)}
    assert len(compared) > 50
    wrong: set[str] = set()
    with closing(sqlite3.connect(path)) as conn:
        conn.create_function("current_uid", 0, lambda: 0)
        install(conn)
        for sql, values in {**compared, **forms}.items():
            plan = [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", values)]
            if not _seeks_the_prefix(plan, _entity_aliases(sql)):
                wrong.add(f"{plan}: {sql[:300]}")
    assert not wrong, "\n".join(sorted(wrong))
    # and no statement compares an entity row's id as a whole (it would scan the rows)
    whole = set()
    for sql in statements:
        if "entities" not in sql:
            continue
        aliases = _entity_aliases(sql)
        for m in _WHOLE.finditer(sql):
            alias = m.group(1)
            if alias in aliases or (alias is None and _only_entities(sql)):
                whole.add(sql[:300])
    assert not whole, "\n".join(sorted(whole))


def _only_entities(sql: str) -> bool:
    """Whether an unqualified ``id`` of ``sql`` is an entity row's: its only table."""
    tables = set(re.findall(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+(\w+)", sql))
    return tables <= {"entities"} and "entities" in tables


async def test_a_version_28_file_upgrades_to_the_prefix_and_is_written_on(
    tmp_path: Path,
) -> None:
    """The file version 28 wrote (``tests/data/v28_store``): upgraded, its entity table has
    no key, its rows their rowids and its id index the prefix (its answers as recorded:
    ``test_embedded_migration``), and it is written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v28_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 28  # the file 28 wrote
    assert "sqlite_autoindex_entities_1" in _schema(path)
    rows = _ids_by_rowid(path)
    async with EmbeddedStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    schema = _schema(path)
    assert "sqlite_autoindex_entities_1" not in schema
    assert ID_INDEX in schema
    assert "entities_by_type" in schema
    assert _ids_by_rowid(path) == rows
    await turn_on_recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM entities")]
        assert len(ids) == len(set(ids))
        first = ids[0]
        assert conn.execute(
            f"SELECT count(*) FROM entities WHERE {id_is('?1')}", (first,)
        ).fetchone() == (1,)


async def test_a_prefixed_file_answers_as_its_copy_the_version_before_held(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await _people(path)
    await same_on_both(
        path, copy_at_version(path, tmp_path / "before.db", BEFORE), [("turn", 0, 0)],
        reads=_point_reads,
    )  # fmt: skip


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) and each person's point reads answer the same on the
    file and on its copy as the version before held it, upgraded; then the same writes on
    both write the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("prefixed_ids")
    path = tmp / "prefixed.db"
    await _people(path)
    await write_steps(path, [("turn", 0, 0), *before], 0)
    old = copy_at_version(path, tmp / "before.db", BEFORE)
    await same_on_both(path, old, after, reads=_point_reads)


async def test_the_full_text_indexes_write_their_segments_at_commit_alone(tmp_path: Path) -> None:
    """Turns (one caller, then four at once, whose stores share transactions) write each
    full-text index's pending terms at their transaction's COMMIT only: no statement that
    finds a row through the id's index (not unique) opens a savepoint that flushes them
    into a segment of their own."""
    from neotoma_agent import NeotomaMemory

    traced: list[str] = []
    async with EmbeddedStore.open(tmp_path / "store.db") as store:
        memories = [NeotomaMemory(store, conversation_id=f"c{i}") for i in range(4)]

        async def turn(memory: NeotomaMemory, n: int) -> None:
            async with memory.turn(f"question {n} about the plan", turn_id=f"t{n}") as t:
                t.reply = f"answer {n}: the plan is on track"

        for n in range(4):
            await turn(memories[n], n)  # (each conversation's first turn: not traced)

        job: Job[None] = Job(lambda conn: conn.set_trace_callback(traced.append))
        store._thread.submit(job)
        await job.wait()
        for n in range(4, 12):
            await turn(memories[n % 4], n)
        async with anyio.create_task_group() as tg:
            for n, memory in enumerate(memories):
                tg.start_soon(turn, memory, 20 + n)
    flushed = [
        next(s for s in reversed(traced[:i]) if not s.startswith("--"))
        for i, s in enumerate(traced)
        if re.match(r"-- (REPLACE|INSERT) INTO 'main'\.'\w+_data'", s)
    ]
    assert flushed
    assert {s.split()[0] for s in flushed} == {"COMMIT"}
