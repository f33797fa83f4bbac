"""Reads of the embedded store: observations, entity queries and identifier lookups (§4, §5)."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent.exceptions import ValidationError
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.embedded._rows import install

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

ACME = "ent_af939bedafbd1838b259772a"
USER_ID = "00000000-0000-0000-0000-000000000000"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(db_path) as s:
        yield s


async def put(store: EmbeddedStore, key: str, *entities: dict[str, Any]) -> list[str]:
    result = await store.store(list(entities), idempotency_key=key)
    return [e.entity_id for e in result.entities]


# -- list_observations ------------------------------------------------------------------------


async def test_list_observations_is_newest_first(store: EmbeddedStore) -> None:
    ids = []
    for i in range(5):
        result = await store.store(
            [{"entity_type": "widget", "name": "Sprocket", "n": i}], idempotency_key=f"k{i}"
        )
        ids.append(result.entities[0].observation_id)
    listed = await store.list_observations(result.entities[0].entity_id)
    assert [o.id for o in listed.observations] == ids[::-1]
    assert [o.fields["n"] for o in listed.observations] == [4, 3, 2, 1, 0]


async def test_list_observations_pages_with_limit_and_offset(store: EmbeddedStore) -> None:
    for i in range(5):
        (entity_id,) = await put(store, f"k{i}", {"entity_type": "widget", "name": "W", "n": i})
    page = await store.list_observations(entity_id, limit=2, offset=1)
    assert [o.fields["n"] for o in page.observations] == [3, 2]
    assert len(await store.list_observations(entity_id, limit=2, offset=4)) == 1
    assert len(await store.list_observations(entity_id, offset=5)) == 0


async def test_list_observations_rows_have_the_server_shape(store: EmbeddedStore) -> None:
    (entity_id,) = await put(store, "acme", {"entity_type": "company", "name": "Acme Corp"})
    (obs,) = (await store.list_observations(entity_id)).observations
    raw = obs.raw
    assert raw["id"] == "a997fbd4-d07b-c8a7-ba5d-9a1416fcf4f2"  # sample h7
    assert raw["source_id"] == "280faed3-649f-2f21-3067-9aaff7210dd4"
    assert (raw["entity_id"], raw["entity_type"], raw["user_id"]) == (ACME, "company", USER_ID)
    assert (raw["source_priority"], raw["observation_source"]) == (100, "llm_summary")
    assert (raw["identity_basis"], raw["identity_rule"]) == ("heuristic_name", "name_key:name")
    assert raw["fields"] == {"name": "Acme Corp"}
    assert raw["specificity_score"] == 1
    assert raw["observed_at"] == raw["created_at"]
    assert raw["observed_at"].endswith("Z")
    assert len(raw["observed_at"]) == 24


async def test_observations_report_schema_version_1_0_whatever_the_snapshot_says(
    store: EmbeddedStore,
) -> None:
    # sample e5: a conversation_message snapshot is schema 1.4, its observations say 1.0.
    (message,) = await put(
        store, "k", {"entity_type": "conversation_message", "role": "user", "turn_key": "c:1"}
    )
    (obs,) = (await store.list_observations(message)).observations
    assert obs.raw["schema_version"] == "1.0"
    assert (await store.get_entity_snapshot(message)).raw["schema_version"] == "1.4"


async def test_list_observations_of_an_unknown_entity_is_empty(store: EmbeddedStore) -> None:
    assert len(await store.list_observations("ent_000000000000000000000000")) == 0


async def test_list_observations_refuses_a_bad_limit(store: EmbeddedStore) -> None:
    with pytest.raises(ValidationError):
        await store.list_observations(ACME, limit=0)


# -- query_entities ---------------------------------------------------------------------------


async def test_query_entities_by_type_lists_that_type_only(store: EmbeddedStore) -> None:
    companies = await put(
        store,
        "k",
        {"entity_type": "company", "name": "Acme Corp"},
        {"entity_type": "company", "name": "Globex"},
        {"entity_type": "person", "name": "Ana Lopez"},
    )
    result = await store.query_entities(entity_type="company")
    assert result.total == 2
    assert [e.entity_id for e in result.entities] == sorted(companies[:2])
    item = next(e for e in result.entities if e.entity_id == ACME)
    assert (item.canonical_name, item.snapshot, item.observation_count) == (
        "Acme",
        {"name": "Acme Corp"},
        1,
    )
    assert result.raw["search_mode"] == "none"


async def test_query_entities_pages_in_entity_id_order_with_a_full_total(
    store: EmbeddedStore,
) -> None:
    ids = await put(store, "k", *({"entity_type": "task", "title": f"T{i}"} for i in range(12)))
    pages: list[str] = []
    for offset in range(0, 12, 5):
        page = await store.query_entities(entity_type="task", limit=5, offset=offset)
        assert (page.total, page.limit, page.offset) == (12, 5, offset)
        pages.extend(e.entity_id for e in page.entities)
    assert pages == sorted(ids)


async def test_query_entities_search_matches_name_substrings(store: EmbeddedStore) -> None:
    await put(
        store,
        "k",
        {"entity_type": "company", "name": "Acme Corp"},
        {"entity_type": "company", "name": "Acme Rockets"},
        {"entity_type": "company", "name": "Globex"},
        {"entity_type": "person", "name": "Acme Fan"},
    )
    result = await store.query_entities(search="ACME")
    assert sorted(e.canonical_name or "" for e in result.entities) == [
        "Acme",
        "Acme Rockets",
        "person:Acme Fan",
    ]
    assert result.total == 3
    assert result.raw["search_mode"] == "lexical_fallback"
    typed = await store.query_entities(search="acme", entity_type="company", limit=1)
    assert (typed.total, len(typed.entities)) == (2, 1)


async def test_query_entities_takes_the_type_as_given(store: EmbeddedStore) -> None:
    # A store rewrites an equivalent type name; a query does not (sample k30i: an alias
    # answers total 0), so only the registered name finds the company.
    await put(store, "k", {"entity_type": "company", "name": "Acme Corp"})
    assert (await store.query_entities(entity_type="Companies")).total == 0
    assert (await store.query_entities(entity_type="company")).total == 1


# -- retrieve_entity_by_identifier: pass 1, entity id -----------------------------------------


async def test_lookup_by_entity_id_is_a_direct_primary_key_hit(store: EmbeddedStore) -> None:
    # sample d6
    await put(store, "company-acme-corp", {"entity_type": "company", "name": "Acme Corp"})
    result = await store.retrieve_entity_by_identifier(ACME)
    assert (result.match_mode, result.total) == ("direct", 1)
    item = result.raw["entities"][0]
    assert (item["id"], item["entity_type"], item["canonical_name"]) == (ACME, "company", "Acme")
    assert item.keys() == {"id", "entity_type", "canonical_name", "snapshot"}  # `id`, as d6
    record = item["snapshot"]
    assert record["entity_id"] == ACME
    assert record["snapshot"] == {"name": "Acme Corp"}
    assert record["provenance"] == {"name": "a997fbd4-d07b-c8a7-ba5d-9a1416fcf4f2"}
    assert record["canonical_name"] == "Acme Corp"
    assert result.entities[0].snapshot == {"name": "Acme Corp"}


async def test_lookup_of_an_unknown_entity_id_stops_at_pass_one(store: EmbeddedStore) -> None:
    # Even when a name contains the id text, an ent_ identifier is only a key lookup.
    await put(store, "k", {"entity_type": "widget", "name": "ent_abc123 gadget"})
    result = await store.retrieve_entity_by_identifier("ent_abc123")
    assert (result.match_mode, result.total, result.entities) == ("none", 0, ())
    assert "entity_id" in result.raw["hint"]


# -- pass 2: substring of canonical names and aliases -----------------------------------------


async def zeta_labs(store: EmbeddedStore) -> None:
    numbers = list(range(1, 17))
    random.Random(7).shuffle(numbers)
    await put(
        store, "zeta", *({"entity_type": "company", "name": f"Zeta Labs {n}"} for n in numbers)
    )


async def test_lookup_matches_substrings_of_canonical_names_in_name_order(
    store: EmbeddedStore,
) -> None:
    await zeta_labs(store)
    result = await store.retrieve_entity_by_identifier("Zeta Labs 1")
    assert result.match_mode == "direct"
    assert [e.canonical_name for e in result.entities] == [
        "Zeta Labs 1",
        *(f"Zeta Labs {n}" for n in range(10, 17)),
    ]
    assert result.total == 8
    item = result.raw["entities"][0]
    assert item["snapshot"]["snapshot"] == {"name": "Zeta Labs 1"}


async def test_lookup_is_case_insensitive(store: EmbeddedStore) -> None:
    await zeta_labs(store)
    lower = await store.retrieve_entity_by_identifier("zeta labs 1")
    upper = await store.retrieve_entity_by_identifier("  ZETA LABS 1 ")
    assert [e.id for e in upper.entities] == [e.id for e in lower.entities]
    assert len(upper.entities) == 8


async def test_lookup_limit_caps_the_matches(store: EmbeddedStore) -> None:
    await zeta_labs(store)
    result = await store.retrieve_entity_by_identifier("zeta labs", limit=3)
    assert [e.canonical_name for e in result.entities] == [
        "Zeta Labs 1",
        "Zeta Labs 10",
        "Zeta Labs 11",
    ]
    assert result.total == 3


async def test_lookup_with_entity_type_filters_and_normalises_the_needle(
    store: EmbeddedStore,
) -> None:
    await put(store, "k", {"entity_type": "company", "name": "Acme Corp"})
    # sample d4: the typed needle is normalised ("acme corp" -> "acme") and hits directly.
    typed = await store.retrieve_entity_by_identifier("Acme Corp", entity_type="company")
    assert (typed.match_mode, [e.id for e in typed.entities]) == ("direct", [ACME])
    # sample d8: another type misses.
    other = await store.retrieve_entity_by_identifier("Acme Corp", entity_type="person")
    assert other.raw == {"entities": [], "total": 0, "match_mode": "none"}


async def test_typed_lookup_loses_punctuation_and_misses_a_schema_canonical_name(
    store: EmbeddedStore,
) -> None:
    # Semantics §4: "chat-42" + entity_type conversation misses, as on the server.
    await put(store, "k", {"entity_type": "conversation", "conversation_id": "chat-42"})
    typed = await store.retrieve_entity_by_identifier("chat-42", entity_type="conversation")
    assert typed.match_mode == "none"
    untyped = await store.retrieve_entity_by_identifier("chat-42")
    assert [e.canonical_name for e in untyped.entities] == ["conversation:chat-42"]
    assert untyped.match_mode == "direct"


async def test_typed_lookup_of_a_turn_key_misses_as_on_the_server(store: EmbeddedStore) -> None:
    # sample d7
    await put(
        store,
        "k",
        {"entity_type": "conversation_message", "role": "user", "turn_key": "conv-1:t1"},
    )
    result = await store.retrieve_entity_by_identifier(
        "conv-1:t1", entity_type="conversation_message"
    )
    assert result.raw == {"entities": [], "total": 0, "match_mode": "none"}


async def test_untyped_lookup_of_a_canonical_name_also_finds_longer_names(
    store: EmbeddedStore,
) -> None:
    # sample h4: the user message and its assistant reply share the prefix.
    await put(
        store,
        "k",
        {"entity_type": "conversation_message", "role": "user", "turn_key": "conv-1:t1"},
        {"entity_type": "conversation_message", "role": "assistant",
         "turn_key": "conv-1:t1:assistant"},
    )  # fmt: skip
    result = await store.retrieve_entity_by_identifier("conversation_message:conv-1:t1")
    assert [e.canonical_name for e in result.entities] == [
        "conversation_message:conv-1:t1",
        "conversation_message:conv-1:t1:assistant",
    ]


async def test_typed_lookup_falls_back_to_the_derived_entity_id(store: EmbeddedStore) -> None:
    # A name whose normalised form is not a substring of the stored one: "Dr. Ana Lopez"
    # normalises to "ana lopez" for a contact, which the stored "Ana Lopez" contains anyway,
    # so use a person keyed by name, whose canonical name is "person:<name>".
    await put(store, "k", {"entity_type": "person", "name": "Ana   Lopez"})
    result = await store.retrieve_entity_by_identifier("ana lopez", entity_type="person")
    assert [e.canonical_name for e in result.entities] == ["person:Ana Lopez"]


async def test_lookup_finds_an_entity_by_an_alias_after_a_rename(store: EmbeddedStore) -> None:
    # Semantics §1.4: a merged snapshot naming something nobody owns renames the entity and
    # keeps the old name as an alias; the id never changes.
    (sprocket,) = await put(store, "k1", {"entity_type": "widget", "name": "Sprocket"})
    await store.store(
        [{"entity_type": "widget", "target_id": sprocket, "name": "Gear Wheel"}],
        idempotency_key="k2",
    )
    by_new = await store.retrieve_entity_by_identifier("gear wheel")
    assert [e.id for e in by_new.entities] == [sprocket]
    assert by_new.entities[0].canonical_name == "Gear Wheel"
    assert by_new.raw["entities"][0]["aliases"] == ["Sprocket"]
    by_old = await store.retrieve_entity_by_identifier("SPROCK")
    assert [e.id for e in by_old.entities] == [sprocket]
    assert by_old.match_mode == "direct"


async def test_no_rename_when_another_entity_owns_the_new_name(store: EmbeddedStore) -> None:
    (sprocket, _gear) = await put(
        store,
        "k1",
        {"entity_type": "widget", "name": "Sprocket"},
        {"entity_type": "widget", "name": "Gear"},
    )
    await store.store(
        [{"entity_type": "widget", "target_id": sprocket, "name": "Gear"}], idempotency_key="k2"
    )
    result = await store.retrieve_entity_by_identifier("sprocket")
    assert [e.id for e in result.entities] == [sprocket]
    assert result.entities[0].canonical_name == "Sprocket"
    assert result.raw["entities"][0]["aliases"] == []
    assert (await store.get_entity_snapshot(sprocket)).snapshot["name"] == "Gear"


# What a 0.22.0 server answered for each entity (recorded 2026-12-06 from a fresh instance):
# the store answer's name (the write's), then the entity's name, its aliases and snapshot
# after the store, when the server has re-derived the name from the snapshot.
REVIEW = "Quarterly review with the board"
RENAMED_BY_SNAPSHOT = [
    pytest.param(
        {"entity_type": "event", "name": "Acme board meeting", "notes": REVIEW},
        ("ent_841948467066957c61afb313", "Acme board meeting"),
        (REVIEW, ["Acme board meeting"], {"notes": REVIEW}),
        id="undeclared-name",
    ),
    pytest.param(
        {"entity_type": "company", "canonical_name": "ACME-X", "name": "Acme Corp",
         "website": "acme.com"},
        ("ent_f9733c4ed67aadd5c283c690", "ACME-X"),
        ("Acme", ["ACME-X"], {"name": "Acme Corp", "website": "acme.com"}),
        id="canonical-name-field",
    ),
    pytest.param(
        {"entity_type": "event", "canonical_name": "Board 2026", "title": "Board meeting"},
        ("ent_cc020ab113b8012dca803a9a", "Board 2026"),
        ("Board meeting", ["Board 2026"], {"title": "Board meeting"}),
        id="canonical-name-field-and-a-declared-title",
    ),
    pytest.param(
        {"entity_type": "recipe", "canonical_name": "My-Pancakes_v2", "flour": "200g"},
        ("ent_90acf70f0a002ec8705811b5", "My-Pancakes_v2"),
        ("My-Pancakes_v2", [], {"canonical_name": "My-Pancakes_v2", "flour": "200g"}),
        id="no-schema-keeps-every-field",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("entity", "answered", "after"), RENAMED_BY_SNAPSHOT)
async def test_an_entity_is_named_by_its_snapshot_as_on_a_real_server(
    store: EmbeddedStore,
    entity: dict[str, Any],
    answered: tuple[str, str],
    after: tuple[str, list[str], dict[str, Any]],
) -> None:
    # A declared type's snapshot holds only declared fields (never a canonical_name field),
    # and the entity takes the name that snapshot gives; the id stays the write's.
    result = await store.store([entity], idempotency_key="k1")
    stored = result.entities[0]
    assert (stored.entity_id, stored.canonical_name) == answered
    name, aliases, snapshot = after
    found = await store.retrieve_entity_by_identifier(name)
    (row,) = [e for e in found.raw["entities"] if e["id"] == stored.entity_id]
    assert (row["canonical_name"], row["aliases"]) == (name, aliases)
    assert (await store.get_entity_snapshot(stored.entity_id)).snapshot == snapshot
    assert stored.snapshot == snapshot


async def test_no_rename_by_snapshot_onto_a_name_another_entity_holds(
    store: EmbeddedStore,
) -> None:
    # "Quarterly review" already names another event (by its title): the new one keeps the
    # name it was stored under.
    (review,) = await put(store, "k1", {"entity_type": "event", "title": "Quarterly review"})
    (meeting,) = await put(
        store, "k2", {"entity_type": "event", "name": "Board", "notes": "Quarterly review"}
    )
    found = await store.retrieve_entity_by_identifier(meeting)
    assert found.entities[0].canonical_name == "Board"
    assert review != meeting


async def test_substring_lookup_uses_the_trigram_index(store: EmbeddedStore, db_path: Path) -> None:
    await zeta_labs(store)
    statements: list[str] = []

    def trace(conn: sqlite3.Connection, body: Mapping[str, Any]) -> None:
        conn.set_trace_callback(statements.append if body["on"] else None)

    await store._run(trace, {"on": True})
    await store.retrieve_entity_by_identifier("Zeta Labs 1")
    await store.query_entities(search="labs 1")
    await store._run(trace, {"on": False})

    plans: list[str] = []
    with sqlite3.connect(db_path) as conn:
        conn.create_function("current_uid", 0, lambda: 0)  # the store's user (_scope)
        install(conn)  # entity_key, as the store's connections have it
        for sql in statements:
            if sql.startswith(("SELECT", "WITH")):
                plans += [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
    name_index_plans = [p for p in plans if "name_index" in p]
    assert len(name_index_plans) == 2
    # ":M" is FTS5's MATCH constraint: the trigram index answers, no full scan.
    assert all("VIRTUAL TABLE INDEX" in p and ":M" in p for p in name_index_plans)
    # Everything else is a key search (json_each only walks the list of matched ids), but
    # the queue of bookkeeping names not indexed yet (fewer than 32 documents: _name_queue).
    scans = [p for p in plans if p.startswith("SCAN") and "VIRTUAL TABLE" not in p]
    assert scans == ["SCAN q"] * len(scans)
    assert any(p.startswith("SEARCH entities") for p in plans)


# -- pass 3: snapshot fields ------------------------------------------------------------------


async def test_lookup_falls_through_to_snapshot_fields(store: EmbeddedStore) -> None:
    # samples d2 / d5 / d3: "Acme Corp" is not in the canonical name "Acme"; the name field is.
    await put(store, "company-acme-corp", {"entity_type": "company", "name": "Acme Corp"})
    expected = {
        "entities": [
            {"id": ACME, "entity_type": "company", "canonical_name": "Acme",
             "snapshot": {"name": "Acme Corp"}}
        ],
        "total": 1,
        "match_mode": "snapshot_field",
    }  # fmt: skip
    assert (await store.retrieve_entity_by_identifier("Acme Corp")).raw == expected
    assert (await store.retrieve_entity_by_identifier("acme corp")).raw == expected
    missing = await store.retrieve_entity_by_identifier("Nonexistent Thing")
    assert missing.raw == {"entities": [], "total": 0, "match_mode": "none"}


async def test_snapshot_field_pass_matches_contained_text_and_leading_tokens(
    store: EmbeddedStore,
) -> None:
    (conv,) = await put(
        store,
        "k",
        {"entity_type": "conversation", "conversation_id": "c-7", "title": "Lisbon hotel booking"},
    )
    (acme,) = await put(store, "k2", {"entity_type": "company", "name": "Acme"})
    cases = {
        "lisbon hotel booking": conv,  # equal
        "hotel": conv,  # contained
        "Lisbon": conv,  # the field's leading token
        "Acme Rockets": acme,  # the needle's leading token
    }
    for needle, entity_id in cases.items():
        result = await store.retrieve_entity_by_identifier(needle)
        assert (result.match_mode, [e.id for e in result.entities]) == (
            "snapshot_field",
            [entity_id],
        ), needle
    assert (await store.retrieve_entity_by_identifier("Porto")).match_mode == "none"


async def test_snapshot_field_pass_follows_the_snapshot_after_an_update(
    store: EmbeddedStore,
) -> None:
    (conv,) = await put(
        store, "k1", {"entity_type": "conversation", "conversation_id": "c-7", "title": "Lisbon"}
    )
    await put(store, "k2", {"entity_type": "conversation", "conversation_id": "c-7",
                            "title": "Porto"}, )  # fmt: skip
    # Equal priority: the title tie-break is by observation id, so read back the winner.
    title = (await store.get_entity_snapshot(conv)).snapshot["title"]
    loser = "Lisbon" if title == "Porto" else "Porto"
    assert (await store.retrieve_entity_by_identifier(title)).match_mode == "snapshot_field"
    assert (await store.retrieve_entity_by_identifier(loser)).match_mode == "none"


async def test_lookup_by_an_arbitrary_field_with_by(store: EmbeddedStore) -> None:
    (widget,) = await put(
        store, "k", {"entity_type": "widget", "name": "Sprocket", "sku": "SK-991"}
    )
    assert (await store.retrieve_entity_by_identifier("sk-991")).match_mode == "none"
    result = await store.retrieve_entity_by_identifier("sk-991", by="sku")
    assert (result.match_mode, [e.id for e in result.entities]) == ("snapshot_field", [widget])
    assert result.entities[0].snapshot == {"name": "Sprocket", "sku": "SK-991"}


async def test_lookup_refuses_a_by_that_is_not_a_field_name(store: EmbeddedStore) -> None:
    with pytest.raises(ValidationError):
        await store.retrieve_entity_by_identifier("x", by="name; DROP TABLE entities")


async def test_lookup_of_a_blank_identifier_matches_nothing(store: EmbeddedStore) -> None:
    await put(store, "k", {"entity_type": "company", "name": "Acme Corp"})
    assert (await store.retrieve_entity_by_identifier("   ")).match_mode == "none"


# -- pass 2 against a brute-force scan --------------------------------------------------------

WORDS = (
    "acme", "labs", "zeta", "com", "ion", "Émile", "Straße", "İstanbul", "naïve", "o'brien",
    "x-ray", "a.b", "quote\"d", "star*", "(paren)", "NEAR", "AND", "日本語", "ab", "abc",
)  # fmt: skip


async def test_substring_lookup_agrees_with_a_scan_of_canonical_names(
    store: EmbeddedStore,
) -> None:
    rng = random.Random(20261130)
    entities: list[dict[str, Any]] = []
    for i in range(120):
        name = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        kind = rng.choice(("company", "widget", "conversation", "conversation_message"))
        if kind == "conversation":
            entities.append({"entity_type": kind, "conversation_id": f"{name} {i}"})
        elif kind == "conversation_message":
            entities.append({"entity_type": kind, "role": "user", "turn_key": f"{name}:{i}"})
        else:
            entities.append({"entity_type": kind, "name": f"{name} {i}"})
    await store.store(entities, idempotency_key="names")
    names = {
        e.entity_id: e.canonical_name or ""
        for e in (await store.query_entities(limit=500)).entities
    }
    assert len(names) == 120

    needles = [rng.choice(WORDS) for _ in range(20)]
    for _ in range(80):
        text = rng.choice(list(names.values())).lower()
        start = rng.randrange(len(text))
        needles.append(text[start : start + rng.randint(1, 9)])
    needles += ["zz", "q", "labs 1", "ACME LABS", ":", "  acme  "]
    for needle in needles:
        wanted = needle.strip().lower().replace(",", "")
        if not wanted:
            continue
        expected = sorted(
            ((name, entity_id) for entity_id, name in names.items() if wanted in name.lower()),
        )[:100]
        result = await store.retrieve_entity_by_identifier(needle)
        if expected:
            assert result.match_mode == "direct", needle
            assert [(e.canonical_name, e.id) for e in result.entities] == expected, needle
        else:
            assert result.match_mode != "direct", needle
