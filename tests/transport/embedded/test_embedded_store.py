"""EmbeddedStore.store: identity, actions, response shapes, idempotency and atomicity.

Expected ids and bodies come from calls recorded against a real Neotoma server
(``shared/reference/samples``); the few values a test needs are copied here so the suite
runs from a clean clone. The deliberate differences of the embedded store (atomic stores,
refusing what a server silently skips) are tested as our behaviour.
"""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent.exceptions import IdempotencyMismatchError, ValidationError
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.embedded._key_rows import key_text

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

# -- sample a_store_turn1_user (and b, c, h1, h2, which reuse its key) -----------------------

A_KEY = "conversation-conv-1-t1-user-turn"
A_ENTITIES: list[dict[str, Any]] = [
    {
        "entity_type": "conversation",
        "conversation_id": "conv-1",
        "title": "Conversation conv-1",
        "platform": "demo",
    },
    {
        "entity_type": "conversation_message",
        "role": "user",
        "sender_kind": "user",
        "content": "Tell me about Acme Corp",
        "turn_key": "conv-1:t1",
    },
]
A_RELATIONSHIPS: list[dict[str, Any]] = [
    {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}
]
A_SOURCE_ID = "0e1cca0d-526f-5ddd-e8ff-f46cde2e7cb5"
CONV_1 = "ent_0029f6f8fa7224fb13a2366b"
MSG_T1 = "ent_8ba334e4de46bb2ab3e93d94"
A_OBSERVATION_IDS = {
    CONV_1: "d0d34c8e-dc6f-a965-0d46-73dd42c6728c",
    MSG_T1: "6b8d5f2c-8b94-2624-345e-4349c28249b0",
}
ACME = "ent_af939bedafbd1838b259772a"


def a_entities() -> list[dict[str, Any]]:
    return copy.deepcopy(A_ENTITIES)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "store.db") as s:
        yield s


async def observation_count(store: EmbeddedStore, entity_id: str) -> int:
    return len(await store.list_observations(entity_id, limit=10_000))


async def entity_count(store: EmbeddedStore) -> int:
    return (await store.query_entities(limit=1)).total


async def store_a(store: EmbeddedStore) -> Any:
    return await store.store(a_entities(), idempotency_key=A_KEY, relationships=A_RELATIONSHIPS)


# -- identity ---------------------------------------------------------------------------------


async def test_store_assigns_the_servers_entity_ids_and_canonical_names(
    store: EmbeddedStore,
) -> None:
    # Rows of semantics §2.4: schema rules, suffix and honorific stripping, emails, verbatim.
    cases = [
        ({"entity_type": "conversation", "conversation_id": "chat-42", "title": "Trip"},
         "conversation:chat-42", "ent_f15284c1f078e824e4e9bb3b"),
        ({"entity_type": "company", "name": "Acme Corp.", "website": "acme.com"},
         "Acme", "ent_af939bedafbd1838b259772a"),
        ({"entity_type": "person", "name": "Ana Lopez", "email": "Ana.Lopez@Example.com"},
         "person:ana.lopez@example.com", "ent_c288134d4239c01f8f06b891"),
        ({"entity_type": "contact", "name": "Dr. Ana Lopez", "email": "a@x.io"},
         "Ana Lopez", "ent_5dceb1643488d383e31753d4"),
        ({"entity_type": "recipe", "canonical_name": "My-Pancakes_v2"},
         "My-Pancakes_v2", "ent_90acf70f0a002ec8705811b5"),
    ]  # fmt: skip
    result = await store.store([c[0] for c in cases], idempotency_key="ids")
    assert [(e.canonical_name, e.entity_id) for e in result.entities] == [
        (c[1], c[2]) for c in cases
    ]
    for _, name, entity_id in cases:
        snapshot = await store.get_entity_snapshot(entity_id)
        assert snapshot.entity_id == entity_id
        hit = await store.retrieve_entity_by_identifier(entity_id)
        assert hit.entities[0].canonical_name == name


