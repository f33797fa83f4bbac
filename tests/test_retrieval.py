"""Bounded retrieval: what is looked up, how answers are ranked, and that it never fails a turn."""

from __future__ import annotations

import time
from typing import Any

import pytest
from turn_support import capture_logs, db_path, memory, seed, store, targets

from neotoma_agent._retrieval import default_extractor, extract, rank
from neotoma_agent.exceptions import ServerError
from neotoma_agent.testing import FaultyTransport, RecordingTransport
from neotoma_agent.transport._base import Entity, LookupResult
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]  # fixtures


# ------------------------------------------------------------------ extraction


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Tell me about Acme Corp", ["Acme Corp"]),
        ("What do we know about Acme Corp?", ["Acme Corp"]),
        ("Hello, what do you know about Acme Corp?", ["Acme Corp"]),
        ("Book the Lisbon hotel", ["Lisbon"]),
        ("Compare Zeta Labs 1 with Zeta Labs 12.", ["Zeta Labs 1", "Zeta Labs 12"]),
        (
            "Yesterday I met Dr. Ana Lopez from Bank of America and Johnson & Johnson.",
            ["Ana Lopez", "Bank of America", "Johnson & Johnson"],
        ),
        (
            "Email ana.lopez@example.com about https://www.acme.com/pricing and zeta.io",
            ["ana.lopez@example.com", "acme.com", "zeta.io"],
        ),
        (
            "Ping @ana_l re #launch-plan and ent_af939bedafbd1838b259772a",
            ["@ana_l", "#launch-plan", "ent_af939bedafbd1838b259772a"],
        ),
        (
            "Find the \"quarterly plan\" and 'Project X' but don't forget Ana's notes",
            ["quarterly plan", "Project X", "Ana"],
        ),
        ("Acme Corp's revenue vs. Globex", ["Acme Corp", "Globex"]),
        ("Can I ask about Node.js and setup.py?", ["Node.js"]),
        ("I think The Beatles were great. Paris is nice", ["The Beatles", "Paris"]),
        ("Tell me about ACME and acme again, ACME!", ["ACME"]),
        ("ok", []),
        ("yes please", []),
        ("hi there, thanks!", []),
        ("", []),
    ],
)
def test_default_extractor_on_real_sentences(sentence: str, expected: list[str]) -> None:
    assert default_extractor(sentence) == expected


@pytest.mark.parametrize(
    "text",
    [
        "0123456789abcdef" * 65536,
        "a@" * 500_000,
        "A " * 500_000,
        "Acme " * 200_000,
        "'" * 1_000_000,
        "a." * 500_000,
        "http://" * 150_000,
        "x@y.co Hello World 'q' #t @h " * 40_000,
    ],
    ids=["alnum", "at", "caps", "words", "quotes", "dots", "urls", "mixed"],
)
def test_extraction_stays_fast_on_a_megabyte(text: str) -> None:
    started = time.perf_counter()
    found = default_extractor(text)
    assert time.perf_counter() - started < 2.0
    assert all(len(i) <= 200 for i in found)


def test_extract_caps_and_dedupes_any_extractor() -> None:
    def noisy(_: str) -> list[Any]:
        return ["a", " A ", "b", 3, "", "c", "d"]

    assert extract("whatever", noisy, 3) == ["a", "b", "c"]
    many = ", ".join(f"Name{i}" for i in range(40))
    assert len(extract(many, None, 16)) == 16


# ------------------------------------------------------------------ ranking


def entity(eid: str, name: str, entity_type: str = "company", **raw: Any) -> Entity:
    return Entity.from_json(
        {
            "id": eid,
            "entity_type": entity_type,
            "canonical_name": name,
            "snapshot": {"name": name},
            **raw,
        }
    )


def test_rank_exact_then_prefix_then_substring() -> None:
    found = [entity("e1", "Old Labs"), entity("e2", "Labs United"), entity("e3", "Zeta Labs 1")]
    assert [e.id for e in rank([("Labs", found)], limit=8)] == ["e2", "e1", "e3"]


def test_an_exact_match_keeps_only_the_exact_matches_of_that_identifier() -> None:
    found = [entity(f"e{i}", f"Zeta Labs {i}") for i in (1, 10, 11, 12)]
    assert [e.id for e in rank([("Zeta Labs 1", found)], limit=8)] == ["e1"]


def test_rank_dedupes_caps_and_drops_bookkeeping_and_merged() -> None:
    acme = entity("e1", "Acme Corp")
    found = [
        acme,
        entity("c1", "conversation:acme", "conversation"),
        entity("m1", "Acme message", "conversation_message"),
        entity("old", "Acme Corp", merged_to_entity_id="e1"),
        *[entity(f"x{i}", f"Acme Corp {i}") for i in range(20)],
    ]
    ranked = rank([("Acme Corp", found), ("acme corp", [acme])], limit=8)
    assert [e.id for e in ranked] == ["e1"]
    ranked = rank([("Acme", found)], limit=5)
    assert len(ranked) == 5
    assert {e.entity_type for e in ranked} == {"company"}
    with_bookkeeping = rank([("Acme message", found)], limit=50, include_bookkeeping=True)
    assert [e.id for e in with_bookkeeping] == ["m1"]


