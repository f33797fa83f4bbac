"""A message's PART_OF edge to its conversation is derived from the conversation index
(schema 10): the store that created the message writes no edge row, and every read of
edges answers as on the same file with every edge a row (``part_of_support.keep_rows``:
as schema 9 stored them). An edge written otherwise keeps its row; a second observation
of a derived edge writes its row, which then wins.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from merge_support import as_version_9, unmerge
from part_of_support import (
    apply,
    clock,
    edge_answers,
    edge_rows,
    keep_rows,
    kept_copy,
    part_of_rows,
)

from neotoma_agent import LOCAL_USER_ID, EmbeddedStore, purge_entities, purge_user
from neotoma_agent.transport.embedded import _schema
from neotoma_agent.transport.embedded._rows import encode_seen, entity_text

pytestmark = [pytest.mark.anyio]

OTHER = "bob@example.test"

# Turns in two conversations (and another user's in one of the same name), then each way an
# edge is written otherwise: a message stored alone and related later, a store's own edge
# with metadata, an edge to a target that is not a conversation.
SCENARIO: list[tuple[Any, ...]] = [
    ("turn", LOCAL_USER_ID, "c1"),
    ("turn", LOCAL_USER_ID, "c1"),
    ("turn", LOCAL_USER_ID, "c2"),
    ("turn", OTHER, "c1"),
    ("alone", LOCAL_USER_ID, "c2"),
    ("relate", LOCAL_USER_ID, "", -1, 0, None, None),  # the newest (lone) message, to c1
    ("store_edge", LOCAL_USER_ID, "c2", {"via": "import"}),
    ("store_edge", LOCAL_USER_ID, "c3", None),
    ("relate", LOCAL_USER_ID, "", 0, -1, None, None),  # the first message, to a turn record
]


async def _run(path: Path, steps: list[tuple[Any, ...]], first: int = 0) -> list[Any]:
    async with EmbeddedStore.open(path) as store:
        return [await apply(store, path, step, first + n) for n, step in enumerate(steps)]


async def _clocked(path: Path, steps: list[tuple[Any, ...]], first: int) -> list[Any]:
    """``steps`` (no turns: their records hold the engine's own times) at the same store
    times whatever the file: the same steps on two files answer the same."""
    with clock(first * 1000):
        return await _run(path, steps, first)


async def _answers(path: Path) -> dict[str, Any]:
    async with EmbeddedStore.open(path) as store:
        return {
            "local": await edge_answers(store, path),
            "other": await edge_answers(store.for_user(OTHER), path),
        }


async def test_a_turn_writes_no_part_of_row_and_every_read_gives_its_edges(
    tmp_path: Path,
) -> None:
    path = tmp_path / "derived.db"
    await _run(path, SCENARIO[:4])
    assert part_of_rows(path) == 0
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM conversation_messages").fetchone()[0] == 8
    kept = kept_copy(path, tmp_path / "kept.db")
    assert part_of_rows(kept) == 8
    derived = await _answers(path)
    assert derived == await _answers(kept)
    listing = derived["local"]["list"]
    assert listing["total"] == 6  # its own six (in conversations c1 and c2), not bob's
    assert {e["relationship_type"] for e in listing["relationships"]} == {"PART_OF"}
    assert derived["other"]["list"]["total"] == 2


async def test_edges_written_otherwise_keep_their_rows(tmp_path: Path) -> None:
    """A message related by a later ``create_relationship``, a store's edge with metadata and
    an edge to a turn record keep their rows; the edge of a message a store wrote with its
    conversation (listed twice) has none."""
    path = tmp_path / "derived.db"
    answers = await _run(path, SCENARIO)
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT metadata, observation_count FROM relationships "
            "WHERE relationship_type = 'PART_OF' ORDER BY metadata"
        ).fetchall()
    assert rows == [('{"via":"import"}', 1), ("{}", 1), ("{}", 1)]
    assert answers[7]["success"] is True  # c3's store: its edge (twice) derived, no row
    kept = kept_copy(path, tmp_path / "kept.db")
    assert part_of_rows(kept) == 3 + 9  # the three rows and the nine derived edges
    assert await _answers(path) == await _answers(kept)


# A second observation of a derived edge: the same one again (the message's own source, no
# metadata: nothing changes), then another (metadata: the row is written, with both).
AFTER: list[tuple[Any, ...]] = [
    ("relate", LOCAL_USER_ID, "", 0, 0, None, "message's"),
    ("relate", LOCAL_USER_ID, "", 1, 0, {"k": "v"}, None),
    ("relate", LOCAL_USER_ID, "", 1, 0, {"k": None}, "another"),
    ("relate", OTHER, "", 0, 0, None, None),  # another user's view of the same ids
    ("store_edge", LOCAL_USER_ID, "c1", None),
]


async def test_a_second_observation_of_a_derived_edge_answers_as_on_its_row(
    tmp_path: Path,
) -> None:
    path = tmp_path / "derived.db"
    await _run(path, SCENARIO)
    kept = kept_copy(path, tmp_path / "kept.db")
    before = part_of_rows(path)
    got = await _clocked(path, AFTER, 100)
    assert got == await _clocked(kept, AFTER, 100)
    assert got[0]["observation_count"] == 1  # a repeat
    assert got[1]["observation_count"] == 2
    assert got[2]["observation_count"] == 3
    assert got[2]["snapshot"] == {}
    assert got[3] == ("error", "NotFoundError")
    assert part_of_rows(path) == before + 1  # the re-observed edge's row, nothing else
    assert got[4]["success"] is True
    assert await _answers(path) == await _answers(kept)
    for file in (path, kept):  # the edges written since, as rows on both
        keep_rows(file)
    assert edge_rows(path) == edge_rows(kept)


async def test_a_purge_erases_derived_edges_as_it_erased_their_rows(tmp_path: Path) -> None:
    path = tmp_path / "derived.db"
    await _run(path, SCENARIO)
    kept = kept_copy(path, tmp_path / "kept.db")
    with closing(sqlite3.connect(path)) as conn:
        c1 = conn.execute(
            f"SELECT {entity_text('id')} FROM entities WHERE entity_type = 'conversation' "
            "AND uid = 0 "
            "AND json_extract(snapshot, '$.f.conversation_id') = 'c1'"
        ).fetchone()[0]
        message = conn.execute(
            f"SELECT {entity_text('id')} FROM entities WHERE entity_type = 'conversation_message' "
            "AND uid = 0 "
            "ORDER BY id LIMIT 1"
        ).fetchone()[0]
    for ids in ([message], [c1, message]):
        assert purge_entities(path, ids) == purge_entities(kept, ids)
        assert await _answers(path) == await _answers(kept)
    assert purge_user(path, OTHER) == purge_user(kept, OTHER)
    assert await _answers(path) == await _answers(kept)


async def test_the_store_answer_finds_a_messages_derived_conversation(tmp_path: Path) -> None:
    """A store of a message alone reports its conversation's message count, found by its
    PART_OF edge (derived here)."""
    path = tmp_path / "derived.db"
    await _run(path, SCENARIO[:1])
    kept = kept_copy(path, tmp_path / "kept.db")
    answers = []
    for file in (path, kept):
        async with EmbeddedStore.open(file) as store:
            found = await store.request(
                "entities/query", {"entity_type": "conversation_message", "limit": 5}
            )
            message = found["entities"][0]
            body = {
                "entities": [{"entity_type": "conversation_message", **message["snapshot"]}],
                "idempotency_key": "again",
            }
            answers.append(await store.request("store", body))
    assert answers[0] == answers[1]
    assert answers[0]["conversation_message_count"] == 2


async def test_migration_drops_only_the_rows_the_index_derives(tmp_path: Path) -> None:
    """A file with every edge a row, as schema 9 kept them, opened by schema 10: the rows
    the index derives go, those written otherwise stay, and every read answers the same."""
    path = tmp_path / "derived.db"
    await _run(path, [*SCENARIO, *AFTER])
    kept = kept_copy(path, tmp_path / "v9.db")
    unmerge(kept)
    as_version_9(kept)
    before = await _answers(path)
    async with EmbeddedStore.open(kept):
        pass
    assert edge_rows(kept) == edge_rows(path)
    assert await _answers(kept) == before


async def test_migration_keeps_a_row_whose_observation_or_time_is_not_the_derived_ones(
    tmp_path: Path,
) -> None:
    """Rows that differ from the derived edge only by their observation (another source at
    the message's time), their time, or a second observation stay rows."""
    path = tmp_path / "derived.db"
    await _run(path, SCENARIO[:3])
    kept = kept_copy(path, tmp_path / "v9.db")
    other = encode_seen(["0a0a0a0a-0000-4000-8000-000000000000"])
    with closing(sqlite3.connect(kept, isolation_level=None)) as conn:
        sources = [
            r[0]
            for r in conn.execute(
                "SELECT source_entity_id FROM relationships ORDER BY source_entity_id"
            )
        ]
        changes = (
            ("seen = ?", (other,)),
            ("last_observation_at = last_observation_at + 1", ()),
            ("seen = seen || ?, observation_count = 2", (other,)),
        )
        for (change, values), source in zip(changes, sources, strict=False):
            conn.execute(
                f"UPDATE relationships SET {change} WHERE source_entity_id = ?", (*values, source)
            )
    unmerge(kept)
    as_version_9(kept)
    async with EmbeddedStore.open(kept):
        pass
    with closing(sqlite3.connect(kept)) as conn:
        left = [r[0] for r in conn.execute("SELECT source_entity_id FROM relationships")]
    assert sorted(left) == sources[:3]


async def test_an_upgrade_to_10_that_fails_after_the_drop_leaves_the_file_at_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drop runs in the upgrade's one transaction: a failure after it leaves every
    PART_OF row of the version-9 file, and the next open upgrades it."""
    path = _fixture("v9_store", tmp_path / "store.db")
    rows = part_of_rows(path)
    assert rows == 12

    def drop_then_fail(conn: sqlite3.Connection) -> None:
        _schema._derive_part_of(conn)
        assert conn.execute("SELECT count(*) FROM relationships").fetchone()[0] == 4
        raise OSError("the disk went away")

    monkeypatch.setitem(_schema._AFTER, _schema._DERIVED_PART_OF, drop_then_fail)
    with pytest.raises(OSError, match="the disk went away"):
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 9
    assert part_of_rows(path) == rows
    monkeypatch.undo()
    async with EmbeddedStore.open(path):
        pass
    assert part_of_rows(path) == 0


def _fixture(name: str, to: Path) -> Path:
    from paths_support import TESTS

    shutil.copyfile(TESTS / "data" / name / "store.db", to)
    return to


@pytest.mark.parametrize("fixture", ["v1_store", "v4_store", "v7_store", "v8_store", "v9_store"])
async def test_an_older_files_edges_answer_the_same_after_the_migration(
    fixture: str, tmp_path: Path
) -> None:
    """Every read of edges on an older file, migrated, answers as with its rows put back
    (each of its PART_OF rows derivable: they were written by turns), and no PART_OF row
    is left."""
    path = _fixture(fixture, tmp_path / "store.db")
    async with EmbeddedStore.open(path):
        pass
    assert part_of_rows(path) == 0
    kept = kept_copy(path, tmp_path / "kept.db")
    assert part_of_rows(kept) > 0
    assert await _answers(path) == await _answers(kept)


# -- the property: any mix of steps, on a derived file and on its kept copy -----------------

users = st.sampled_from([LOCAL_USER_ID, OTHER])
conversations = st.sampled_from(["c1", "c2"])
metadata = st.one_of(st.none(), st.just({"k": "v"}), st.just({"k": None}))
sources = st.one_of(st.none(), st.just("message's"), st.just("src-1"))
writes = st.one_of(
    st.tuples(st.just("alone"), users, conversations),
    st.tuples(st.just("store_edge"), users, conversations, metadata),
    st.tuples(
        st.just("relate"),
        users,
        st.just(""),
        st.integers(0, 7),
        st.integers(0, 3),
        metadata,
        sources,
    ),
)
steps = st.one_of(st.tuples(st.just("turn"), users, conversations), writes)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.lists(steps, min_size=1, max_size=5), then=st.lists(writes, max_size=4))
@pytest.mark.one_backend
def test_any_steps_answer_the_same_with_edges_derived_or_kept(
    first: list[tuple[Any, ...]], then: list[tuple[Any, ...]]
) -> None:
    """After any steps, the file and its kept copy answer every read of edges the same;
    the same further steps on each answer the same, and leave the same edges."""

    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "derived.db"
            await _run(path, first)
            kept = kept_copy(path, Path(tmp) / "kept.db")
            assert await _answers(path) == await _answers(kept)
            assert await _clocked(path, then, 50) == await _clocked(kept, then, 50)
            assert await _answers(path) == await _answers(kept)
            for file in (path, kept):
                keep_rows(file)
            assert edge_rows(path) == edge_rows(kept)

    asyncio.run(check())