async def test_store_rewrites_an_equivalent_entity_type_to_the_builtin_type(
    store: EmbeddedStore,
) -> None:
    result = await store.store(
        [{"entity_type": "Companies", "name": "Acme Corp"}], idempotency_key="plural"
    )
    assert result.entities[0].entity_type == "company"
    assert result.entities[0].entity_id == ACME


# -- actions ----------------------------------------------------------------------------------


async def test_first_store_of_an_entity_reports_created(store: EmbeddedStore) -> None:
    result = await store_a(store)
    assert [e.action for e in result.entities] == ["created", "created"]
    assert result.entities_created == 2
    assert [e.raw["resolver_path"][-1] for e in result.entities] == ["existing_row:none"] * 2


async def test_store_landing_on_an_existing_entity_reports_matched_existing(
    store: EmbeddedStore,
) -> None:
    await store_a(store)
    result = await store.store(
        [
            {
                "entity_type": "conversation_message",
                "role": "user",
                "content": "Tell me about Acme Corp (edited)",
                "turn_key": "conv-1:t1",
            }
        ],
        idempotency_key="edit",
    )
    (entry,) = result.entities
    assert (entry.entity_id, entry.action) == (MSG_T1, "matched_existing")
    assert entry.raw["resolver_path"] == [
        "schema:canonical_name_fields:turn_key",
        "existing_row:matched",
    ]
    assert result.entities_created == 0
    assert result.observations_created == 1
    assert await observation_count(store, MSG_T1) == 2


async def test_store_with_target_id_reports_extended_on_that_entity(
    store: EmbeddedStore,
) -> None:
    await store_a(store)
    result = await store.store(
        [{"entity_type": "conversation", "target_id": CONV_1, "summary": "About Acme"}],
        idempotency_key="extend",
    )
    (entry,) = result.entities
    assert (entry.entity_id, entry.action) == (CONV_1, "extended")
    assert result.entities_created == 1  # the server counts extended as created
    assert "target_id" not in (await store.list_observations(CONV_1)).observations[0].fields
    assert (await store.get_entity_snapshot(CONV_1)).snapshot["summary"] == "About Acme"


async def test_target_id_may_name_an_entity_created_earlier_in_the_same_batch(
    store: EmbeddedStore,
) -> None:
    result = await store.store(
        [
            {"entity_type": "conversation", "conversation_id": "conv-1"},
            {"entity_type": "conversation", "target_id": CONV_1, "title": "Later"},
        ],
        idempotency_key="same-batch",
    )
    assert [e.action for e in result.entities] == ["created", "extended"]
    assert (await store.get_entity_snapshot(CONV_1)).snapshot == {
        "conversation_id": "conv-1",
        "title": "Later",
    }


async def test_target_id_naming_no_entity_is_refused(store: EmbeddedStore) -> None:
    # A server appends to any well-formed id; we refuse rather than orphan the observation.
    with pytest.raises(ValidationError) as info:
        await store.store(
            [{"entity_type": "note", "target_id": "ent_000000000000000000000000", "title": "x"}],
            idempotency_key="orphan",
        )
    assert info.value.code == "ERR_STORE_RESOLUTION_FAILED"
    assert info.value.body["error"]["issues"][0]["code"] == "ERR_TARGET_NOT_FOUND"
    assert await entity_count(store) == 0


# -- response shapes --------------------------------------------------------------------------


