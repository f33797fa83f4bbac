"""``memory.search``: what was said, found again, on the embedded store and on the dev server.

What matters: every stored message (and an entity's text fields) is found by its words,
whole words only, whatever their case or accents; a phrase in double quotes matches those
words in that order; the best match comes first; each hit says where it was said; the query
is plain text (no character of it is an operator, none raises); an empty query is a typed
error before any I/O; a forgotten conversation is never found, and a restored one is again.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from turn_support import db_path, memory, store

from neotoma_agent import (
    EmbeddedStore,
    EmptySearchQueryError,
    NeotomaMemory,
    SearchHit,
    SearchHitKind,
    SearchResult,
)

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio


async def _said(store: Any) -> tuple[NeotomaMemory, NeotomaMemory]:
    deal = memory(store, "deal-room")
    async with deal.turn("Has María de la Cruz confirmed the Halcyon deal?", turn_id="t1") as t:
        t.reply = "Not yet: she wants the TLS certificates rotated first."
    async with deal.turn("Any update on OPS-412?", turn_id="t2") as t:
        t.reply = "OPS-412 is blocked on the certificates, certificates, certificates."
    ops = memory(store, "ops-room")
    async with ops.turn("Who rotates certificates here?", turn_id="t1") as t:
        t.reply = "The platform team, every quarter."
    return deal, ops


def _texts(result: SearchResult) -> list[str]:
    return [h.text for h in result.hits]


async def test_a_hit_says_where_it_was_said(store: Any) -> None:
    deal, _ = await _said(store)

    result = await deal.search("maria")

    [hit] = result.hits
    assert hit.kind is SearchHitKind.MESSAGE
    assert hit.text == "Has María de la Cruz confirmed the Halcyon deal?"  # exact, as stored
    assert (hit.conversation_id, hit.turn_id, hit.role) == ("deal-room", "t1", "user")
    assert hit.message_id == hit.entity_id
    assert hit.entity_type == "conversation_message"
    assert hit.score > 0
    assert result.partial is False
    [reply] = (await deal.search("quarter")).hits
    assert (reply.conversation_id, reply.turn_id, reply.role) == ("ops-room", "t1", "assistant")


async def test_whole_words_whatever_their_case_or_accents(store: Any) -> None:
    deal, _ = await _said(store)

    assert _texts(await deal.search("MARÍA")) == _texts(await deal.search("maria"))
    assert len((await deal.search("Maria")).hits) == 1
    assert (await deal.search("mari")).hits == ()  # a word is whole: no prefix
    assert (await deal.search("ops-41")).hits == ()  # OPS-41 is not OPS-412
    assert len((await deal.search("ops-412")).hits) == 2
    assert len((await deal.search("OPS 412")).hits) == 2


async def test_every_word_must_be_there_and_a_phrase_in_its_order(store: Any) -> None:
    deal, _ = await _said(store)

    assert _texts(await deal.search("halcyon certificates")) == []
    assert _texts(await deal.search("certificates rotated")) == [
        "Not yet: she wants the TLS certificates rotated first."
    ]
    assert len((await deal.search('"de la cruz"')).hits) == 1
    assert (await deal.search('"cruz la de"')).hits == ()
    assert (await deal.search('"certificates rotates"')).hits == ()


async def test_the_best_match_comes_first(store: Any) -> None:
    deal, _ = await _said(store)

    result = await deal.search("certificates")

    # Every hit holds the word: a word counts once (schema 29), the shortest text first,
    # texts as long in the order they were said (the reply saying it three times, as long
    # as the first reply, after it).
    assert _texts(result) == [
        "Who rotates certificates here?",
        "Not yet: she wants the TLS certificates rotated first.",
        "OPS-412 is blocked on the certificates, certificates, certificates.",
    ]
    scores = [h.score for h in result.hits]
    assert scores[0] > scores[1] == scores[2] > 0
    assert len((await deal.search("certificates", limit=2)).hits) == 2


async def test_one_conversation_only(store: Any) -> None:
    deal, ops = await _said(store)

    scoped = await deal.search("certificates", conversation_id=ops.conversation_id)

    assert [(h.conversation_id, h.role) for h in scoped.hits] == [("ops-room", "user")]
    assert (await deal.search("certificates", conversation_id="nowhere")).hits == ()


async def test_an_entity_is_found_by_its_text_fields(store: Any) -> None:
    deal, _ = await _said(store)
    halcyon = await deal.remember("company", name="Halcyon Bio Inc", website="halcyonbio.com")

    result = await deal.search("halcyon")

    entity = result.hits[0]
    assert entity.kind is SearchHitKind.ENTITY
    assert (entity.entity_id, entity.entity_type) == (halcyon, "company")
    assert entity.text == "Halcyon Bio Inc\nhalcyonbio.com"
    assert entity.name is not None
    assert (entity.message_id, entity.conversation_id, entity.turn_id) == (None, None, None)
    assert [h.kind for h in result.hits[1:]] == [SearchHitKind.MESSAGE]
    # A field that changes is found by its new text only.
    await deal.remember("company", name="Halcyon Bio Inc", website="halcyon.bio")
    assert [h.entity_id for h in (await deal.search("halcyonbio")).hits] == []
    assert (await deal.search('"halcyon bio"')).hits[0].entity_id == halcyon


async def test_a_forgotten_conversation_is_never_found(store: Any) -> None:
    deal, ops = await _said(store)

    forgotten = await ops.forget()

    assert [h.conversation_id for h in (await deal.search("certificates")).hits] == [
        "deal-room",
        "deal-room",
    ]
    assert (await deal.search("quarter")).hits == ()
    assert (await deal.search("quarter", conversation_id="ops-room")).hits == ()
    await ops.restore(forgotten)
    assert len((await deal.search("quarter")).hits) == 1


async def test_a_revised_reply_is_found_by_its_new_text(store: Any) -> None:
    deal = memory(store, "revisions")
    async with deal.turn("Draft the memo", turn_id="t1") as t:
        t.reply = "First draft mentions zeppelins."
    async with deal.turn("Draft the memo", turn_id="t1", revision=2) as t:
        t.reply = "Second draft mentions balloons."

    assert [h.turn_id for h in (await deal.search("balloons")).hits] == ["t1"]
    assert (await deal.search("zeppelins")).hits == ()


@pytest.mark.parametrize("blank", ["", " ", "\n\t ", "\u3000"])
async def test_an_empty_query_is_a_typed_error_before_any_io(store: Any, blank: str) -> None:
    deal = memory(store, "empty")
    await store.aclose()  # no I/O may happen: a closed store would say so

    with pytest.raises(EmptySearchQueryError) as caught:
        await deal.search(blank)

    assert isinstance(caught.value, ValueError)


async def test_bad_arguments_are_refused_before_any_io(store: Any) -> None:
    deal = memory(store, "args")
    with pytest.raises(ValueError, match="limit"):
        await deal.search("x", limit=0)
    with pytest.raises(ValueError, match="limit"):
        await deal.search("x", limit=101)
    with pytest.raises(TypeError):
        await deal.search(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await deal.search("x", conversation_id=7)  # type: ignore[arg-type]


# Each query, and whether it finds something: only if every word in it was said.
HOSTILE = [
    ('"', False),
    ('"unbalanced phrase', False),
    ("*", False),
    ("cert*", False),  # no prefix search: "cert" is a word, and nobody said it
    ("-certificates", True),
    ("NEAR(certificates rotated)", False),  # "near" is a word too
    ("certificates AND OR NOT rotated", False),
    ("certificates:", True),
    ("(certificates)", True),
    ("{certificates}: ^certificates", True),
    ("\x00certificates\x00", True),
    ("\udfffcertificates\ud800", True),  # lone surrogates
    ("'; DROP TABLE entities; --", False),
    ("certificates " * 1000, True),  # 13 KB
]


@pytest.mark.parametrize(("query", "finds"), HOSTILE)
async def test_no_character_of_a_query_is_an_operator(store: Any, query: str, finds: bool) -> None:
    deal, _ = await _said(store)

    result = await deal.search(query)

    assert isinstance(result, SearchResult)
    assert bool(result.hits) is finds
    assert all("certificates" in h.text for h in result.hits)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store file holding what ``_said`` stores, written once for the property below."""
    path = tmp_path_factory.mktemp("corpus") / "memory.db"

    async def write() -> None:
        async with EmbeddedStore.open(path) as s:
            await _said(s)

    anyio.run(write)
    return path


