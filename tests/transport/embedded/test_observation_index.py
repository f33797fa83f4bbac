"""The observation rows by entity row number (``_observation_index``): each row holds its
entity row's rowid, and every statement that reads, writes or erases an entity's
observations finds them through the unique index by entity, ``(entity_row, id)``: the
pages and counts of the GET routes, an idempotent replay and the dedupe of a repeated
observation, the ``identity_basis`` filter, a derived PART_OF edge's source, a
correction's insert and a purge; and an observation's ``source`` (the first key of its
source) seeks the keys' index by source, on the source's first ``SOURCE_PREFIX`` bytes.
A purge deletes an entity's observations with its row, so that no row names a later
entity that takes a purged rowid again. And a file as the version before held it (by
ids), upgraded, answers every read and holds the same rows as this one."""

from __future__ import annotations

import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from close_row_support import closes_kept
from derived_restatement_support import rows_kept
from file_workload_support import Step, compared, same_on_both, steps, turn_on_recorded, write_steps
from hypothesis import given
from observation_index_support import BY_ROW, by_ids, unnumber_observations
from paths_support import TESTS
from users_support import everything_visible, seed_user
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_entities, purge_forgotten
from neotoma_agent.transport.embedded import _purge
from neotoma_agent.transport.embedded._db_thread import Job
from neotoma_agent.transport.embedded._key_rows import SOURCE_PREFIX
from neotoma_agent.transport.embedded._rows import entity_text, install
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

_COMPANY = {"entity_type": "company", "name": "Acme Corp", "domain": "acme.example"}
#: a statement that reads or writes rows of ``observations`` (not the keys' column)
_OF_OBSERVATIONS = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE)\s+observations\b")
#: how a plan may reach observation rows: by an entity through the index, or by seq
_REACHED = re.compile(
    r"^SEARCH (?:o|observations) USING (?:COVERING )?INDEX observations_by_entity "
    r"\(entity_row=\?"
    r"|^SEARCH (?:o|observations) USING INTEGER PRIMARY KEY \(rowid"
)
#: every way a statement finds an entity's observations, as the store writes it
_READS = {
    "an entity's observations (a page)": "identity_rule, seq FROM observations",
    "their count (GET /entities/{id}/observations)": "SELECT count(*) FROM observations",
    "the dedupe of a repeated observation": "SELECT seq FROM observations",
    "an idempotent replay": "JOIN entities e ON e.rowid = o.entity_row",
    "the identity_basis filter": "o.entity_row = entities.rowid",
    "a derived PART_OF edge's source": "o.entity_row = m.rowid",
    "an observation's insert": "INSERT OR IGNORE INTO observations",
    "a purge's seqs": "SELECT seq FROM observations WHERE entity_row IN",
    "a purge's deletion": "DELETE FROM observations WHERE entity_row IN",
}
#: an observation's ``source``: the first key of its source, by the index by source
_FIRST_KEY = re.compile(r"\bFROM idempotency_keys WHERE substr\(source_id")
_BY_SOURCE = re.compile(
    r"^SEARCH idempotency_keys USING INDEX idempotency_keys_by_source \(<expr>=\?\)$"
)


def _observation_rows(path: Path) -> list[tuple[str | None, int, str]]:
    """Every observation row as (its entity's name, its seq, its id's type), in seq order:
    None where its number finds no entity row."""
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT e.canonical_name, o.seq, typeof(o.entity_row) FROM observations o "
            "LEFT JOIN entities e ON e.rowid = o.entity_row ORDER BY o.seq"
        ).fetchall()