async def test_fresh_store_answers_like_the_server(store: EmbeddedStore) -> None:
    result = await store_a(store)
    raw = result.raw
    assert (raw["success"], raw["replayed"], raw["commit"]) == (True, False, True)
    assert raw["source_id"] == A_SOURCE_ID
    assert (raw["entities_created"], raw["observations_created"]) == (2, 2)
    assert raw["conversation_message_count"] == 1
    assert raw["relationships_created"] == [
        {"relationship_type": "PART_OF", "source_entity_id": MSG_T1, "target_entity_id": CONV_1}
    ]
    conv, msg = raw["entities"]
    assert {k: v for k, v in conv.items() if k != "entity_snapshot_after"} == {
        "entity_id": CONV_1,
        "entity_type": "conversation",
        "observation_id": A_OBSERVATION_IDS[CONV_1],
        "observation_index": 0,
        "action": "created",
        "canonical_name": "conversation:conv-1",
        "resolver_path": [
            "schema:canonical_name_fields:composite:conversation_id",
            "existing_row:none",
        ],
        "identity_basis": "schema_rule",
        "identity_rule": "composite:conversation_id",
    }
    assert {k: v for k, v in msg.items() if k != "entity_snapshot_after"} == {
        "entity_id": MSG_T1,
        "entity_type": "conversation_message",
        "observation_id": A_OBSERVATION_IDS[MSG_T1],
        "observation_index": 1,
        "action": "created",
        "canonical_name": "conversation_message:conv-1:t1",
        "resolver_path": ["schema:canonical_name_fields:turn_key", "existing_row:none"],
        "identity_basis": "schema_rule",
        "identity_rule": "composite:turn_key",
    }
    assert msg["entity_snapshot_after"] == {
        "role": "user",
        "sender_kind": "user",
        "content": "Tell me about Acme Corp",
        "turn_key": "conv-1:t1",
    }
    # As on a server: the undeclared "platform" stays on the observation only.
    assert conv["entity_snapshot_after"] == {
        "conversation_id": "conv-1",
        "title": "Conversation conv-1",
    }


async def test_fresh_store_lists_entities_in_request_order_with_observation_index(
    store: EmbeddedStore,
) -> None:
    entities = [{"entity_type": "task", "title": f"Task {i}"} for i in (3, 1, 2)] + [
        {"entity_type": "company", "name": "Globex"}
    ]
    result = await store.store(entities, idempotency_key="order")
    assert [e.raw["observation_index"] for e in result.entities] == [0, 1, 2, 3]
    assert [e.canonical_name for e in result.entities] == [
        "task:Task 3",
        "task:Task 1",
        "task:Task 2",
        "Globex",
    ]
    assert result.entity_id(3) == result.entities[3].entity_id


async def test_store_source_and_observation_ids_equal_the_servers(store: EmbeddedStore) -> None:
    result = await store_a(store)
    assert result.source_id == A_SOURCE_ID
    assert {e.entity_id: e.observation_id for e in result.entities} == A_OBSERVATION_IDS
    for entity_id, observation_id in A_OBSERVATION_IDS.items():
        (obs,) = (await store.list_observations(entity_id)).observations
        assert (obs.id, obs.source_id) == (observation_id, A_SOURCE_ID)
    # sample d1_store_company
    company = await store.store(
        [{"entity_type": "company", "name": "Acme Corp"}], idempotency_key="company-acme-corp"
    )
    assert company.source_id == "280faed3-649f-2f21-3067-9aaff7210dd4"
    assert company.entities[0].observation_id == "a997fbd4-d07b-c8a7-ba5d-9a1416fcf4f2"


async def test_observation_fields_are_the_element_minus_type_intent_and_target_id(
    store: EmbeddedStore,
) -> None:
    await store.store(
        [{"entity_type": "note", "title": "n", "intent": "create_new", "Body": "Kept As Is"}],
        idempotency_key="fields",
    )
    (hit,) = (await store.query_entities(entity_type="note")).entities
    (obs,) = (await store.list_observations(hit.entity_id)).observations
    assert obs.fields == {"title": "n", "Body": "Kept As Is"}
    assert (obs.source_priority, obs.observation_source) == (100, "llm_summary")


# -- idempotency ------------------------------------------------------------------------------


async def test_same_key_and_same_entities_replays_and_writes_nothing(
    store: EmbeddedStore,
) -> None:
    first = await store_a(store)
    second = await store_a(store)
    raw = second.raw
    assert raw["replayed"] is True
    assert raw["source_id"] == first.source_id
    assert (raw["entities_created"], raw["observations_created"]) == (0, 2)
    # Like the server: newest observation first, no action / index / canonical name.
    assert [e["entity_id"] for e in raw["entities"]] == [MSG_T1, CONV_1]
    for entry in raw["entities"]:
        assert entry["deduplicated"] is True
        assert entry["observation_id"] == A_OBSERVATION_IDS[entry["entity_id"]]
        assert not {"action", "observation_index", "canonical_name"} & entry.keys()
    # The parsed result is still aligned to the request.
    assert [e.entity_id for e in second.entities] == [CONV_1, MSG_T1]
    assert [e.observation_index for e in second.entities] == [0, 1]
    assert await observation_count(store, CONV_1) == 1
    assert await observation_count(store, MSG_T1) == 1
    assert await entity_count(store) == 2


