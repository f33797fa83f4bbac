"""Relationships of the embedded store (semantics §1.5) and retrieve_related_entities (§5)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent.exceptions import ValidationError
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

CONV_1 = "ent_0029f6f8fa7224fb13a2366b"
MSG_T1 = "ent_8ba334e4de46bb2ab3e93d94"
ACME = "ent_af939bedafbd1838b259772a"
NOBODY = "ent_000000000000000000000000"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "store.db") as s:
        yield s


async def seed(store: EmbeddedStore) -> None:
    """Samples a_store_turn1_user and d1_store_company."""
    await store.store(
        [
            {"entity_type": "conversation", "conversation_id": "conv-1", "title": "Conv 1"},
            {"entity_type": "conversation_message", "role": "user", "sender_kind": "user",
             "content": "Tell me about Acme Corp", "turn_key": "conv-1:t1"},
        ],
        idempotency_key="conversation-conv-1-t1-user-turn",
        relationships=[{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
    )  # fmt: skip
    await store.store([{"entity_type": "company", "name": "Acme Corp"}], idempotency_key="acme")


# -- create_relationship ----------------------------------------------------------------------


async def test_relationship_is_keyed_type_source_target(store: EmbeddedStore) -> None:
    # sample e2_create_relationship
    await seed(store)
    edge = await store.create_relationship("REFERS_TO", CONV_1, ACME)
    assert edge.relationship_key == f"REFERS_TO:{CONV_1}:{ACME}"
    assert edge.observation_count == 1
    raw = edge.raw
    assert {k: raw[k] for k in ("schema_version", "snapshot", "provenance", "user_id")} == {
        "schema_version": "1.0",
        "snapshot": {},
        "provenance": {},
        "user_id": "00000000-0000-0000-0000-000000000000",
    }
    assert raw["last_observation_at"] == raw["computed_at"]


async def test_identical_relationship_repeat_collapses_into_one_observation(
    store: EmbeddedStore,
) -> None:
    # sample e2b: same synthetic source and metadata -> the repeat adds nothing.
    await seed(store)
    await store.create_relationship("REFERS_TO", CONV_1, ACME)
    again = await store.create_relationship("REFERS_TO", CONV_1, ACME)
    assert again.observation_count == 1
    related = await store.retrieve_related_entities(CONV_1, relationship_types=["REFERS_TO"])
    assert len(related.relationships) == 1


async def test_the_same_edge_from_another_source_counts_another_observation(
    store: EmbeddedStore,
) -> None:
    # sample e3: the store's edge (e1) and a create_relationships call make two observations.
    await seed(store)
    await store.store(
        [{"entity_type": "conversation_message", "role": "user", "sender_kind": "user",
          "content": "Tell me about Acme Corp", "turn_key": "conv-1:t1"}],
        idempotency_key="conversation-conv-1-t1-refs",
        relationships=[{"relationship_type": "REFERS_TO", "source_index": 0,
                        "target_entity_id": ACME}],
    )  # fmt: skip
    result = await store.create_relationships(
        [
            {
                "relationship_type": "REFERS_TO",
                "source_entity_id": MSG_T1,
                "target_entity_id": ACME,
            },
            {
                "relationship_type": "PART_OF",
                "source_entity_id": MSG_T1,
                "target_entity_id": NOBODY,
            },
        ]
    )
    assert [r.observation_count for r in result.relationships] == [2, 1]
    assert [r.raw["index"] for r in result.relationships] == [0, 1]
    assert result.errors == ()
    assert result.raw["success"] is True
    assert (result.raw["requested"], result.raw["created_count"]) == (2, 2)


async def test_relationship_metadata_is_last_write_per_key(store: EmbeddedStore) -> None:
    await seed(store)
    await store.create_relationship("REFERS_TO", MSG_T1, ACME, metadata={"a": 1, "b": 1})
    edge = await store.create_relationship("REFERS_TO", MSG_T1, ACME, metadata={"b": 2, "c": 3})
    assert edge.metadata == {"a": 1, "b": 2, "c": 3}
    assert edge.observation_count == 2
    edge = await store.create_relationship("REFERS_TO", MSG_T1, ACME, metadata={"a": None})
    assert edge.metadata == {"b": 2, "c": 3}
    related = await store.retrieve_related_entities(MSG_T1, relationship_types=["REFERS_TO"])
    assert related.relationships[0].metadata == {"b": 2, "c": 3}


async def test_reverse_direction_is_a_separate_edge(store: EmbeddedStore) -> None:
    await seed(store)
    forward = await store.create_relationship("related_to", CONV_1, ACME)
    backward = await store.create_relationship("related_to", ACME, CONV_1)
    assert forward.relationship_key != backward.relationship_key
    assert backward.observation_count == 1
    out = await store.retrieve_related_entities(ACME, direction="outbound")
    assert [r.relationship_key for r in out.relationships] == [f"related_to:{ACME}:{CONV_1}"]
    both = await store.retrieve_related_entities(ACME)
    assert len(both.relationships) == 2


async def test_relationship_endpoints_need_not_exist(store: EmbeddedStore) -> None:
    edge = await store.create_relationship("PART_OF", MSG_T1, NOBODY)
    assert edge.relationship_key == f"PART_OF:{MSG_T1}:{NOBODY}"


@pytest.mark.parametrize(
    "edge",
    [
        {"relationship_type": "MENTIONS", "source_entity_id": MSG_T1, "target_entity_id": ACME},
        {"relationship_type": "refers_to", "source_entity_id": MSG_T1, "target_entity_id": ACME},
        {"relationship_type": "REFERS_TO", "source_entity_id": "msg", "target_entity_id": ACME},
        {"relationship_type": "REFERS_TO", "source_entity_id": MSG_T1,
         "target_entity_id": "ENT_AF939BEDAFBD1838B259772A"},
        {"relationship_type": "REFERS_TO", "source_entity_id": MSG_T1, "target_entity_id": ACME,
         "metadata": {"w": float("nan")}},
    ],
    ids=["unknown_type", "wrong_case_type", "bad_source_id", "uppercase_target_id",
         "metadata_nan"],
)  # fmt: skip
async def test_create_relationship_refuses_bad_input(
    store: EmbeddedStore, edge: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError) as info:
        await store.create_relationship(
            edge["relationship_type"],
            edge["source_entity_id"],
            edge["target_entity_id"],
            metadata=edge.get("metadata"),
        )
    assert (info.value.status, info.value.code) == (400, "VALIDATION_INVALID_FORMAT")
    assert (await store.retrieve_related_entities(MSG_T1)).relationships == ()


async def test_create_relationships_writes_none_when_one_is_bad(store: EmbeddedStore) -> None:
    with pytest.raises(ValidationError):
        await store.create_relationships(
            [
                {"relationship_type": "REFERS_TO", "source_entity_id": MSG_T1,
                 "target_entity_id": ACME},
                {"relationship_type": "MENTIONS", "source_entity_id": MSG_T1,
                 "target_entity_id": CONV_1},
            ]
        )  # fmt: skip
    assert (await store.retrieve_related_entities(MSG_T1)).relationships == ()


async def test_store_relationship_by_index_and_by_id(store: EmbeddedStore) -> None:
    # sample h8: source by entity id, target by index.
    await seed(store)
    result = await store.store(
        [{"entity_type": "company", "name": "Globex"}],
        idempotency_key="globex-1",
        relationships=[
            {"relationship_type": "REFERS_TO", "source_entity_id": MSG_T1, "target_index": 0}
        ],
    )
    globex = result.entities[0].entity_id
    assert globex == "ent_f78bce5865fece1ebbbe5334"
    assert result.raw["relationships_created"] == [
        {"relationship_type": "REFERS_TO", "source_entity_id": MSG_T1, "target_entity_id": globex}
    ]


async def test_conversation_message_count_counts_messages_part_of_the_conversation(
    store: EmbeddedStore,
) -> None:
    await seed(store)
    reply = await store.store(
        [
            {"entity_type": "conversation", "conversation_id": "conv-1"},
            {"entity_type": "conversation_message", "role": "assistant",
             "content": "Acme is fictional.", "turn_key": "conv-1:t1:assistant"},
        ],
        idempotency_key="conversation-conv-1-t1-assistant-turn",
        relationships=[{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
    )  # fmt: skip
    assert reply.raw["conversation_message_count"] == 2
    # Re-observing an existing PART_OF edge does not count the message twice.
    again = await store.store(
        [{"entity_type": "conversation_message", "turn_key": "conv-1:t1", "content": "edit"}],
        idempotency_key="edit",
        relationships=[
            {"relationship_type": "PART_OF", "source_index": 0, "target_entity_id": CONV_1}
        ],
    )
    assert again.raw["conversation_message_count"] == 2


async def test_store_without_a_message_reports_no_conversation_message_count(
    store: EmbeddedStore,
) -> None:
    # samples f5 (and f3): a conversation alone carries no count.
    result = await store.store(
        [
            {
                "entity_type": "conversation",
                "conversation_id": "conv-2",
                "title": "Conversation conv-1",
            }
        ],
        idempotency_key="conv-2-same-title",
    )
    assert result.source_id == "e854bc70-4062-0ada-b625-094efaeb4430"
    assert "conversation_message_count" not in result.raw


# -- retrieve_related_entities ----------------------------------------------------------------


async def chain(store: EmbeddedStore) -> list[str]:
    """A -> B -> C -> D (depends_on) and A -> E (owns); returns the ids A..E."""
    result = await store.store(
        [{"entity_type": "widget", "name": n} for n in "ABCDE"],
        idempotency_key="chain",
        relationships=[
            {"relationship_type": "depends_on", "source_index": 0, "target_index": 1},
            {"relationship_type": "depends_on", "source_index": 1, "target_index": 2},
            {"relationship_type": "depends_on", "source_index": 2, "target_index": 3},
            {"relationship_type": "owns", "source_index": 0, "target_index": 4},
        ],
    )
    return [e.entity_id for e in result.entities]


async def test_related_entities_default_to_both_directions_and_one_hop(
    store: EmbeddedStore,
) -> None:
    a, b, c, _, _ = await chain(store)
    related = await store.retrieve_related_entities(b)
    assert {r.relationship_key for r in related.relationships} == {
        f"depends_on:{a}:{b}",
        f"depends_on:{b}:{c}",
    }
    assert [e.canonical_name for e in related.entities] == ["A", "C"]


async def test_related_entities_outbound_follows_edges_from_the_entity(
    store: EmbeddedStore,
) -> None:
    _a, b, c, _, _ = await chain(store)
    related = await store.retrieve_related_entities(b, direction="outbound")
    assert [(r.source_entity_id, r.target_entity_id) for r in related.relationships] == [(b, c)]
    assert [e.id for e in related.entities] == [c]


async def test_related_entities_inbound_follows_edges_into_the_entity(
    store: EmbeddedStore,
) -> None:
    a, b, _, _, _ = await chain(store)
    related = await store.retrieve_related_entities(b, direction="inbound")
    assert [(r.source_entity_id, r.target_entity_id) for r in related.relationships] == [(a, b)]
    assert [e.id for e in related.entities] == [a]


async def test_related_entities_filter_by_relationship_type(store: EmbeddedStore) -> None:
    a, _b, _, _, e = await chain(store)
    owns = await store.retrieve_related_entities(a, relationship_types=["owns"])
    assert [x.id for x in owns.entities] == [e]
    none = await store.retrieve_related_entities(a, relationship_types=["PART_OF"])
    assert (none.relationships, none.entities) == ((), ())


async def test_related_entities_walk_max_hops(store: EmbeddedStore) -> None:
    a, b, _c, _d, _e = await chain(store)
    two = await store.retrieve_related_entities(a, direction="outbound", max_hops=2)
    assert [x.canonical_name for x in two.entities] == ["B", "C", "E"]
    three = await store.retrieve_related_entities(a, direction="outbound", max_hops=3)
    assert [x.canonical_name for x in three.entities] == ["B", "C", "D", "E"]
    assert len(three.relationships) == 4
    # The start entity is never listed, even when a walk comes back to it.
    back = await store.retrieve_related_entities(b, max_hops=3)
    assert a in [x.id for x in back.entities]
    assert b not in [x.id for x in back.entities]


async def test_related_entities_are_raw_entity_rows_ordered_by_canonical_name(
    store: EmbeddedStore,
) -> None:
    await seed(store)
    await store.create_relationship("REFERS_TO", MSG_T1, ACME)
    related = await store.retrieve_related_entities(MSG_T1)
    assert [e.canonical_name for e in related.entities] == ["Acme", "conversation:conv-1"]
    row = related.raw["entities"][0]
    assert row["id"] == ACME
    assert row["aliases"] == []
    assert "snapshot" not in row


async def test_related_entities_refuse_a_bad_direction(store: EmbeddedStore) -> None:
    with pytest.raises(ValidationError):
        await store.request(
            "retrieve_related_entities", {"entity_id": MSG_T1, "direction": "outgoing"}
        )