def test_rank_reads_the_real_lookup_shapes() -> None:
    # snapshot_field mode (sample d2): the canonical name lost "Corp", the snapshot kept it;
    # and an older shape that carries entity_id instead of id.
    answer = LookupResult.from_json(
        {
            "entities": [
                {
                    "id": "ent_af939bedafbd1838b259772a",
                    "entity_type": "company",
                    "canonical_name": "Acme",
                    "snapshot": {"name": "Acme Corp"},
                },
                {
                    "entity_id": "ent_000000000000000000000001",
                    "entity_type": "company",
                    "canonical_name": "Acme Corporation Holdings",
                },
            ],
            "total": 2,
            "match_mode": "snapshot_field",
        }
    )
    ranked = rank([("Acme Corp", answer.entities)], limit=8)
    assert [e.id for e in ranked] == ["ent_af939bedafbd1838b259772a"]
    assert ranked[0].name == "Acme Corp"


# ------------------------------------------------------------------ against the store


@pytest.mark.anyio
async def test_a_named_entity_is_retrieved_not_its_substring_neighbours(
    store: EmbeddedStore,
) -> None:
    ids = await seed(store, *[f"Zeta Labs {i}" for i in range(1, 17)])
    async with memory(store).turn("What is new at Zeta Labs 1?") as t:
        assert [e.name for e in t.retrieved] == ["Zeta Labs 1"]
        t.reply = "..."
    assert await targets(store, t.user_message_id, "REFERS_TO") == {ids[0]}


@pytest.mark.anyio
async def test_retrieval_is_capped_at_retrieval_limit(store: EmbeddedStore) -> None:
    await seed(store, *[f"Nova Systems {i}" for i in range(20)])
    async with memory(store, retrieval_limit=5).turn("Tell me about Nova") as t:
        assert len(t.retrieved) == 5
        t.reply = "..."
    assert len(await targets(store, t.user_message_id, "REFERS_TO")) == 5


@pytest.mark.anyio
async def test_bookkeeping_entities_are_not_retrieved_unless_asked(store: EmbeddedStore) -> None:
    (apollo,) = await seed(store, "Apollo")
    mem = memory(store, conversation_id="Apollo")
    async with mem.turn("Apollo kickoff", turn_id="t1") as t:
        t.reply = "noted"
    async with mem.turn("Tell me about Apollo", turn_id="t2") as t:
        assert t.retrieved_ids == (apollo,)
    wide = memory(store, conversation_id="Apollo", include_bookkeeping=True)
    async with wide.turn("Tell me about Apollo", turn_id="t3") as t:
        types = {e.entity_type for e in t.retrieved}
    # "conversation:Apollo" is an exact name match too, once bookkeeping is allowed.
    assert types == {"company", "conversation"}


def only(identifier: str) -> Any:
    return lambda method, args, kwargs: args[0] == identifier


@pytest.mark.anyio
async def test_a_hanging_lookup_is_cut_at_the_deadline(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")
    faulty = FaultyTransport(store).hang("retrieve_entity_by_identifier", when=only("Globex"))
    started = time.perf_counter()
    with capture_logs() as logs:
        async with memory(faulty, retrieval_timeout=0.3).turn("Acme Corp and Globex?") as t:
            assert t.retrieved_ids == (acme,)
            t.reply = "..."
    assert time.perf_counter() - started < 3
    assert t.result.retrieval.timeouts == 1
    assert t.result.retrieval.lookups == 1
    assert any(e["event"] == "retrieval.timeout" and e["log_level"] == "info" for e in logs)
    assert t.result.completed


@pytest.mark.anyio
async def test_a_failing_lookup_is_skipped_and_logged(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")
    faulty = FaultyTransport(store).fail(
        "retrieve_entity_by_identifier",
        lambda: ServerError("store down", status=500),
        when=only("Globex"),
    )
    with capture_logs() as logs:
        async with memory(faulty).turn("Acme Corp and Globex?") as t:
            assert t.retrieved_ids == (acme,)
    assert t.result.retrieval.failures == 1
    failed = [e for e in logs if e["event"] == "retrieval.lookup_failed"]
    assert len(failed) == 1
    assert failed[0]["log_level"] == "info"  # a read loses nothing
    assert failed[0]["identifier_index"] == 1
    assert "Globex" not in repr(failed[0])


@pytest.mark.anyio
async def test_lookups_never_exceed_max_concurrency(store: EmbeddedStore) -> None:
    names = [f"Company{i}" for i in range(12)]
    await seed(store, *names)
    recorder = RecordingTransport(
        FaultyTransport(store).delay("retrieve_entity_by_identifier", 0.02)
    )
    async with memory(recorder, max_concurrency=3).turn(" and ".join(names)) as t:
        t.reply = "..."
    assert len(recorder.calls_to("retrieve_entity_by_identifier")) == 12
    assert recorder.max_in_flight("retrieve_entity_by_identifier") == 3
    assert len(t.retrieved) == 8


@pytest.mark.anyio
async def test_a_custom_extractor_replaces_the_default(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")
    recorder = RecordingTransport(store)
    mem = memory(recorder, extractor=lambda text: ["acme corp"])
    async with mem.turn("no names here") as t:
        assert t.retrieved_ids == (acme,)
    assert [c.args[0] for c in recorder.calls_to("retrieve_entity_by_identifier")] == ["acme corp"]