async def test_replay_reports_current_snapshots(store: EmbeddedStore) -> None:
    await store_a(store)
    await store.store(
        [{"entity_type": "conversation_message", "turn_key": "conv-1:t1", "content": "edited"}],
        idempotency_key="edit",
    )
    replay = await store_a(store)
    assert replay.replayed
    assert replay.entities[1].snapshot is not None
    assert replay.entities[1].snapshot["content"] == "edited"


async def test_same_key_with_changed_relationships_only_still_replays(
    store: EmbeddedStore,
) -> None:
    # sample h1: relationships are not part of the idempotency hash.
    await store_a(store)
    replay = await store.store(a_entities(), idempotency_key=A_KEY, relationships=[])
    assert replay.replayed
    related = await store.retrieve_related_entities(MSG_T1)
    assert len(related.relationships) == 1


async def test_same_key_with_different_entities_raises_idempotency_mismatch(
    store: EmbeddedStore,
) -> None:
    # sample c_store_same_key_different_content
    await store_a(store)
    changed = a_entities()
    changed[1]["content"] = "Tell me about Globex instead"
    with pytest.raises(IdempotencyMismatchError) as info:
        await store.store(changed, idempotency_key=A_KEY, relationships=A_RELATIONSHIPS)
    error = info.value
    assert (error.status, error.code) == (400, "ERR_IDEMPOTENCY_MISMATCH")
    assert error.body["error"]["code"] == "ERR_IDEMPOTENCY_MISMATCH"
    assert A_KEY in error.body["error"]["message"]
    assert error.hint
    assert (await store.get_entity_snapshot(MSG_T1)).snapshot["content"] == (
        "Tell me about Acme Corp"
    )
    assert await observation_count(store, MSG_T1) == 1


async def test_same_key_with_reordered_entity_keys_is_a_mismatch(store: EmbeddedStore) -> None:
    # sample h2: the hash is over the entities as sent, key order included.
    await store_a(store)
    reordered = a_entities()
    conv = reordered[0]
    reordered[0] = {k: conv[k] for k in ("title", "platform", "conversation_id", "entity_type")}
    with pytest.raises(IdempotencyMismatchError):
        await store.store(reordered, idempotency_key=A_KEY, relationships=A_RELATIONSHIPS)


async def test_same_entities_under_a_new_key_reuse_the_source_and_add_no_observation(
    store: EmbeddedStore,
) -> None:
    # Semantics §1.6: sources are unique per content; observation ids include the source.
    await store_a(store)
    again = await store.store(a_entities(), idempotency_key="another-key")
    assert not again.replayed
    assert again.source_id == A_SOURCE_ID
    assert [e.action for e in again.entities] == ["matched_existing", "matched_existing"]
    assert {e.entity_id: e.observation_id for e in again.entities} == A_OBSERVATION_IDS
    assert await observation_count(store, CONV_1) == 1
    assert await observation_count(store, MSG_T1) == 1


# -- atomicity --------------------------------------------------------------------------------

GOOD_BATCH: list[dict[str, Any]] = [
    {"entity_type": "conversation", "conversation_id": "conv-9", "title": "Nine"},
    {
        "entity_type": "conversation_message",
        "role": "user",
        "content": "hi",
        "turn_key": "conv-9:1",
    },
    {"entity_type": "company", "name": "Globex"},
]
GOOD_RELATIONSHIPS: list[dict[str, Any]] = [
    {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0},
    {"relationship_type": "REFERS_TO", "source_index": 1, "target_index": 2},
]

