"""``retrieve_entity_by_identifier`` answers, pinned path by path on a real SQLite file.

The expected entities and their order were recorded from the implementation before the
lookup was reworked to run fewer statements (one entity read per hit, the FTS searches
fused, trigram counts read by point lookups); every item's content is checked against the
other read paths and its keys against the fixed shapes of the three passes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent.exceptions import ValidationError
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

ACME = "ent_af939bedafbd1838b259772a"
# The keys of an item, in order: pass 1, pass 2 and pass 3 each have one shape.
PASS_1_KEYS = ["id", "entity_type", "canonical_name", "snapshot"]
PASS_2_KEYS = [
    "id", "entity_type", "canonical_name", "aliases", "created_at", "updated_at", "user_id",
    "first_seen_at", "last_seen_at", "merged_to_entity_id", "merged_at", "merged_into",
    "snapshot",
]  # fmt: skip
PASS_3_KEYS = PASS_1_KEYS
RECORD_KEYS = [
    "entity_id", "entity_type", "schema_version", "canonical_name", "snapshot", "computed_at",
    "observation_count", "last_observation_at", "provenance", "user_id",
]  # fmt: skip


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "store.db") as s:
        await populate(s)
        yield s


async def populate(store: EmbeddedStore) -> None:
    companies = ["Acme", "Acme Rockets Inc", "Globex Corporation", "Initech", "Umbrella"]
    companies += [f"Zeta Labs {n}" for n in (7, 12, 1, 10, 3, 11, 5, 2, 9, 4, 8, 6)]
    await store.store(
        [{"entity_type": "company", "name": n} for n in companies], idempotency_key="companies"
    )
    await store.store(
        [
            {"entity_type": "person", "name": "Ana Lopez", "email": "Ana@Example.com"},
            {"entity_type": "contact", "name": "Bob Stone", "title": "Head of Acme Sales"},
            {"entity_type": "contact", "name": "Cara Diaz", "title": "Head"},
            {"entity_type": "widget", "name": "Bolt", "company": "Big Head Inc"},
        ],
        idempotency_key="people",
    )
    await store.store(
        [
            {"entity_type": "conversation", "conversation_id": "acme-sync",
             "title": "Acme weekly sync"},
            {"entity_type": "conversation_message", "role": "user", "sender_kind": "user",
             "content": "what about Acme?", "turn_key": "acme-sync:t1"},
        ],
        relationships=[{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
        idempotency_key="conversation",
    )  # fmt: skip
    # A second observation of Acme under another spelling merges into the same entity.
    await store.store(
        [{"entity_type": "company", "name": "Acme Inc", "website": "acme.com"}],
        idempotency_key="acme-again",
    )
    # A rename keeps the old name as an alias.
    result = await store.store(
        [{"entity_type": "widget", "name": "Sprocket", "sku": "SK-991"}], idempotency_key="w1"
    )
    await store.store(
        [{"entity_type": "widget", "target_id": result.entities[0].entity_id,
          "name": "Gear Wheel"}],
        idempotency_key="w2",
    )  # fmt: skip


ZETAS = [f"Zeta Labs {n}" for n in (1, 10, 11, 12, 2, 3, 4, 5, 6, 7, 8, 9)]
ACMES = ["Acme", "Acme Rockets", "conversation:acme-sync", "conversation_message:acme-sync:t1"]
CASES: list[tuple[dict[str, Any], str, list[str]]] = [
    # pass 1: an entity id, in any case
    ({"identifier": ACME}, "direct", ["Acme"]),
    ({"identifier": ACME.upper()}, "direct", ["Acme"]),
    ({"identifier": "ent_0123456789abcdef01234567"}, "none", []),
    # pass 2: names and aliases, ordered by canonical name; bookkeeping names too
    ({"identifier": "Acme"}, "direct", ACMES),
    ({"identifier": "acm"}, "direct", ACMES),
    ({"identifier": "acme", "limit": 2}, "direct", ACMES[:2]),
    ({"identifier": "ACME", "entity_type": "company"}, "direct", ACMES[:2]),
    ({"identifier": "acme", "entity_type": "conversation"}, "direct", [ACMES[2]]),
    ({"identifier": "Acme Rockets", "entity_type": "Companies"}, "direct", ["Acme Rockets"]),
    ({"identifier": "zeta labs"}, "direct", ZETAS),  # more ids than are bound inline
    ({"identifier": "zeta labs", "limit": 5}, "direct", ZETAS[:5]),
    ({"identifier": "Zeta Labs 1"}, "direct", ZETAS[:4]),
    ({"identifier": "zeta labs 1", "entity_type": "company", "limit": 3}, "direct", ZETAS[:3]),
    ({"identifier": "sprock"}, "direct", ["Gear Wheel"]),  # an alias
    ({"identifier": "Gear Wheel"}, "direct", ["Gear Wheel"]),
    ({"identifier": "Ana@Example.com"}, "direct", ["person:ana@example.com"]),
    ({"identifier": "acme-sync"}, "direct", ACMES[2:]),
    ({"identifier": "conversation_message:acme-sync"}, "direct", [ACMES[3]]),
    ({"identifier": "um"}, "direct", ["Umbrella"]),  # shorter than a trigram
    ({"identifier": "x"}, "direct", ["Globex", "person:ana@example.com"]),
    # pass 3: equal field, then leading tokens, then contained text, each in index order
    ({"identifier": "ana lopez", "entity_type": "person"}, "snapshot_field",
     ["person:ana@example.com"]),
    ({"identifier": "Head"}, "snapshot_field", ["Cara Diaz", "Bob Stone", "Bolt"]),
    ({"identifier": "head", "limit": 2}, "snapshot_field", ["Cara Diaz", "Bob Stone"]),
    ({"identifier": "HEAD", "entity_type": "contact"}, "snapshot_field",
     ["Cara Diaz", "Bob Stone"]),
    ({"identifier": "weekly sync"}, "snapshot_field", ["conversation:acme-sync"]),
    ({"identifier": "head of acme sales"}, "snapshot_field", ["Bob Stone", "Cara Diaz"]),
    ({"identifier": "acme.com", "by": "website"}, "snapshot_field", ["Acme"]),
    ({"identifier": "sk-991", "by": "sku"}, "snapshot_field", ["Gear Wheel"]),
    # misses
    ({"identifier": "sk-991"}, "none", []),
    ({"identifier": "Acme Corp"}, "none", []),
    ({"identifier": "Nonexistent Thing"}, "none", []),
    ({"identifier": "Globex, Corporation"}, "none", []),
    ({"identifier": "   "}, "none", []),
]  # fmt: skip


@pytest.mark.parametrize(("body", "mode", "names"), CASES, ids=[str(c[0]) for c in CASES])
async def test_lookup_finds_these_entities_in_this_order(
    store: EmbeddedStore, body: dict[str, Any], mode: str, names: list[str]
) -> None:
    result = await store.request("retrieve_entity_by_identifier", body)
    assert list(result) == ["entities", "total", "match_mode"] + (
        ["hint"] if body["identifier"].startswith("ent_0") else []
    )
    assert (result["match_mode"], result["total"]) == (mode, len(names))
    assert [e["canonical_name"] for e in result["entities"]] == names
    for item in result["entities"]:
        snapshot = await store.request("get_entity_snapshot", {"entity_id": item["id"]})
        if mode == "snapshot_field":
            assert list(item) == PASS_3_KEYS
            assert item["snapshot"] == snapshot["snapshot"]
            continue
        assert list(item) == (PASS_1_KEYS if item["id"] == body["identifier"].lower() else
                              PASS_2_KEYS)  # fmt: skip
        assert list(item["snapshot"]) == RECORD_KEYS
        assert item["snapshot"] == snapshot
        assert item["entity_type"] == snapshot["entity_type"]


async def test_a_pass_two_item_carries_the_entity_row(store: EmbeddedStore) -> None:
    result = await store.request("retrieve_entity_by_identifier", {"identifier": "sprocket"})
    (item,) = result["entities"]
    assert item["aliases"] == ["Sprocket"]
    assert item["canonical_name"] == "Gear Wheel"
    assert item["snapshot"]["snapshot"] == {"name": "Gear Wheel", "sku": "SK-991"}
    assert item["snapshot"]["observation_count"] == 2
    assert isinstance(item["created_at"], str)
    assert item["updated_at"] >= item["created_at"]
    assert item["user_id"] == "00000000-0000-0000-0000-000000000000"
    assert [item[k] for k in PASS_2_KEYS[7:12]] == [None] * 5
    # Acme's merged snapshot is named "Acme Inc": its canonical name stays "Acme".
    result = await store.request("retrieve_entity_by_identifier", {"identifier": "acme inc"})
    assert result["match_mode"] == "snapshot_field"
    assert result["entities"] == [
        {"id": ACME, "entity_type": "company", "canonical_name": "Acme",
         "snapshot": {"name": "Acme Inc", "website": "acme.com"}}
    ]  # fmt: skip


async def test_many_lookups_run_as_one_job_and_answer_as_each_alone(
    store: EmbeddedStore,
) -> None:
    await store.store(
        [{"entity_type": "company", "name": "Halcyon", "website": "https://www.halcyon.io/"}],
        idempotency_key="halcyon",
    )
    bodies: list[dict[str, Any]] = [
        {"identifier": "Acme", "limit": 25},
        {"identifier": "ana lopez", "entity_type": "person", "limit": 25},
        {"identifier": "acme", "limit": 25},  # the same search again: shared, same answer
        {"identifier": "halcyon.io", "entity_type": "company", "by": "website", "limit": 25},
        {"identifier": 7},  # refused: its error takes its place
        {"identifier": "nothing like it", "limit": 25},
    ]
    jobs = 0
    submit = store._thread.submit

    def counting(job: Any) -> None:
        nonlocal jobs
        jobs += 1
        submit(job)

    store._thread.submit = counting  # type: ignore[method-assign]
    answers = await store.retrieve_many(bodies)
    assert jobs == 1
    store._thread.submit = submit  # type: ignore[method-assign]
    for body, answer in zip(bodies, answers, strict=True):
        if body["identifier"] == 7:
            assert isinstance(answer, ValidationError)
            continue
        assert not isinstance(answer, Exception)
        alone = await store.retrieve_entity_by_identifier(
            body["identifier"], entity_type=body.get("entity_type"), by=body.get("by"), limit=25
        )
        assert answer == alone
    # The website inside a URL, among companies only (as a server's field scan finds it).
    assert [e.name for e in answers[3].entities] == ["Halcyon"]  # type: ignore[union-attr]
    assert answers[5].entities == ()  # type: ignore[union-attr]
