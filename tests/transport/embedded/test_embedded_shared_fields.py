"""Schema version 4: an observation may share its fields with its entity's snapshot.

One observation per entity is stored without its fields while they are exactly the
snapshot's; a fold that changes the snapshot gives them back first. Each test reads the
answers through the store and checks the row on disk, so a broken hand-back shows up as a
wrong answer, not only as a different file.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from observation_rows_support import stored_fields
from paths_support import TESTS

from neotoma_agent import NeotomaMemory
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.embedded._rows import entity_text

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

DATA = TESTS / "data"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


async def _fields(store: EmbeddedStore, entity_id: str) -> list[dict[str, Any]]:
    """An entity's observations' fields, newest first, as the store answers them."""
    page = await store.request("list_observations", {"entity_id": entity_id})
    return [o["fields"] for o in page["observations"]]


async def test_a_new_entitys_only_observation_shares_the_snapshots_fields(path: Path) -> None:
    async with EmbeddedStore.open(path) as store:
        got = await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "size": 1}], idempotency_key="w-1"
        )
        entity_id = got.entities[0].entity_id
        assert await _fields(store, entity_id) == [{"name": "Sprocket", "size": 1}]
    assert stored_fields(path, entity_id) == [None]


async def test_a_changed_snapshot_gives_the_sharing_observation_its_fields_back(
    path: Path,
) -> None:
    async with EmbeddedStore.open(path) as store:
        first = await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "size": 1}], idempotency_key="w-1"
        )
        entity_id = first.entities[0].entity_id
        await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "size": 2}], idempotency_key="w-2"
        )
        await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "size": 3}], idempotency_key="w-3"
        )
        assert await _fields(store, entity_id) == [
            {"name": "Sprocket", "size": 3},
            {"name": "Sprocket", "size": 2},
            {"name": "Sprocket", "size": 1},
        ]
    # The newest shares; each older one got its fields back when the snapshot moved on.
    stored = stored_fields(path, entity_id)
    assert stored[0] is None
    assert [json.loads(s) for s in stored[1:] if s is not None] == [
        {"name": "Sprocket", "size": 2},
        {"name": "Sprocket", "size": 1},
    ]


async def test_fields_the_snapshot_does_not_hold_stay_on_their_observation(path: Path) -> None:
    # A cleared field (null) is not in the snapshot: the observation keeps its own fields.
    async with EmbeddedStore.open(path) as store:
        got = await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "colour": None}],
            idempotency_key="w-1",
        )
        entity_id = got.entities[0].entity_id
        assert await _fields(store, entity_id) == [{"name": "Sprocket", "colour": None}]
    assert stored_fields(path, entity_id) == ['{"name":"Sprocket","colour":null}']


async def test_a_turn_record_answers_both_its_observations_after_it_closes(path: Path) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-1", platform="test")
        async with memory.turn("Hello?", turn_id="t1") as t:
            t.reply = "Hi."
        with sqlite3.connect(path) as conn:
            (turn_id,) = conn.execute(
                f"SELECT {entity_text('id')} FROM entities WHERE entity_type = 'conversation_turn'"
            ).fetchone()
        statuses = [f["status"] for f in await _fields(store, turn_id)]
        snapshot = await store.request("get_entity_snapshot", {"entity_id": turn_id})
    assert statuses == ["completed", "open"]
    assert snapshot["snapshot"]["status"] == "completed"
    # The closing observation no longer equals the snapshot (the snapshot also holds what
    # the user store wrote: started_at, the model), so it is stored with its own fields.
    closing = stored_fields(path, turn_id)[0]
    assert closing is not None
    assert '"status":"completed"' in closing


async def test_a_version_3_file_shares_fields_and_answers_the_same_after_opening(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "v3_store" / "store.db", path)
    with sqlite3.connect(path) as conn:
        ids = [r[0] for r in conn.execute(f"SELECT {entity_text('id')} FROM entities ORDER BY id")]
    recorded = json.loads((DATA / "v3_store" / "answers.json").read_text())
    async with EmbeddedStore.open(path) as store:
        for entity_id in ids:
            got = await store.request("list_observations", {"entity_id": entity_id})
            assert got == recorded["observations"][entity_id]
    with sqlite3.connect(path) as conn:
        shared = conn.execute(
            "SELECT (SELECT count(*) FROM observations WHERE fields IS NULL) + (SELECT "
            "count(*) FROM entities WHERE first_id IS NOT NULL AND first_fields IS NULL)"
        )
        assert shared.fetchone()[0] > 0
        # Each conversation's messages numbered from 1 in their first-written order.
        positions = conn.execute(
            "SELECT conversation_row, group_concat(seq) FROM "
            "(SELECT conversation_row, seq FROM conversation_messages ORDER BY 1, 2) GROUP BY 1"
        ).fetchall()
        for _, listed in positions:
            assert listed == ",".join(str(i) for i in range(1, len(listed.split(",")) + 1))
        kinds = conn.execute(
            "SELECT DISTINCT typeof(seen), typeof(last_observation_at), typeof(computed_at) "
            "FROM relationships"
        ).fetchall()
        assert kinds == [("blob", "integer", "null")]