Batch = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def _bad_unresolvable_name(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    return [*e, {"entity_type": "widget", "status": "open"}], r


def _bad_assistant_reuses_user_turn_key(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    reply = {"entity_type": "conversation_message", "role": "assistant", "content": "hello"}
    return [*e, {**reply, "turn_key": "conv-9:1"}], r


def _bad_relationship_id_format(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    return e, [
        *r,
        {"relationship_type": "REFERS_TO", "source_index": 1, "target_entity_id": "acme"},
    ]


def _bad_unknown_relationship_type(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    return e, [*r, {"relationship_type": "MENTIONS", "source_index": 1, "target_index": 2}]


def _bad_index_out_of_range(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    return e, [*r, {"relationship_type": "REFERS_TO", "source_index": 1, "target_index": 9}]


def _bad_missing_entity_type(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    return [*e, {"name": "typeless"}], r


def _bad_nan_value(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    return [*e, {"entity_type": "note", "title": "n", "score": float("nan")}], r


def _bad_relationship_metadata(e: list[dict[str, Any]], r: list[dict[str, Any]]) -> Batch:
    edge = {"relationship_type": "REFERS_TO", "source_index": 1, "target_index": 2}
    return e, [*r, {**edge, "metadata": {"weight": float("inf")}}]


@pytest.mark.parametrize(
    "spoil",
    [
        _bad_unresolvable_name,
        _bad_assistant_reuses_user_turn_key,
        _bad_relationship_id_format,
        _bad_unknown_relationship_type,
        _bad_index_out_of_range,
        _bad_missing_entity_type,
        _bad_nan_value,
        _bad_relationship_metadata,
    ],
    ids=lambda f: f.__name__.removeprefix("_bad_"),
)
async def test_batch_with_one_bad_part_stores_nothing_and_the_corrected_batch_succeeds(
    store: EmbeddedStore, tmp_path: Path, spoil: Callable[..., Batch]
) -> None:
    # The user message of conv-9 already exists (another key), so an assistant reply that
    # reuses its turn_key conflicts; its observation count shows nothing was added.
    await store.store([GOOD_BATCH[1]], idempotency_key="earlier-user-message")
    user_message = await store.retrieve_entity_by_identifier("conversation_message:conv-9:1")
    message_id = user_message.entities[0].id
    before_entities = await entity_count(store)

    entities, relationships = spoil(copy.deepcopy(GOOD_BATCH), copy.deepcopy(GOOD_RELATIONSHIPS))
    with pytest.raises(ValidationError):
        await store.store(entities, idempotency_key="turn-9", relationships=relationships)

    assert await entity_count(store) == before_entities
    assert await observation_count(store, message_id) == 1
    assert (await store.retrieve_related_entities(message_id)).relationships == ()
    with sqlite3.connect(tmp_path / "store.db") as conn:
        keys = [key_text(row[0]) for row in conn.execute("SELECT key FROM idempotency_keys")]
    assert keys == ["earlier-user-message"]

    fixed = await store.store(
        copy.deepcopy(GOOD_BATCH), idempotency_key="turn-9", relationships=GOOD_RELATIONSHIPS
    )
    assert not fixed.replayed
    assert [e.action for e in fixed.entities] == ["created", "matched_existing", "created"]
    assert len((await store.retrieve_related_entities(message_id)).relationships) == 2


async def test_assistant_message_reusing_a_user_turn_key_in_the_same_batch_is_refused(
    store: EmbeddedStore,
) -> None:
    base = {"entity_type": "conversation_message", "turn_key": "c:1"}
    with pytest.raises(ValidationError) as info:
        await store.store(
            [
                {**base, "role": "user", "content": "q"},
                {**base, "role": "assistant", "content": "a"},
            ],
            idempotency_key="conflict",
        )
    (issue,) = info.value.body["error"]["issues"]
    assert (issue["code"], issue["observation_index"]) == (
        "ERR_CONVERSATION_MESSAGE_ROLE_CONFLICT",
        1,
    )
    assert await entity_count(store) == 0


async def test_resolution_failures_are_collected_batch_wide(store: EmbeddedStore) -> None:
    with pytest.raises(ValidationError) as info:
        await store.store(
            [
                {"entity_type": "widget", "status": "open"},
                {"entity_type": "note", "title": "fine"},
                {"entity_type": "widget", "category": "misc"},
            ],
            idempotency_key="two-bad",
        )
    body = info.value.body["error"]
    assert body["code"] == "ERR_STORE_RESOLUTION_FAILED"
    assert [(i["observation_index"], i["code"]) for i in body["issues"]] == [
        (0, "ERR_CANONICAL_NAME_UNRESOLVED"),
        (2, "ERR_CANONICAL_NAME_UNRESOLVED"),
    ]


# -- collision policy -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entity", "entity_id", "canonical_name", "resolver_step"),
    [
        # samples f3 / f3b: a conversation without conversation_id, by title
        (
            {"entity_type": "conversation", "title": "Conversation conv-1"},
            "ent_56302011567583ae4d003f9c",
            "Conversation conv 1",
            "name_key:title",
        ),
        # samples f4 / f4b: a message without turn_key, by its content
        (
            {"entity_type": "conversation_message", "role": "user", "content": "no turn key here"},
            "ent_3722a50f61aecc5458adbf3c",
            "no turn key here",
            "heuristic:content",
        ),
    ],
    ids=["conversation_by_title", "message_by_content"],
)
async def test_reject_policy_creates_once_then_refuses_the_heuristic_match(
    store: EmbeddedStore,
    entity: dict[str, Any],
    entity_id: str,
    canonical_name: str,
    resolver_step: str,
) -> None:
    first = await store.store([entity], idempotency_key="first")
    assert (first.entities[0].entity_id, first.entities[0].action) == (entity_id, "created")
    assert first.entities[0].canonical_name == canonical_name
    with pytest.raises(ValidationError) as info:
        await store.store([dict(entity)], idempotency_key="second")
    error = info.value.body["error"]
    assert error["code"] == "ERR_STORE_RESOLUTION_FAILED"
    assert error["message"] == "Structured store refused: 1 observation(s) failed resolution."
    (issue,) = error["issues"]
    assert (issue["observation_index"], issue["code"]) == (0, "ERR_MERGE_REFUSED")
    assert issue["details"] == {
        "entity_id": entity_id,
        "canonical_name": canonical_name,
        "resolver_path": [resolver_step],
        "reason": "schema_policy",
        "policy": "reject",
    }
    assert await observation_count(store, entity_id) == 1


async def test_reject_policy_still_matches_through_the_schema_rule(store: EmbeddedStore) -> None:
    await store_a(store)
    again = await store.store(
        [{"entity_type": "conversation", "conversation_id": "conv-1", "title": "New title"}],
        idempotency_key="again",
    )
    assert (again.entities[0].entity_id, again.entities[0].action) == (CONV_1, "matched_existing")


async def test_merge_policy_merges_a_contact_whose_name_differs_by_honorific(
    store: EmbeddedStore,
) -> None:
    first = await store.store(
        [{"entity_type": "contact", "name": "Ms. Jane Doe", "email": "jane@a.io"}],
        idempotency_key="jane-1",
    )
    second = await store.store(
        [{"entity_type": "contact", "name": "Jane Doe", "email": "jane@b.io"}],
        idempotency_key="jane-2",
    )
    assert first.entities[0].canonical_name == "Jane Doe"
    assert second.entities[0].entity_id == first.entities[0].entity_id
    assert second.entities[0].action == "matched_existing"
    assert await observation_count(store, first.entities[0].entity_id) == 2


async def test_strict_store_refuses_a_heuristic_merge(store: EmbeddedStore) -> None:
    await store.store([{"entity_type": "widget", "name": "Sprocket"}], idempotency_key="w1")
    with pytest.raises(ValidationError) as info:
        await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "size": 2}],
            idempotency_key="w2",
            strict=True,
        )
    assert info.value.body["error"]["issues"][0]["details"]["reason"] == "strict"


async def test_intent_create_new_refuses_a_heuristic_merge(store: EmbeddedStore) -> None:
    await store.store([{"entity_type": "widget", "name": "Sprocket"}], idempotency_key="w1")
    with pytest.raises(ValidationError):
        await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "intent": "create_new"}],
            idempotency_key="w2",
        )


