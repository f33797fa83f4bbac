"""Every way of naming an entity finds it, on both transports (the embedded store, the dev
server over HTTP), and nothing else is linked: a person stored with an email, a company
with or without its legal suffix, a domain, URL or email domain, a ticket id leading a
title, lowercase and unaccented names, possessives; and the last turns' entities, shown
(reason ``recent``) and linked only when a pronoun plainly refers to them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from turn_support import db_path, memory, store, targets

from neotoma_agent import NeotomaMemory, default_extractor
from neotoma_agent._recall.loose import loose_words
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]  # fixtures

anyio = pytest.mark.anyio


async def linked(mem: NeotomaMemory, text: str) -> tuple[str, ...]:
    """The ids ``text``'s turn links, after checking its edges say the same."""
    async with mem.turn(text) as t:
        ids = t.retrieved_ids
        t.reply = "Noted."
    assert await targets(mem.transport, t.user_message_id, "REFERS_TO") == set(ids)
    return ids


@anyio
async def test_a_person_stored_with_an_email_is_found_by_name_whatever_contains_it(
    store: Transport,
) -> None:
    mem = memory(store, history_turns=0)
    # Her canonical name is her email, which holds neither of her names.
    lena = await mem.remember("person", name="Lena Fischer", email="lf@x.io")
    await mem.remember("task", title="Send Lena Fischer the deck", status="open")
    await mem.remember("company", name="Lena Fischer Design")
    meyer = await mem.remember("person", name="Lena Meyer", email="lena@meyer.de")
    assert await linked(mem, "Tell me about Lena Fischer.") == (lena,)
    assert await linked(mem, "Lena Meyer and Lena Fischer both need it") == (meyer, lena)
    assert await linked(mem, "ping lena fischer about the slides") == (lena,)
    assert await linked(mem, "Is Lena around?") == ()


@anyio
async def test_a_company_is_found_with_and_without_its_legal_suffix(store: Transport) -> None:
    mem = memory(store, history_turns=0)
    halcyon = await mem.remember("company", name="Halcyon Bio Inc")
    await mem.remember("company", name="Halcyon Biologics")
    await mem.remember("deal", name="Halcyon Bio renewal 2027")
    assert await linked(mem, "Status of the Halcyon Bio deal?") == (halcyon,)
    assert await linked(mem, "Halcyon Bio Inc. signed the order form") == (halcyon,)
    assert await linked(mem, "Halcyon Bio's pricing page changed") == (halcyon,)


@anyio
async def test_domains_urls_and_email_domains_find_the_website(store: Transport) -> None:
    mem = memory(store, history_turns=0)
    halcyon = await mem.remember(
        "company", name="Halcyon Bio", website="https://www.halcyonbio.com/"
    )
    await mem.remember("company", name="Halcyon Biologics", website="halcyonbiologics.com")
    lena = await mem.remember("person", name="Lena Fischer", email="lena@halcyonbio.com")
    assert await linked(mem, "Is halcyonbio.com down?") == (halcyon,)
    assert await linked(mem, "see https://www.halcyonbio.com/pricing") == (halcyon,)
    assert await linked(mem, "Write to sales@halcyonbio.com about pricing") == (halcyon,)
    # An email someone has names them, not their company's site.
    assert await linked(mem, "Email lena@halcyonbio.com the contract") == (lena,)
    assert await linked(mem, "Is halcyonbio.co down?") == ()


@anyio
async def test_a_ticket_id_finds_the_title_it_leads_as_a_whole_token(store: Transport) -> None:
    mem = memory(store, history_turns=0)
    ops412 = await mem.remember("task", title="OPS-412: Rotate TLS certificates")
    ops41 = await mem.remember("task", title="[OPS-41] Renew the staging domain")
    ops4120 = await mem.remember("task", title="OPS-4120 - Archive old logs")
    await mem.remember("note", title="Retro notes on OPS-412 and the outage")
    assert await linked(mem, "Any update on OPS-412?") == (ops412,)
    assert await linked(mem, "Close OPS-4120 and OPS-41 today") == (ops4120, ops41)
    assert await linked(mem, "Is OPS-413 done?") == ()
    assert await linked(mem, "Who took OPS-4?") == ()


@anyio
async def test_lowercase_names_are_matched_word_for_word(store: Transport) -> None:
    mem = memory(store, history_turns=0)
    taskflow = await mem.remember("product", name="TaskFlow")
    migration = await mem.remember("project", name="TaskFlow Migration")
    kestrel = await mem.remember("company", name="Kestrel Robotics")
    assert await linked(mem, "is taskflow down?") == (taskflow,)
    # The longer name wins: "taskflow" inside "taskflow migration" is not the product.
    assert await linked(mem, "how is the taskflow migration going") == (migration,)
    assert await linked(mem, "set up kestrel robotics onboarding") == (kestrel,)
    assert await linked(mem, "the flow of tasks is slow this week") == ()
    assert await linked(mem, "is kestrel in?") == ()  # a word of a name is not the name


@anyio
async def test_names_with_particles_are_found_with_or_without_their_accents(
    store: Transport,
) -> None:
    mem = memory(store, history_turns=0)
    maria = await mem.remember("person", name="María de la Cruz")
    jan = await mem.remember("person", name="Jan van der Berg")
    await mem.remember("person", name="Jan Berg", email="jan@berg.nl")
    assert await linked(mem, "Has María de la Cruz confirmed?") == (maria,)
    assert await linked(mem, "Maria de la Cruz called back") == (maria,)
    assert await linked(mem, "did maria de la cruz sign?") == (maria,)
    assert await linked(mem, "Set a time with Jan van der Berg") == (jan,)
    # Lowercase in a message that capitalises other names: two words in a row are looked up.
    assert await linked(mem, "loop in jan van der berg on the Kestrel bid") == (jan,)