async def _workload(store: EmbeddedStore) -> list[str]:
    """Every path that reaches observation rows, run on ``store``; its statements."""
    await seed_user(store, "Zlocalmark")
    for key in ("k1", "k1", "k2"):  # a write, its replay, the same rows under a new key
        await store.store([_COMPANY], idempotency_key=key)
    (acme,) = (await store.query_entities(entity_type="company")).entities
    await store.request(
        "correct",
        {
            "entity_id": acme.entity_id,
            "entity_type": "company",
            "field": "domain",
            "value": "acme.test",
            "idempotency_key": "fix-1",
        },
    )
    await store.request(
        "entities/query", {"entity_types": ["company"], "identity_basis": "heuristic_name"}
    )
    with closing(sqlite3.connect(store.path)) as conn:
        ids = [str(r[0]) for r in conn.execute(f"SELECT {entity_text('id')} FROM entities")]
    traced: list[str] = []
    job: Job[None] = Job(lambda conn: conn.set_trace_callback(traced.append), writes=False)
    store._thread.submit(job)
    await job.wait()
    await store.store([_COMPANY], idempotency_key="k1")  # traced from here on
    await store.store([_COMPANY], idempotency_key="k3")
    await store.request(
        "correct",
        {
            "entity_id": acme.entity_id,
            "entity_type": "company",
            "field": "domain",
            "value": "acme.example",
            "idempotency_key": "fix-2",
        },
    )
    await store.request(
        "entities/query", {"entity_types": ["company"], "identity_basis": "heuristic_name"}
    )
    message = (await store.query_entities(entity_type="conversation_message")).entities[0]
    conversation = (await store.query_entities(entity_type="conversation")).entities[0]
    edge = {  # a derived PART_OF edge observed again, with metadata: a row of its own now
        "relationship_type": "PART_OF",
        "source_entity_id": message.entity_id,
        "target_entity_id": conversation.entity_id,
        "metadata": {"via": "import"},
    }
    await store.request("create_relationship", edge)
    await everything_visible(store, ids)
    return traced


def _purge_statements(path: Path) -> list[str]:
    """The statements a purge of every entity runs (rolled back)."""
    traced: list[str] = []
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        with closing(conn.execute(f"SELECT {entity_text('id')} FROM entities")) as rows:
            ids = [str(r[0]) for r in rows]
        conn.execute("BEGIN IMMEDIATE")
        conn.set_trace_callback(traced.append)
        _purge._rows(conn, ids)
        conn.set_trace_callback(None)
        conn.execute("ROLLBACK")
    return traced