async def test_strict_store_still_merges_by_explicit_canonical_name(store: EmbeddedStore) -> None:
    await store.store([{"entity_type": "widget", "canonical_name": "W-1"}], idempotency_key="w1")
    again = await store.store(
        [{"entity_type": "widget", "canonical_name": "W-1", "size": 3}],
        idempotency_key="w2",
        strict=True,
    )
    assert again.entities[0].action == "matched_existing"


# -- refused input (a typed error, nothing written) -------------------------------------------


class _Unserialisable:
    pass


INVALID = "VALIDATION_INVALID_FORMAT"
RESOLUTION = "ERR_STORE_RESOLUTION_FAILED"
NOTE = {"entity_type": "note", "title": "x"}


def _edge(**fields: Any) -> dict[str, Any]:
    """A relationship from element 0 to itself, changed by ``fields`` (None drops a key)."""
    edge = {"relationship_type": "REFERS_TO", "source_index": 0, "target_index": 0, **fields}
    return {k: v for k, v in edge.items() if v is not None}


def _bad(entities: list[Any], relationships: list[Any], code: str, name: str) -> Any:
    return pytest.param(entities, relationships, code, id=name)


@pytest.mark.parametrize(
    ("entities", "relationships", "code"),
    [
        _bad([{"name": "x"}], [], INVALID, "missing_entity_type"),
        _bad([{"entity_type": 7, "name": "x"}], [], INVALID, "non_string_entity_type"),
        _bad([{"entity_type": "  ", "name": "x"}], [], INVALID, "blank_entity_type"),
        _bad([{**NOTE, "v": float("nan")}], [], INVALID, "nan_value"),
        _bad([{**NOTE, "v": float("-inf")}], [], INVALID, "infinite_value"),
        _bad([{**NOTE, "v": {1, 2}}], [], INVALID, "set_value"),
        _bad([{**NOTE, "v": b"bytes"}], [], INVALID, "bytes_value"),
        _bad([{**NOTE, "v": _Unserialisable()}], [], INVALID, "object_value"),
        _bad([{**NOTE, "v": {1: "int key"}}], [], INVALID, "non_string_key"),
        _bad([{"entity_type": "note", "target_id": "ent_XYZ"}], [], INVALID, "target_id_not_ent"),
        _bad([NOTE], [_edge(target_index=None, target_entity_id="ent_12")], RESOLUTION,
             "relationship_target_id_not_ent_hex"),
        _bad([NOTE], [_edge(source_index=None, source_entity_id=12)], RESOLUTION,
             "relationship_source_id_not_a_string"),
        _bad([NOTE], [_edge(target_index=1)], INVALID, "relationship_index_out_of_range"),
        _bad([NOTE], [_edge(source_index=-1)], INVALID, "relationship_index_negative"),
        _bad([NOTE], [_edge(source_index=True)], INVALID, "relationship_index_bool"),
        _bad([NOTE], [_edge(relationship_type="mentions")], INVALID, "unknown_relationship_type"),
        _bad([NOTE], [_edge(relationship_type="refers_to")], INVALID, "relationship_type_case"),
        _bad([NOTE], [_edge(source_entity_id=CONV_1)], INVALID, "relationship_index_and_id"),
        _bad([NOTE], [_edge(metadata={"w": float("nan")})], INVALID, "relationship_metadata_nan"),
        _bad([NOTE], [_edge(metadata=["not", "an", "object"])], INVALID, "metadata_not_object"),
        _bad([], [], INVALID, "no_entities"),
    ],
)  # fmt: skip
async def test_bad_input_is_refused_with_a_validation_error_before_any_write(
    store: EmbeddedStore,
    entities: list[dict[str, Any]],
    relationships: list[dict[str, Any]],
    code: str,
) -> None:
    with pytest.raises(ValidationError) as info:
        await store.store(entities, idempotency_key="bad", relationships=relationships)
    assert (info.value.status, info.value.code) == (400, code)
    assert str(info.value)  # descriptive
    assert await entity_count(store) == 0
    # The key was not consumed.
    ok = await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="bad")
    assert not ok.replayed


