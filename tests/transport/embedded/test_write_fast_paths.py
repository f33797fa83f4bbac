"""The store's write skips work it can prove idle, and answers and stores the same.

A new entity's first observation sets its fields with nothing to compare (``fold``); a fold
that leaves the snapshot's fields as they were written skips their indexes and their JSON
again. Each test writes through a real store file and reads the answers back: a shortcut
taken where it does not hold shows up as a wrong snapshot or a wrong observation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from observation_rows_support import stored_fields

from neotoma_agent import NeotomaMemory
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


async def test_an_entity_with_observations_is_reduced_not_overwritten(path: Path) -> None:
    # summary is highest_priority: a later observation of lower priority does not win it.
    first = {"entity_type": "agent_outcome", "outcome_id": "o-1", "summary": "kept"}
    later = {"entity_type": "agent_outcome", "outcome_id": "o-1", "summary": "lower", "error": "e"}
    async with EmbeddedStore.open(path) as store:
        got = await store.store([first], idempotency_key="o-1", source_priority=200)
        entity_id = got.entities[0].entity_id
        assert got.entities[0].snapshot == {"outcome_id": "o-1", "summary": "kept"}
        again = await store.store([later], idempotency_key="o-2", source_priority=100)
        expected = {"outcome_id": "o-1", "summary": "kept", "error": "e"}
        assert again.entities[0].snapshot == expected
        snap = await store.get_entity_snapshot(entity_id)
        assert snap.snapshot == expected
        assert snap.observation_count == 2
        assert snap.provenance["summary"] == got.entities[0].observation_id
        assert snap.provenance["error"] == again.entities[0].observation_id


async def test_a_first_observation_keeps_only_what_a_reduction_keeps(path: Path) -> None:
    # Undeclared fields, nulls and merged arrays are not set as they are: the shortcut
    # is not taken, and the snapshot is the reduction's.
    outcome = {
        "entity_type": "agent_outcome",
        "outcome_id": "o-9",
        "summary": None,
        "undeclared": "x",
        "error": "boom",
    }
    async with EmbeddedStore.open(path) as store:
        got = await store.store([outcome], idempotency_key="o-9")
        assert got.entities[0].snapshot == {"outcome_id": "o-9", "error": "boom"}
        snap = await store.get_entity_snapshot(got.entities[0].entity_id)
        assert snap.snapshot == {"outcome_id": "o-9", "error": "boom"}
        assert set(snap.provenance) == {"outcome_id", "summary", "error"}


def _typed(value: Any) -> str:
    return json.dumps(value) + (
        "-" if isinstance(value, float) and math.copysign(1, value) < 0 else ""
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [(1, True), (True, 1), (0, False), ("1", 1)],
    ids=["int-then-bool", "bool-then-int", "zero-then-false", "text-then-int"],
)
async def test_a_restated_value_equal_in_python_is_stored_as_written(
    path: Path, before: Any, after: Any
) -> None:
    # 1 == True in Python, but not as JSON: the fold must see the snapshot change, give
    # the observation that shared the old fields its own back, and answer the new value.
    async with EmbeddedStore.open(path) as store:
        got = await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "size": before}], idempotency_key="w-1"
        )
        entity_id = got.entities[0].entity_id
        again = await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "size": after}], idempotency_key="w-2"
        )
        assert _typed(again.entities[0].snapshot["size"]) == _typed(after)
        snap = await store.get_entity_snapshot(entity_id)
        assert _typed(snap.snapshot["size"]) == _typed(after)
        observed = await store.list_observations(entity_id)
        sizes = [_typed(o.fields["size"]) for o in observed.observations]
        assert sizes == [_typed(after), _typed(before)]
    async with EmbeddedStore.open(path) as store:  # as stored, read by a fresh process's store
        snap = await store.get_entity_snapshot(entity_id)
        assert _typed(snap.snapshot["size"]) == _typed(after)
        observed = await store.list_observations(entity_id)
        assert [_typed(o.fields["size"]) for o in observed.observations] == sizes


async def test_a_restated_conversation_keeps_its_snapshot_and_its_summary(path: Path) -> None:
    # The conversation is restated by every turn, its fields unchanged: no index moves,
    # but its summary's last activity does.
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="restated")
        for i in range(3):
            async with memory.turn(f"question {i}", turn_id=f"t{i}") as t:
                t.reply = f"answer {i}"
        page = await store.conversation_summaries()
        (item,) = page.items
        assert (item.conversation_id, item.turns, item.completed, item.open) == (
            "restated",
            3,
            3,
            0,
        )
        found = await store.retrieve_entity_by_identifier("restated", entity_type="conversation")
        (entity,) = found.entities
        snap = await store.get_entity_snapshot(entity.entity_id)
        assert snap.snapshot == {
            "conversation_id": "restated",
            "started_at": snap.snapshot["started_at"],
        }
        observed = await store.list_observations(entity.entity_id)
        fields = [o.fields for o in observed.observations]
        # each turn restates it; its first turn also stamped its start, once
        restated = {"conversation_id": "restated"}
        assert fields == [restated, restated, {**restated, "started_at": ANY}, restated]
        assert snap.observation_count == 4
        assert snap.last_observation_at == item.last_activity


@pytest.mark.parametrize(
    ("restated", "shares"),
    [({"size": 2}, True), ({"size": None}, False), ({"size": 1}, False)],
    ids=["changed", "cleared", "unchanged"],
)
async def test_an_observation_restating_every_field_is_stored_right_whatever_the_fold(
    path: Path, restated: dict[str, Any], shares: bool
) -> None:
    # An observation that restates every field of the snapshot is written without its
    # fields (it is likely to share them); where the fold says otherwise (a null clears
    # a field; nothing changed, so the older one keeps sharing) the row gets them after.
    first = {"entity_type": "widget", "name": "Sprocket", "size": 1}
    again = {"entity_type": "widget", "name": "Sprocket", **restated}
    async with EmbeddedStore.open(path) as store:
        got = await store.store([first], idempotency_key="w-1")
        entity_id = got.entities[0].entity_id
        await store.store([again, {"entity_type": "widget", "name": "Gear"}], idempotency_key="w-2")
        observed = await store.list_observations(entity_id)
        assert [o.fields for o in observed.observations] == [
            {"name": "Sprocket", **restated},
            {"name": "Sprocket", "size": 1},
        ]
    newest, older = stored_fields(path, entity_id)
    if shares:
        assert (newest, older) == (None, '{"name":"Sprocket","size":1}')
    elif restated["size"] is None:
        assert (json.loads(newest or "null"), json.loads(older or "null")) == (
            {"name": "Sprocket", "size": None},
            {"name": "Sprocket", "size": 1},
        )
    else:  # the older one still shares the unchanged snapshot's fields
        assert older is None
        assert json.loads(newest or "null") == {"name": "Sprocket", "size": 1}
