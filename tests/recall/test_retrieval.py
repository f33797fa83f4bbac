"""Bounded retrieval: what is looked up, how answers are ranked, and that it never fails a turn."""

from __future__ import annotations

import time
from typing import Any

import pytest
from turn_support import capture_logs, db_path, memory, seed, store, targets

from neotoma_agent._neotoma.identity import entity_id_for
from neotoma_agent._recall.ranking import RetrievedEntity, ranked, score_lookups
from neotoma_agent._recall.retrieval import default_extractor, extract
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
        # Issue 22: common words capitalised only because they start a sentence.
        ("Set up a call with Ana Lopez.", ["Ana Lopez"]),
        ("Question 3 about Acme Corp?", ["Acme Corp"]),
        ("Meeting moved. Schedule it with Globex", ["Globex"]),
        ("Mark Smith called", ["Mark Smith"]),  # a first name, not a common word
        # Accents, particles, camel case, tickets.
        ("Met José Núñez and María de la Cruz", ["José Núñez", "María de la Cruz"]),
        (
            "Ask Ludwig van Beethoven and Bank of America",
            ["Ludwig van Beethoven", "Bank of America"],
        ),
        ("Is the iPhone better than GitHub or eBay?", ["iPhone", "GitHub", "eBay"]),
        ("Fix ABC-123 and PROJ2-7, not abc-12", ["ABC-123", "PROJ2-7"]),
        ("What did I book?", []),
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


def rank(
    lookups: list[tuple[str, list[Entity]]], *, threshold: float = 0.75, **kw: Any
) -> list[RetrievedEntity]:
    answered = [(i, ident, found) for i, (ident, found) in enumerate(lookups)]
    bookkeeping = kw.get("include_bookkeeping", False)
    return [e for e in ranked(score_lookups(answered, bookkeeping)) if e.score >= threshold]


def test_whole_words_only_and_partial_matches_rank_below_the_threshold() -> None:
    found = [
        entity("e1", "Old Labs"),
        entity("e2", "Labs United"),
        entity("e3", "Zeta Labs 1"),
        entity("e4", "Labsworth"),
    ]
    assert rank([("Labs", found)]) == []
    below = rank([("Labs", found)], threshold=0, include_bookkeeping=False)
    # 0.9 x 1/2 for the two-word names, 0.9 x 1/3 for the three-word one; "Labsworth" is
    # no match at all (a word boundary is required).
    assert [(e.id, e.reason, e.score) for e in below] == [
        ("e1", "partial", 0.45),
        ("e2", "partial", 0.45),
        ("e3", "partial", 0.3),
    ]


def test_set_is_not_in_seth_or_asset() -> None:
    found = [entity("p1", "Seth Rogen", "person"), entity("c1", "Asset Partners")]
    assert rank([("Set", found)], threshold=0, include_bookkeeping=False) == []


def test_an_exact_match_outranks_longer_names() -> None:
    found = [entity(f"e{i}", f"Zeta Labs {i}") for i in (10, 11, 12, 1)]
    assert [e.id for e in rank([("Zeta Labs 1", found)], include_bookkeeping=False)] == ["e1"]


def test_the_computed_id_makes_a_match_exact() -> None:
    # "Acme Corp" names the company whose canonical name is "Acme" (the suffix is stripped
    # before hashing), though neither its canonical name nor a field says "Acme Corp".
    company = Entity.from_json(
        {"id": entity_id_for("company", "Acme Corp"), "entity_type": "company",
         "canonical_name": "Acme", "snapshot": {"website": "acme.com"}}
    )  # fmt: skip
    task = entity("t1", "task:Follow up: What do we know about Acme Corp?", "task")
    got = rank([("Acme Corp", [task, company])], threshold=0, include_bookkeeping=False)
    assert [(e.id, e.reason) for e in got] == [(company.id, "exact"), ("t1", "partial")]
    assert got[0].score == 1.0
    assert got[1].score < 0.75


def test_fields_match_emails_domains_and_handles() -> None:
    person = Entity.from_json(
        {"id": "p1", "entity_type": "person", "canonical_name": "person:ana@acme.com",
         "snapshot": {"name": "Ana Lopez", "email": "Ana@Acme.com", "handle": "@ana_l"}}
    )  # fmt: skip
    company = Entity.from_json(
        {"id": "c1", "entity_type": "company", "canonical_name": "Acme",
         "snapshot": {"website": "https://www.acme.com/"}}
    )  # fmt: skip
    got = rank([("acme.com", [person, company])], threshold=0, include_bookkeeping=False)
    assert [(e.id, e.reason, e.score) for e in got] == [
        ("c1", "field", 0.95),
        ("p1", "partial", 0.5),  # an email at the domain: a colleague, not the company
    ]
    assert [e.reason for e in rank([("ana@acme.com", [person])], include_bookkeeping=False)] == [
        "exact"  # its canonical name is its email
    ]
    assert [e.reason for e in rank([("@ana_l", [person])], include_bookkeeping=False)] == ["field"]