async def test_store_without_idempotency_key_is_refused(store: EmbeddedStore) -> None:
    with pytest.raises(ValidationError) as info:
        await store.request("store", {"entities": [{"entity_type": "note", "title": "x"}]})
    assert info.value.code == "VALIDATION_ERROR"
    assert await entity_count(store) == 0


async def test_unknown_relationship_type_is_refused_where_a_server_skips_it(
    store: EmbeddedStore,
) -> None:
    # sample h9 (a server answers 200 and drops the edge); we refuse the whole store.
    with pytest.raises(ValidationError, match="MENTIONS"):
        await store.store(
            [{"entity_type": "company", "name": "Initech"}],
            idempotency_key="initech-1",
            relationships=[
                {"relationship_type": "MENTIONS", "source_entity_id": MSG_T1, "target_index": 0}
            ],
        )
    assert await entity_count(store) == 0


async def test_relationship_to_an_unknown_entity_id_is_accepted(store: EmbeddedStore) -> None:
    # sample e1c: endpoint existence is not checked for relationships.
    result = await store.store(
        [{"entity_type": "conversation_message", "role": "user", "content": "y",
          "turn_key": "conv-1:unk"}],
        idempotency_key="unknown-target",
        relationships=[{"relationship_type": "REFERS_TO", "source_index": 0,
                        "target_entity_id": "ent_000000000000000000000000"}],
    )  # fmt: skip
    assert result.source_id == "ce0a90cb-687b-4f26-53e1-5c97c6e889bb"
    assert result.raw["relationships_created"][0]["target_entity_id"] == (
        "ent_000000000000000000000000"
    )


