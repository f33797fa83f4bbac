"""Issue 22's cases, on both transports (the embedded store, the dev server over HTTP):
the exact entity is found whatever contains its name, nothing is linked by a word inside
another word, what the conversation just made is found; and the retriever seam."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio
import pytest
from turn_support import capture_logs, db_path, memory, store, targets

from neotoma_agent import Entity, NeotomaMemory, RetrievalQuery, RetrievedEntity
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio


async def test_a_longer_name_never_hides_the_exact_entity(store: Transport) -> None:
    mem = memory(store)
    acme = await mem.remember("company", name="Acme Corp", website="acme.com")
    task = await mem.remember(
        "task", title="Follow up: What do we know about Acme Corp?", status="open"
    )
    async with mem.turn("What do we know about Acme Corp?") as t:
        (found,) = t.retrieved
        assert isinstance(found, RetrievedEntity)
        assert (found.id, found.reason, found.score) == (acme, "exact", 1.0)
        assert found.snapshot["website"] == "acme.com"  # its fields reach the prompt
        assert "website=acme.com" in t.context()
        assert [(c.id, c.reason) for c in t.candidates] == [(task, "partial")]
        t.reply = "A customer."
    assert await targets(store, t.user_message_id, "REFERS_TO") == {acme}
    assert await targets(store, t.result.assistant_message_id, "REFERS_TO") == {acme}


async def test_a_word_inside_another_word_is_never_linked(store: Transport) -> None:
    mem = memory(store)
    ana = await mem.remember("person", name="Ana Lopez")
    await mem.remember("person", name="Seth Rogen")
    await mem.remember("company", name="Asset Partners")
    await mem.remember("company", name="Acme Corp")
    async with mem.turn("Set up a call with Ana Lopez.") as t:
        assert [(e.id, e.reason) for e in t.retrieved] == [(ana, "exact")]
        assert t.candidates == ()
        assert "Seth" not in t.context()
        t.reply = "Done."
    assert await targets(store, t.user_message_id, "REFERS_TO") == {ana}
    assert await targets(store, t.result.assistant_message_id, "REFERS_TO") == {ana}
    async with mem.turn("Question 3 about Acme Corp?") as t:
        # Ana Lopez, named by the last turn, is shown (recent) but not linked.
        assert [(e.name, e.reason) for e in t.retrieved] == [
            ("Acme Corp", "exact"),
            ("Ana Lopez", "recent"),
        ]
        assert [e.name for e in t.retrieved if e.id in t.retrieved_ids] == ["Acme Corp"]
        assert t.retrieval.identifiers == 1  # "Question" is not looked up


async def test_what_the_conversation_just_made_is_found(store: Transport) -> None:
    mem = memory(store)
    async with mem.turn("Book me a table for two at Casa Lisboa") as t:
        booking = t.remember("booking", name="Table for two at Casa Lisboa", party=2)
        t.reply = f"Booked ({booking})."
    async with mem.turn("What did I book?") as t:
        (found,) = t.retrieved
        assert isinstance(found, RetrievedEntity)
        assert (found.id, found.reason) == (booking, "recent")
        assert found.score >= mem.link_threshold
        assert found.entity_type == "booking"
        t.reply = "A table for two."
    assert booking in await targets(store, t.user_message_id, "REFERS_TO")
    # A message that names neither the booking nor its type shows it (the last turn's)
    # without linking it.
    async with mem.turn("Thanks, that is all") as t:
        assert [(e.id, e.reason) for e in t.retrieved] == [(booking, "recent")]
        assert t.retrieved_ids == ()
        assert t.candidates == ()
        t.reply = "You're welcome."
    assert await targets(store, t.user_message_id, "REFERS_TO") == set()


async def test_recency_costs_no_request(store: Transport) -> None:
    from neotoma_agent.testing import RecordingTransport

    async with memory(store).turn("Book a table") as t:
        booking = t.remember("booking", name="Table for two")
        t.reply = "Booked."
    recorder = RecordingTransport(store)
    async with memory(recorder).turn("What did I book?") as t:
        assert t.retrieved_ids == (booking,)
    # Nothing to look up: the history read (which carries the ids) and the two stores.
    assert sorted(c.method for c in recorder.calls) == ["recent_conversation", "store", "store"]


async def test_a_first_name_alone_links_the_person_the_last_turn_named(store: Transport) -> None:
    mem = memory(store)
    ana = await mem.remember("person", name="Ana Lopez")
    silva = await mem.remember("person", name="Ana Silva")
    async with mem.turn("Is Ana here?") as t:  # two Anas: neither is linked
        assert t.retrieved == ()
        assert {c.id for c in t.candidates} == {ana, silva}
        t.reply = "Which Ana?"
    async with mem.turn("Tell me about Ana Lopez") as t:
        t.reply = "The CTO."
    async with mem.turn("When is Ana free?") as t:
        assert [(e.id, e.reason) for e in t.retrieved] == [(ana, "recent")]


async def test_link_threshold_decides_what_is_linked(store: Transport) -> None:
    mem = memory(store)
    labs = await mem.remember("company", name="Zeta Labs")
    async with mem.turn("What about Zeta?") as t:
        assert t.retrieved == ()
        assert [(c.id, c.score) for c in t.candidates] == [(labs, 0.45)]
    loose = memory(store, link_threshold=0.4)
    async with loose.turn("What about Zeta?") as t:
        assert [(e.id, e.reason) for e in t.retrieved] == [(labs, "partial")]
        t.reply = "..."
    assert await targets(store, t.user_message_id, "REFERS_TO") == {labs}
    for bad in (-0.1, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(ValueError, match="link_threshold"):
            NeotomaMemory(store, conversation_id="c", link_threshold=bad)


class Embeddings:
    """A stand-in for an embedding index: entities by id, a score per query word."""

    def __init__(self, entities: dict[str, tuple[Entity, float]], delay: float = 0.0) -> None:
        self.entities = entities
        self.delay = delay
        self.queries: list[RetrievalQuery] = []

    async def __call__(self, query: RetrievalQuery) -> Iterable[tuple[Entity, float]]:
        self.queries.append(query)
        await anyio.sleep(self.delay)
        return [hit for word, hit in self.entities.items() if word in query.text]


async def test_a_retriever_is_merged_into_the_ranking(store: Transport) -> None:
    seed = memory(store)
    acme = await seed.remember("company", name="Acme Corp")
    hotel = await seed.remember("place", name="Hotel Avenida")
    found = await store.retrieve_entity_by_identifier(hotel)
    (hotel_entity,) = found.entities
    weak = Entity(acme, "company", "Acme", {"name": "Acme Corp"}, {})
    plugin = Embeddings({"lodging": (hotel_entity, 0.9), "where": (weak, 0.3)})
    mem = memory(store, retriever=plugin)
    async with mem.turn("Where is our lodging near Acme Corp?") as t:
        got = [(e.id, e.reason, e.score) for e in t.retrieved]
        # The exact match first, then the retriever's; its weak hit on an entity found
        # exactly anyway does not lower it.
        assert got == [(acme, "exact", 1.0), (hotel, "plugin", 0.9)]
        t.reply = "..."
    (query,) = plugin.queries
    assert query.identifiers == ("Acme Corp",)
    assert query.conversation_id == "chat-1"
    assert await targets(store, t.user_message_id, "REFERS_TO") == {acme, hotel}


async def test_a_slow_or_failing_retriever_is_skipped(store: Transport) -> None:
    seed = memory(store)
    acme = await seed.remember("company", name="Acme Corp")
    slow = memory(store, retriever=Embeddings({}, delay=30), retrieval_timeout=0.3)
    with capture_logs() as logs:
        async with slow.turn("Acme Corp?") as t:
            assert t.retrieved_ids == (acme,)
            assert t.retrieval.plugin is None
    assert any(e["event"] == "retrieval.timeout" for e in logs)

    async def broken(query: RetrievalQuery) -> Any:
        raise RuntimeError("index offline")

    with capture_logs() as logs:
        async with memory(store, retriever=broken).turn("Acme Corp?") as t:
            assert t.retrieved_ids == (acme,)
    (failed,) = [e for e in logs if e["event"] == "retrieval.plugin_failed"]
    assert failed["log_level"] == "warning"
    assert failed["error_class"] == "RuntimeError"