def test_rank_dedupes_and_drops_bookkeeping_and_merged() -> None:
    acme = entity("e1", "Acme Corp")
    found = [
        acme,
        entity("c1", "conversation:acme", "conversation"),
        entity("m1", "Acme message", "conversation_message"),
        entity("old", "Acme Corp", merged_to_entity_id="e1"),
        *[entity(f"x{i}", f"Acme Corp {i}") for i in range(20)],
    ]
    ranked_ = rank([("Acme Corp", found), ("acme corp", [acme])], include_bookkeeping=False)
    assert [e.id for e in ranked_] == ["e1"]
    with_bookkeeping = rank([("Acme message", found)], include_bookkeeping=True)
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
    got = rank([("Acme Corp", list(answer.entities))], include_bookkeeping=False)
    assert [e.id for e in got] == ["ent_af939bedafbd1838b259772a"]
    assert got[0].name == "Acme Corp"


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
    # "Nova" names none of them exactly (partial matches score 0.3): linked only when the
    # threshold lets partial matches through.
    async with memory(store, retrieval_limit=5).turn("Tell me about Nova") as t:
        assert t.retrieved == ()
        assert len(t.candidates) == 5
        t.reply = "..."
    async with memory(store, retrieval_limit=5, link_threshold=0.2).turn("About Nova") as t:
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
    looked_up = [c.args[0] for c in recorder.calls_to("retrieve_entity_by_identifier")]
    # Looked up as the company's canonical name ("acme": its legal suffix stripped), which
    # every longer name containing "acme corp" contains too.
    assert looked_up == ["acme"]


@pytest.mark.anyio
async def test_memory_retrieve_iterates_as_t_retrieved_does(store: Any) -> None:
    # `for e in await memory.retrieve(...)` reads the bounded set, best first: the same
    # entities, in the same order, as a turn's `t.retrieved` for the same text alone.
    await seed(store, "Acme Corp", "Acme Labs")
    m = memory(store)
    found = await m.retrieve("What do we know about Acme Corp?")
    assert [e.id for e in found] == list(found.ids)
    assert len(found) == len(found.ids) > 0
    assert found[0].id == found.ids[0]
    assert tuple(found[:1]) == found.entities[:1]
    assert tuple(found) == found.entities
    async with memory(store, history_turns=0).turn("What do we know about Acme Corp?") as t:
        t.reply = "ok"
    assert [e.id for e in t.retrieved] == [e.id for e in found]


# ------------------------------------------------------------------ the step both drivers run


def test_retrieval_as_a_machine_step_asks_for_its_plan_once_and_ranks_the_answer() -> None:
    """``_recall.retrieval.retrieval`` (sans I/O): one ``Lookups`` request for the plan, answered
    with the ``Found`` its reads filled in; what it returns is that answer ranked. A plan
    with nothing to look up asks nothing."""
    from neotoma_agent._engine.requests import Lookups
    from neotoma_agent._recall.retrieval import Found, retrieval

    kw: dict[str, Any] = {"limit": 8, "lookup_limit": 25, "started": time.perf_counter()}
    idle = retrieval([], "ok", **kw)
    with pytest.raises(StopIteration) as nothing:
        next(idle)
    assert nothing.value.value.entities == ()

    step = retrieval(["Acme Corp"], "Tell me about Acme Corp", **kw)
    request = next(step)
    assert isinstance(request, Lookups)
    assert request.limit == 25
    assert request.plan[0][1] == "Acme"  # the company's name form
    found = Found(request.plan)
    acme_id = entity_id_for("company", "Acme Corp")
    acme = Entity(acme_id, "company", "acme", {"name": "Acme Corp"}, {})
    found.answered(0, [acme])
    with pytest.raises(StopIteration) as ranked_found:
        step.send(found)
    retrieved = ranked_found.value.value
    assert retrieved.ids == (acme_id,)
    assert (retrieved.stats.lookups, retrieved.stats.failures) == (1, 0)


def test_a_hook_on_a_store_file_ranks_as_a_default_memory_does(tmp_path: Any) -> None:
    """One record of a default memory's ranking: what a memory's settings give by default
    and what a hook opening a turn on a store file (without a memory) ranks by."""
    from neotoma_agent import NeotomaMemory
    from neotoma_agent._recall.retrieval import DEFAULT_RANKING

    default = NeotomaMemory(EmbeddedStore(str(tmp_path / "m.db")), conversation_id="c")
    assert default._phases.ranking == DEFAULT_RANKING