async def test_store_with_commit_false_writes_nothing(store: EmbeddedStore) -> None:
    # A dry run must never write; the embedded store does not implement it, so it refuses.
    body = {
        "entities": [{"entity_type": "note", "title": "dry"}],
        "idempotency_key": "dry-run-1",
        "commit": False,
    }
    with pytest.raises(ValidationError):
        await store.request("store", body)
    assert await entity_count(store) == 0


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"observation_source": "gossip"}, id="unknown_observation_source"),
        pytest.param({"source_priority": "high"}, id="non_integer_source_priority"),
        pytest.param({"source_priority": True}, id="boolean_source_priority"),
    ],
)
async def test_bad_store_options_are_refused(store: EmbeddedStore, options: dict[str, Any]) -> None:
    body = {"entities": [{"entity_type": "note", "title": "x"}], "idempotency_key": "k", **options}
    with pytest.raises(ValidationError):
        await store.request("store", body)
    assert await entity_count(store) == 0


async def test_store_records_source_priority_and_observation_source(store: EmbeddedStore) -> None:
    result = await store.store(
        [{"entity_type": "note", "title": "x"}],
        idempotency_key="k",
        source_priority=250,
        observation_source="human",
    )
    (obs,) = (await store.list_observations(result.entities[0].entity_id)).observations
    assert (obs.source_priority, obs.observation_source) == (250, "human")


async def test_an_entity_twice_in_one_batch_gets_both_observations_in_order(
    store: EmbeddedStore,
) -> None:
    message = {"entity_type": "conversation_message", "role": "user", "turn_key": "c:1"}
    result = await store.store(
        [{**message, "content": "A"}, {**message, "content": "B"}, {**message, "content": "A"}],
        idempotency_key="k",
    )
    assert [e.action for e in result.entities] == [
        "created",
        "matched_existing",
        "matched_existing",
    ]
    assert result.entities_created == 1
    assert result.observations_created == 3  # processed, as the server counts them
    # The third element repeats the first from the same source: the same observation.
    first, second, third = (e.observation_id for e in result.entities)
    assert third == first != second
    entity_id = result.entities[0].entity_id
    snapshot = await store.get_entity_snapshot(entity_id)
    assert (snapshot.snapshot["content"], snapshot.observation_count) == ("B", 2)
    assert [s.snapshot["content"] for s in result.entities if s.snapshot] == ["A", "B", "B"]