async def test_every_statement_reaches_an_entitys_observations_through_the_index(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        statements = await _workload(store)
    statements += _purge_statements(path)
    of_observations = [s for s in statements if _OF_OBSERVATIONS.search(s)]
    unseen = [name for name, text in _READS.items() if not any(text in s for s in of_observations)]
    assert unseen == []
    first_keys = [s for s in statements if _FIRST_KEY.search(s)]
    assert first_keys
    walks: set[str] = set()
    with closing(sqlite3.connect(path)) as conn:
        conn.create_function("current_uid", 0, lambda: 0)  # the store's: any value plans alike
        install(conn)
        for sql in of_observations:
            for *_, detail in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
                names_rows = re.match(r"^(?:SCAN|SEARCH) (?:o|observations)\b", detail)
                if names_rows and not _REACHED.search(detail):
                    walks.add(f"{detail}: {sql[:200]}")
        for sql in first_keys:
            details = [d for *_, d in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            if not any(_BY_SOURCE.search(d) for d in details):
                walks.add(f"{details}: {sql[:200]}")
        index = "SELECT sql FROM sqlite_master WHERE name = 'idempotency_keys_by_source'"
        (by_source,) = conn.execute(index).fetchone()
    assert not walks, "\n".join(sorted(walks))
    assert f"substr(source_id, 1, {SOURCE_PREFIX})" in by_source


async def test_each_observation_row_holds_its_entity_rows_number(tmp_path: Path) -> None:
    """A correction's observation (a row of its own; a new entity's first one is in its
    entity row) names the company's row by its rowid, an integer."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        await store.store([_COMPANY], idempotency_key="w")
        (acme,) = (await store.query_entities(entity_type="company")).entities
        await store.request(
            "correct",
            {
                "entity_id": acme.entity_id,
                "entity_type": "company",
                "field": "domain",
                "value": "acme.test",
                "idempotency_key": "fix",
            },
        )
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = [r[1] for r in conn.execute("PRAGMA table_info(observations)")]
        assert "entity_row" in columns
        assert "entity_id" not in columns
        indexed = [r[2] for r in conn.execute("PRAGMA index_info(observations_by_entity)")]
        assert indexed == ["entity_row", "id"]
    assert [(name, kind) for name, _, kind in _observation_rows(path)] == [
        (acme.canonical_name, "integer")
    ]


async def test_a_purge_leaves_no_observation_to_an_entity_that_takes_its_rowid(
    tmp_path: Path,
) -> None:
    """A purged entity's observations go with its row: the entity that takes its rowid
    again (SQLite hands the largest rowid out again) lists its own observations only."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="kept")
        async with memory.turn("question", turn_id="t0") as t:
            t.reply = "answer"
        await store.store([_COMPANY], idempotency_key="w")
        (acme,) = (await store.query_entities(entity_type="company")).entities
        for n in range(2):  # observations of their own rows, newest rowid
            await store.request(
                "correct",
                {
                    "entity_id": acme.entity_id,
                    "entity_type": "company",
                    "field": "domain",
                    "value": f"acme{n}.test",
                    "idempotency_key": f"fix-{n}",
                },
            )
    with closing(sqlite3.connect(path)) as conn:
        (rowid,) = conn.execute("SELECT max(rowid) FROM entities").fetchone()
    stats = purge_entities(path, [acme.entity_id])
    assert stats.observations == 3
    async with EmbeddedStore.open(path) as store:
        await store.store(
            [{"entity_type": "company", "name": "Globex", "domain": "globex.example"}],
            idempotency_key="g",
        )
        (globex,) = (await store.query_entities(entity_type="company")).entities
        listed = await store.request("list_observations", {"entity_id": globex.entity_id})
    with closing(sqlite3.connect(path)) as conn:
        taken = conn.execute(
            f"SELECT rowid FROM entities WHERE {entity_text('id')} = ?", (globex.entity_id,)
        ).fetchone()[0]
    assert taken == rowid
    assert [o["fields"].get("domain") for o in listed["observations"]] == ["globex.example"]
    assert all(name is not None for name, _, _ in _observation_rows(path))


async def test_the_upgrade_numbers_the_version_20_files_observations(tmp_path: Path) -> None:
    """``tests/data/v20_store`` upgraded: the same rows (by their entities' names), and it is
    written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v20_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert by_ids(conn)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == BY_ROW - 1
        before = conn.execute(
            "SELECT e.canonical_name, o.seq, 'integer' FROM observations o "
            "JOIN entities e ON e.id = o.entity_id ORDER BY o.seq"
        ).fetchall()
    assert len(before) >= 3
    # (its restatements and closes as rows: ``_derived_restatement``, ``_close_row``)
    with rows_kept(), closes_kept():
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path)) as conn:
        assert not by_ids(conn)
    assert _observation_rows(path) == before
    await turn_on_recorded(path)


def _as_version_before(path: Path, to: Path) -> Path:
    return copy_at_version(path, to, BY_ROW - 1, unnumber_observations)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns, stores, corrections, deletions, edges and forgotten
    users: every read answers the same on the file and on its copy as the version before
    held it (by ids), upgraded, and so do the observation rows; then the same writes on
    both."""
    tmp = tmp_path_factory.mktemp("observations")
    path = tmp / "numbered.db"
    await write_steps(path, [("turn", 0, 0), ("store", 1, 3), ("correct", 0, 1), *before], 0)
    old = _as_version_before(path, tmp / "before.db")
    with closing(sqlite3.connect(old)) as conn:
        assert by_ids(conn)
    await same_on_both(path, old, after, rows=[_observation_rows])


async def test_a_forgotten_conversations_purge_erases_its_observations(tmp_path: Path) -> None:
    """``purge_forgotten`` deletes the observations of what it erases (by their entity
    rows' numbers), and no other."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        for cid in ("kept", "gone"):
            memory = NeotomaMemory(store, conversation_id=cid)
            async with memory.turn(f"{cid} question", turn_id="t0") as t:
                t.reply = f"{cid} answer"
        forgotten = await NeotomaMemory(store, conversation_id="gone").forget()
    before = _observation_rows(path)
    assert any(name == "conversation:gone" for name, _, _ in before)
    purge_forgotten(path, forgotten)
    after = _observation_rows(path)
    assert after == [row for row in before if "gone" not in str(row[0])]
    assert after
