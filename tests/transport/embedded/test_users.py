"""``store.for_user(user_id)``: many users' memories in one embedded store, each its own.

What matters: whatever user A stores, no read through user B's view (nor the unscoped
store, the local dev user's) finds it, whichever read it is; the same name remembered by
two users is two entities (tenant-scoped ids), the same ``conversation_id`` is two
conversations; the unscoped store keeps its ids; a bad user id is refused before any
write, and nothing stored is lost.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent import (
    LOCAL_USER_ID,
    EmbeddedStore,
    InvalidUserIdError,
    NeotomaMemory,
    NotFoundError,
    UserStore,
    check_user_id,
)
from neotoma_agent._neotoma.identity import entity_id_for
from neotoma_agent._records.keys import conversation_entity_id

pytestmark = pytest.mark.anyio

SECRET = "Qzv8841 treats her diabetes"


async def _alice_turn(store: UserStore | EmbeddedStore) -> tuple[NeotomaMemory, str]:
    memory = NeotomaMemory(store, conversation_id="clinic")
    async with memory.turn("Do you know Maria Gomez? She works at Acme Corp.") as t:
        maria = t.remember("person", name="Maria Gomez", notes=SECRET)
        t.reply = f"Noted: {SECRET}."
    return memory, maria


async def test_a_user_sees_none_of_another_users_memory(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        alice, bob = store.for_user("alice"), store.for_user("bob")
        _, maria = await _alice_turn(alice)
        for other in (bob, store):
            memory = NeotomaMemory(other, conversation_id="clinic")
            async with memory.turn("Do you know Maria Gomez?") as t:
                assert t.retrieved == ()
                assert "Qzv8841" not in t.context()
                t.reply = "No."
            assert len(await memory.history(limit=None)) == 1  # its own turn only
            assert (await other.search("Qzv8841")).hits == ()
            assert (await other.retrieve_entity_by_identifier("Maria Gomez")).entities == ()
            assert (await other.retrieve_entity_by_identifier(maria)).entities == ()
            with pytest.raises(NotFoundError):
                await other.get_entity_snapshot(maria)
            assert (await other.list_observations(maria)).observations == ()
            assert (await other.query_entities(entity_type="person")).entities == ()
        # Alice still has all of it.
        assert (await alice.search("Qzv8841")).hits
        assert (await alice.get_entity_snapshot(maria)).snapshot["notes"] == SECRET


async def test_the_same_name_is_one_entity_per_user_with_a_tenant_scoped_id(
    tmp_path: Path,
) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        ids = {}
        for user in ("alice", "bob", LOCAL_USER_ID):
            memory = NeotomaMemory(store.for_user(user), conversation_id="c")
            ids[user] = await memory.remember("company", name="Acme Corp")
        assert len(set(ids.values())) == 3
        assert ids[LOCAL_USER_ID] == entity_id_for("company", "Acme Corp")
        assert ids["alice"] == entity_id_for("company", "Acme Corp", "alice")
        # the unscoped store is the local dev user: the same entity, the same view
        snap = await store.get_entity_snapshot(ids[LOCAL_USER_ID])
        assert snap.entity_type == "company"
        assert store.for_user(LOCAL_USER_ID).tenant_id is None
        assert store.for_user("alice").tenant_id == "alice"
        assert store.for_user("alice").user_id == "alice"
        assert store.tenant_id is None


async def test_two_users_may_use_the_same_conversation_id_and_turn_ids(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        for user, words in (("alice", "alpha words"), ("bob", "bravo words")):
            memory = NeotomaMemory(store.for_user(user), conversation_id="support")
            async with memory.turn(words, turn_id="t1") as t:
                t.reply = f"reply to {words}"
        for user, words in (("alice", "alpha words"), ("bob", "bravo words")):
            memory = NeotomaMemory(store.for_user(user), conversation_id="support")
            [turn] = await memory.history(limit=None)
            assert turn.user == words
            page = await store.for_user(user).conversation_summaries()
            assert [i.conversation_id for i in page.items] == ["support"]
            entity_id = conversation_entity_id("support", user)
            assert page.items[0].entity_id == entity_id
        assert (await store.conversation_summaries()).items == ()


async def test_views_share_the_store_and_closing_one_leaves_it_open(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        async with store.for_user("alice") as alice:
            await NeotomaMemory(alice, conversation_id="c").remember("company", name="Acme")
        assert not store.closed
        assert not alice.closed
        again = store.for_user("alice")
        assert (await again.query_entities(entity_type="company")).total == 1
        assert "alice" not in repr(again)
    assert alice.closed


_BAD_IDS: list[Any] = ["", " alice", "alice\n", "a\x00b", "a\x1bb", "x" * 10_000, 7, None, b"alice"]


@pytest.mark.parametrize("bad", _BAD_IDS, ids=repr)
async def test_a_bad_user_id_is_refused_before_any_write(tmp_path: Path, bad: Any) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        await NeotomaMemory(store.for_user("alice"), conversation_id="c").remember(
            "company", name="Acme"
        )
        with pytest.raises(InvalidUserIdError) as caught:
            store.for_user(bad)
        with pytest.raises(InvalidUserIdError):
            await store.forget_user(bad)
        assert isinstance(caught.value, ValueError)
        if isinstance(bad, str) and bad:
            assert bad.strip() not in str(caught.value)
        assert (await store.for_user("alice").query_entities(entity_type="company")).total == 1
    with sqlite3.connect(path) as conn:  # no user was added for the bad id
        assert conn.execute("SELECT user_id FROM users").fetchall() == [("alice",)]


@given(st.text(min_size=1, max_size=256))
def test_check_user_id_accepts_exactly_the_printable_trimmed_ids(text: str) -> None:
    printable = text == text.strip() and all(
        not ("\x00" <= c <= "\x1f" or "\x7f" <= c <= "\x9f" or "\ud800" <= c <= "\udfff")
        for c in text
    )
    if printable:
        assert check_user_id(text) == text
    else:
        with pytest.raises(InvalidUserIdError):
            check_user_id(text)


async def test_a_wrapped_view_derives_the_users_ids(tmp_path: Path) -> None:
    from neotoma_agent.testing import RecordingTransport

    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        wrapped = RecordingTransport(store.for_user("alice"))
        assert wrapped.tenant_id == "alice"
        memory = NeotomaMemory(wrapped, conversation_id="c")
        async with memory.turn("look it up", turn_id="t1") as t:
            t.record_tool("lookup", args={"q": "acme"}, result="none")
            acme = t.remember("company", name="Acme Corp")
            t.reply = "done"
        assert acme == entity_id_for("company", "Acme Corp", "alice")
        [call] = await memory.tools("t1")
        assert call.args == {"q": "acme"}
        [turn] = await memory.history(limit=None)
        assert turn.reply == "done"


@given(st.sampled_from(["company", "person", "note"]), st.text(min_size=1, max_size=40))
def test_a_tenant_scoped_id_hashes_neotomas_prefixed_basis(entity_type: str, name: str) -> None:
    import hashlib

    from neotoma_agent._neotoma.identity import normalize

    basis = f"tenant:alice:{entity_type}:{normalize(entity_type, name)}"
    digest = hashlib.sha256(basis.encode("utf-8", "surrogatepass")).hexdigest()
    assert entity_id_for(entity_type, name, "alice") == "ent_" + digest[:24]
    assert entity_id_for(entity_type, name, None) == entity_id_for(entity_type, name)


async def test_a_users_retrieval_ranks_as_the_unscoped_stores(tmp_path: Path) -> None:
    queries = (
        "Tell me about Acme Corp Inc.",
        "What about Acme Inc?",
        "email maria@acme.test",
        "Did Dr. Maria Gomez call Globex, Ltd?",
        "OPS-412 and the Q3 plan",
    )
    ranked = {}
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        for view in (store, store.for_user("alice")):
            memory = NeotomaMemory(view, conversation_id="c")
            await memory.remember("company", name="Acme Corp", website="https://acme.test")
            await memory.remember("company", name="Globex Ltd")
            await memory.remember("person", name="Dr. Maria Gomez", email="maria@acme.test")
            await memory.remember("task", title="OPS-412: Rotate TLS", notes="Q3 plan")
            ranked[view.user_id] = [
                [(e.entity_type, e.canonical_name, e.reason, e.score) for e in found.entities]
                for found in [await memory.retrieve(q) for q in queries]
            ]
    assert ranked["alice"] == ranked[LOCAL_USER_ID]
    assert all(ranked["alice"])


async def test_a_view_of_a_read_only_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        await NeotomaMemory(store.for_user("alice"), conversation_id="c").remember(
            "company", name="Acme Corp"
        )
    async with EmbeddedStore.open(path, read_only=True) as store:
        alice, bob = store.for_user("alice"), store.for_user("bob")
        assert alice.read_only
        assert (await alice.query_entities(entity_type="company")).total == 1
        assert (await bob.query_entities(entity_type="company")).total == 0
        with pytest.raises(PermissionError):
            await NeotomaMemory(bob, conversation_id="c").remember("company", name="Globex")
        with pytest.raises(PermissionError):
            await store.forget_user("alice")
