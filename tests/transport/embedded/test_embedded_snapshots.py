"""Snapshots of the embedded store: per-field merge policies (semantics §1.4) and correct()."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent.exceptions import NotFoundError, ValidationError
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "store.db") as s:
        yield s


class Writer:
    """Stores one entity over and over under fresh idempotency keys."""

    def __init__(self, store: EmbeddedStore, base: Mapping[str, Any]) -> None:
        self.store = store
        self.base = dict(base)
        self.n = 0
        self.entity_id = ""

    async def write(self, **fields: Any) -> str:
        """Store ``base | fields``; return the observation id."""
        priority = fields.pop("source_priority", None)
        source = fields.pop("observation_source", None)
        self.n += 1
        result = await self.store.store(
            [{**self.base, **fields}],
            idempotency_key=f"{self.base.get('entity_type')}-{self.n}",
            source_priority=priority,
            observation_source=source,
        )
        self.entity_id = result.entities[0].entity_id
        assert result.entities[0].observation_id is not None
        return result.entities[0].observation_id

    async def snapshot(self) -> Mapping[str, Any]:
        return (await self.store.get_entity_snapshot(self.entity_id)).snapshot

    async def provenance(self) -> Mapping[str, Any]:
        return (await self.store.get_entity_snapshot(self.entity_id)).provenance


# -- last_write -------------------------------------------------------------------------------


async def test_last_write_field_takes_the_newest_value(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    await w.write(colour="red", size=1)
    newest = await w.write(colour="blue")
    assert await w.snapshot() == {"name": "Sprocket", "colour": "blue", "size": 1}
    assert (await w.provenance())["colour"] == newest


async def test_last_write_ignores_source_priority(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    await w.write(colour="red", source_priority=500)
    await w.write(colour="blue", source_priority=1)
    assert (await w.snapshot())["colour"] == "blue"


async def test_only_observations_carrying_a_field_compete_for_it(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    first = await w.write(colour="red")
    await w.write(size=3)
    assert await w.snapshot() == {"name": "Sprocket", "colour": "red", "size": 3}
    assert (await w.provenance())["colour"] == first


async def test_a_winning_null_clears_the_field(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    await w.write(colour="red")
    clearing = await w.write(colour=None)
    assert "colour" not in await w.snapshot()
    assert (await w.provenance())["colour"] == clearing
    await w.write(colour="green")
    assert (await w.snapshot())["colour"] == "green"


async def test_a_losing_null_does_not_clear_a_highest_priority_field(
    store: EmbeddedStore,
) -> None:
    w = Writer(store, {"entity_type": "company", "name": "Acme"})
    await w.write(website="acme.com", source_priority=200)
    await w.write(website=None, source_priority=100)
    assert (await w.snapshot())["website"] == "acme.com"


async def test_undeclared_fields_stay_on_the_observation_and_out_of_the_snapshot(
    store: EmbeddedStore,
) -> None:
    # As on a server (semantics §10): only declared fields reach a schema type's snapshot.
    w = Writer(store, {"entity_type": "conversation", "conversation_id": "c1"})
    await w.write(platform="demo", tool="demo")
    snapshot = await w.snapshot()
    assert "platform" not in snapshot
    assert "platform" not in await w.provenance()
    assert snapshot["tool"] == "demo"
    (observation,) = (await store.list_observations(w.entity_id)).observations
    assert observation.fields["platform"] == "demo"


async def test_a_store_answer_names_undeclared_and_missing_required_fields(
    store: EmbeddedStore,
) -> None:
    result = await store.store(
        [
            {"entity_type": "conversation_turn", "session_id": "c1", "turn_id": "t1", "x": 1},
            {
                "entity_type": "conversation_message",
                "role": "user",
                "content": "",
                "turn_key": "c1:t1",
            },
        ],
        idempotency_key="advisories",
    )
    assert result.raw["unknown_fields"] == ["x"]
    assert result.raw["unknown_fields_count"] == 1
    assert result.raw["required_fields_missing"] == [
        {"entity_type": "conversation_message", "field": "content", "observation_index": 1}
    ]
    codes = [(w["code"], w["observation_index"]) for w in result.raw["store_warnings"]]
    assert codes == [("UNKNOWN_FIELD", 0), ("MISSING_REQUIRED_FIELD", 1)]


# -- highest_priority -------------------------------------------------------------------------


async def test_highest_priority_field_keeps_the_higher_source_priority(
    store: EmbeddedStore,
) -> None:
    w = Writer(store, {"entity_type": "company", "name": "Acme"})
    winner = await w.write(website="acme.com", source_priority=150)
    await w.write(website="acme.example", source_priority=100)
    assert (await w.snapshot())["website"] == "acme.com"
    assert (await w.provenance())["website"] == winner
    await w.write(website="acme.io", source_priority=151)
    assert (await w.snapshot())["website"] == "acme.io"


async def test_highest_priority_tie_goes_to_the_more_trusted_observation_source(
    store: EmbeddedStore,
) -> None:
    w = Writer(store, {"entity_type": "company", "name": "Acme"})
    await w.write(website="sensor.example", observation_source="sensor")
    await w.write(website="summary.example", observation_source="llm_summary")
    assert (await w.snapshot())["website"] == "sensor.example"
    await w.write(website="workflow.example", observation_source="workflow_state")
    assert (await w.snapshot())["website"] == "sensor.example"


async def test_highest_priority_full_tie_goes_to_the_newest(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "company", "name": "Acme"})
    await w.write(website="old.example")
    await w.write(website="new.example")
    assert (await w.snapshot())["website"] == "new.example"


async def test_source_priority_tie_breaker_picks_the_smallest_observation_id(
    store: EmbeddedStore,
) -> None:
    # A conversation's title breaks full ties by observation id ascending, not recency.
    w = Writer(store, {"entity_type": "conversation", "conversation_id": "c1"})
    ids = {await w.write(title=f"Title {i}"): f"Title {i}" for i in range(6)}
    assert (await w.snapshot())["title"] == ids[min(ids)]
    assert (await w.provenance())["title"] == min(ids)


# -- merge_array ------------------------------------------------------------------------------


async def test_merge_array_unions_values_newest_first(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "conversation", "conversation_id": "c1"})
    first = await w.write(participants=["ana", "bob"])
    second = await w.write(participants=["carol", "ana"])
    assert (await w.snapshot())["participants"] == ["carol", "ana", "bob"]
    assert set((await w.provenance())["participants"].split(",")) == {first, second}


async def test_merge_array_parses_a_json_array_string(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "conversation", "conversation_id": "c1"})
    await w.write(topics=["hotels"])
    await w.write(topics='["flights", "hotels"]')
    assert (await w.snapshot())["topics"] == ["flights", "hotels"]


async def test_merge_array_higher_priority_write_replaces_the_union(
    store: EmbeddedStore,
) -> None:
    w = Writer(store, {"entity_type": "conversation", "conversation_id": "c1"})
    await w.write(participants=["ana"])
    await w.write(participants=["bob"])
    override = await w.write(participants=["carol"], source_priority=200)
    assert (await w.snapshot())["participants"] == ["carol"]
    assert (await w.provenance())["participants"] == override
    await w.write(participants=["dave"])  # lower priority: ignored
    assert (await w.snapshot())["participants"] == ["carol"]
    await w.write(participants=["erin"], source_priority=200)  # same priority: unioned
    assert (await w.snapshot())["participants"] == ["erin", "carol"]


# -- deletion ---------------------------------------------------------------------------------


async def test_deleted_entity_has_no_snapshot(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    await w.write(colour="red")
    await w.write(_deleted=True)
    with pytest.raises(NotFoundError) as info:
        await w.snapshot()
    assert (info.value.status, info.value.code) == (404, "RESOURCE_NOT_FOUND")
    assert info.value.body["message"] == "Entity not found"


async def test_lower_priority_deletion_does_not_delete(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    await w.write(colour="red", source_priority=200)
    await w.write(_deleted=True, source_priority=100)
    assert (await w.snapshot())["colour"] == "red"


async def test_a_newer_observation_at_equal_priority_revives_a_deleted_entity(
    store: EmbeddedStore,
) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    await w.write(colour="red")
    await w.write(_deleted=True)
    await w.write(colour="blue")
    assert (await w.snapshot())["colour"] == "blue"


async def test_unknown_entity_has_no_snapshot(store: EmbeddedStore) -> None:
    with pytest.raises(NotFoundError):
        await store.get_entity_snapshot("ent_000000000000000000000000")


# -- snapshot record --------------------------------------------------------------------------


async def test_snapshot_record_has_the_server_shape(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "conversation_message", "turn_key": "conv-1:t1"})
    await w.write(role="user", content="v1")
    last = await w.write(role="user", content="v2")
    record = await store.get_entity_snapshot(w.entity_id)
    raw = record.raw
    assert raw["entity_id"] == w.entity_id
    assert raw["entity_type"] == "conversation_message"
    assert raw["schema_version"] == "1.4"
    assert raw["user_id"] == "00000000-0000-0000-0000-000000000000"
    assert record.observation_count == 2
    assert record.snapshot == {"turn_key": "conv-1:t1", "role": "user", "content": "v2"}
    assert record.provenance == {"turn_key": last, "role": last, "content": last}
    observations = await store.list_observations(w.entity_id)
    assert record.last_observation_at == raw["computed_at"]
    assert record.last_observation_at == observations.observations[0].observed_at


# -- correct ----------------------------------------------------------------------------------


async def test_correction_wins_a_highest_priority_field(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "company", "name": "Acme"})
    await w.write(website="wrong.example")
    result = await store.correct(
        w.entity_id, "company", "website", "acme.com", idempotency_key="fix-website"
    )
    assert result.snapshot is not None
    assert result.snapshot["website"] == "acme.com"
    assert result.raw["success"] is True
    await w.write(website="later.example", source_priority=999)
    assert (await w.snapshot())["website"] == "acme.com"
    assert (await w.provenance())["website"] == result.observation_id
    (_newest, correction, _) = (await store.list_observations(w.entity_id)).observations
    assert (correction.id, correction.source_priority) == (result.observation_id, 1000)
    assert correction.source_id is None


async def test_identical_correction_retry_is_a_no_op(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "company", "name": "Acme"})
    await w.write(website="wrong.example")
    first = await store.correct(w.entity_id, "company", "website", "a.com", idempotency_key="k")
    again = await store.correct(w.entity_id, "company", "website", "a.com", idempotency_key="k")
    assert again.snapshot is None
    assert again.observation_id == first.observation_id
    assert len(await store.list_observations(w.entity_id)) == 2
    assert (await store.get_entity_snapshot(w.entity_id)).observation_count == 2


async def test_later_ordinary_store_overrides_a_corrected_last_write_field(
    store: EmbeddedStore,
) -> None:
    w = Writer(store, {"entity_type": "conversation_message", "turn_key": "c:1", "role": "user"})
    await w.write(content="typo")
    await store.correct(
        w.entity_id, "conversation_message", "content", "fixed", idempotency_key="k"
    )
    assert (await w.snapshot())["content"] == "fixed"
    await w.write(content="rewritten")
    assert (await w.snapshot())["content"] == "rewritten"


async def test_correction_replaces_a_merge_array_union(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "conversation", "conversation_id": "c1"})
    await w.write(participants=["ana", "bob"])
    await store.correct(w.entity_id, "conversation", "participants", ["ana"], idempotency_key="k")
    await w.write(participants=["mallory"])
    assert (await w.snapshot())["participants"] == ["ana"]


async def test_correct_of_an_unknown_entity_raises_not_found(store: EmbeddedStore) -> None:
    with pytest.raises(NotFoundError):
        await store.correct(
            "ent_000000000000000000000000", "company", "name", "x", idempotency_key="k"
        )


async def test_correct_of_a_type_without_schema_is_refused(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "widget", "name": "Sprocket"})
    await w.write(colour="red")
    with pytest.raises(ValidationError) as info:
        await store.correct(w.entity_id, "widget", "colour", "blue", idempotency_key="k")
    assert info.value.code == "ERR_NO_SCHEMA_FOR_ENTITY_TYPE"
    assert len(await store.list_observations(w.entity_id)) == 1


async def test_correct_with_a_value_json_cannot_carry_is_refused(store: EmbeddedStore) -> None:
    w = Writer(store, {"entity_type": "company", "name": "Acme"})
    await w.write(website="a.com")
    with pytest.raises(ValidationError):
        await store.correct(w.entity_id, "company", "website", float("nan"), idempotency_key="k")
    assert len(await store.list_observations(w.entity_id)) == 1