def test_a_message_that_capitalises_names_looks_up_only_runs_of_lowercase_words() -> None:
    assert loose_words("is taskflow down?", []).lookups == ("taskflow",)
    # "Lena" inside the sentence: the writer capitalises names, "taskflow" alone is a word.
    assert loose_words("Ask Lena whether taskflow is down", ["Lena"]).lookups == ()
    found = loose_words("loop in jan van der berg on the Kestrel bid", ["Kestrel"])
    assert found.lookups == ("berg",)
    assert found.people == ("jan van der berg",)
    # Never an everyday word, a weekday or a URL's scheme.
    assert loose_words("see https://x.io on friday, the slides are ready", ["x.io"]).lookups == ()


def test_a_possessive_ends_the_name() -> None:
    assert default_extractor("What does Acme Corp's CTO think?") == ["Acme Corp", "CTO"]
    assert default_extractor("Jonas Weber’s notes are late") == ["Jonas Weber"]
    assert default_extractor("Kestrel Robotics' office") == ["Kestrel Robotics"]
    assert default_extractor("Introduce Lena Fischer to Jonas Weber") == [
        "Lena Fischer",
        "Jonas Weber",
    ]


@given(st.text(max_size=300))
def test_loose_words_are_bounded_and_never_common_words(text: str) -> None:
    words = loose_words(text, default_extractor(text))
    assert len(words.lookups) <= 4 + 2 * len(default_extractor(text))
    assert len(words.people) <= 2
    assert len(words.tokens) == len(words.covered)
    assert not {"the", "going", "things", "today"} & set(words.lookups)


@anyio
async def test_the_last_turns_entities_are_shown_and_linked_only_when_referred_to(
    store: Transport,
) -> None:
    mem = memory(store)
    jonas = await mem.remember("person", name="Jonas Weber", email="jw@kestrel.io")
    lena = await mem.remember("person", name="Lena Fischer")
    meyer = await mem.remember("person", name="Lena Meyer")
    lisbon = await mem.remember("place", name="Lisbon")
    assert await linked(mem, "Book a call with Jonas Weber") == (jonas,)
    async with mem.turn("Send him the onboarding checklist.") as t:
        assert [(e.id, e.reason) for e in t.retrieved] == [(jonas, "recent")]
        assert t.retrieved_ids == (jonas,)  # "him": the one person the last turn named
        t.reply = "Sent."
    assert await targets(store, t.user_message_id, "REFERS_TO") == {jonas}
    async with mem.turn("What is the weather in Lisbon?") as t:
        assert [(e.id, e.reason) for e in t.retrieved] == [(lisbon, "exact"), (jonas, "recent")]
        assert t.retrieved_ids == (lisbon,)  # shown, not linked: the message does not say him
        t.reply = "Sunny."
    assert await targets(store, t.user_message_id, "REFERS_TO") == {lisbon}
    assert await linked(mem, "Introduce Lena Fischer to Jonas Weber") == (lena, jonas)
    assert set(await linked(mem, "Send both of them the agenda")) == {lena, jonas}
    # Two people: "him" is ambiguous, nobody is linked (both are shown).
    async with mem.turn("Did he answer?") as t:
        assert {e.id for e in t.retrieved} == {lena, jonas}
        assert t.retrieved_ids == ()
        t.reply = "Who?"
    # The message names a person: "her" is her, not someone from the last turns.
    assert await linked(mem, "Ask Lena Meyer about her trip") == (meyer,)


@anyio
async def test_loose_lookups_stay_in_the_enter_round(store: Transport) -> None:
    mem = memory(store, history_turns=0)
    await mem.remember("product", name="TaskFlow")
    recorder = RecordingTransport(store)
    # No identifier at all: only the loose word is looked up, beside the user store.
    async with memory(recorder, history_turns=0).turn("is taskflow down?") as t:
        t.reply = "No."
    assert len(t.retrieved_ids) == 1
    (lookup,) = recorder.calls_to("retrieve_entity_by_identifier")
    user_store, closing = recorder.calls_to("store")
    assert lookup.overlaps(user_store)
    assert not lookup.overlaps(closing)


@anyio
async def test_a_recent_partial_match_is_linked_only_when_unambiguous(store: Transport) -> None:
    mem = memory(store)
    design = await mem.remember("company", name="Lena Fischer Design")
    lena = await mem.remember("person", name="Lena Fischer", email="lf@x.io")
    meyer = await mem.remember("person", name="Lena Meyer")
    assert await linked(mem, "Did Lena Fischer Design send the invoice?") == (design,)
    # "Lena Fischer" names her exactly: the design studio the last turn named is not boosted.
    assert await linked(mem, "Lena Meyer and Lena Fischer are both out") == (meyer, lena)
    # Two Lenas were just named: "Lena" alone is either, so neither is linked.
    async with mem.turn("Is Lena free tomorrow?") as t:
        assert {e.id for e in t.retrieved} == {lena, meyer, design}
        assert t.retrieved_ids == ()
        t.reply = "Which one?"
    # One Lena just named: "Lena" is her.
    assert await linked(mem, "Tell me about Lena Meyer") == (meyer,)
    assert await linked(mem, "When is Lena free?") == (meyer,)