# Any code point, lone surrogates included (a str may hold them; they separate words).
_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=300)


@settings(max_examples=150, deadline=None)
@given(query=_ANY_TEXT)
@example(query="\ud800")  # a surrogate alone: no words, but no blank query either
def test_any_text_is_a_query(corpus: Path, query: str) -> None:
    async def run() -> None:
        async with EmbeddedStore.open(corpus, read_only=True) as s:
            try:
                result = await NeotomaMemory(s, conversation_id="any").search(query)
            except EmptySearchQueryError:
                assert not query.strip()
            else:
                assert query.strip()
                assert all(isinstance(h, SearchHit) for h in result.hits)

    anyio.run(run)


async def test_random_text_is_a_query_on_every_backend(store: Any) -> None:
    """The property above, over HTTP too: a fixed-seed fuzz of 300 texts (lone surrogates,
    controls, quotes, every plane), each searched through the backend under test."""
    deal, _ = await _said(store)
    rng = random.Random(38)
    alphabet = [*'"*-:()^{}\x00\n\t NEARANDOR', "\ud800", "\udfff", "é", "\u0301", "\u3000"]
    for _ in range(300):
        query = "".join(
            rng.choice(alphabet) if rng.random() < 0.7 else chr(rng.randrange(0x110000))
            for _ in range(rng.randrange(0, 40))
        )
        try:
            result = await deal.search(query)
        except EmptySearchQueryError:
            assert not query.strip()
        else:
            assert query.strip()
            assert all(isinstance(h, SearchHit) for h in result.hits)
