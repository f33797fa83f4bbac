"""``memory.forget_entity()``: one entity deleted as Neotoma's ``/delete_entity`` does, on the
embedded store and over HttpTransport to the dev server's ``/delete_entity`` route.

What matters: a deleted entity leaves every reader a turn or a user has (lookups and
retrieval, the context block, search, the messages' REFERS_TO lists that history and
``show`` read) and comes back whole on restore; its edges stay, as on a real server (only
their deleted end is skipped); nothing else changes; a bad id is refused before any write.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from turn_support import db_path, store

from neotoma_agent import (
    EmbeddedStore,
    EntityDeleter,
    EntityDeletion,
    InvalidEntityIdError,
    LookupResult,
    NeotomaMemory,
    NotFoundError,
)
from neotoma_agent._neotoma.forget import check_entity_id
from neotoma_agent._recall.history import read_conversation
from neotoma_agent.testing import RecordingTransport

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio

MARKER = "Zqxv7731 treats her diabetes"


async def _seed(store: Any) -> tuple[NeotomaMemory, str, str]:
    memory = NeotomaMemory(store, conversation_id="clinic")
    maria = await memory.remember("person", name="Maria Gomez", notes=MARKER)
    acme = await memory.remember("company", name="Acme Corp")
    async with memory.turn("Do you know Maria Gomez? She works at Acme Corp.", turn_number=1) as t:
        t.reply = "Yes."
    assert {maria, acme} <= {e.id for e in t.linked}
    return memory, maria, acme


async def _seen(memory: NeotomaMemory, store: Any, maria: str, n: int) -> dict[str, bool]:
    """Whether each reader sees Maria (a new turn each time: retrieval and its context)."""
    async with memory.turn("Do you know Maria Gomez?", turn_number=n) as t:
        t.reply = "..."
        context = t.context()
    history = await memory.history(limit=None)
    conversation = await read_conversation(store, "clinic")
    found = await store.retrieve_entity_by_identifier("Maria Gomez")
    listed = await store.query_entities(entity_type="person")
    return {
        "retrieved": maria in [e.id for e in (*t.retrieved, *t.candidates)],
        "context": MARKER in context,
        "search": bool((await memory.search("Zqxv7731")).hits),
        "lookup": maria in [e.id for e in found.entities],
        "query": maria in [e.entity_id for e in listed.entities],
        "history": any(maria in (*h.user_refers_to, *h.reply_refers_to) for h in history),
        "show": any(
            maria in [r.entity_id for r in m.refers_to]
            for turn in conversation.turns
            for m in turn.messages
        ),
    }


async def test_a_deleted_entity_leaves_every_reader_and_a_restore_brings_it_back(
    store: Any,
) -> None:
    memory, maria, acme = await _seed(store)
    assert set((await _seen(memory, store, maria, 2)).values()) == {True}

    deleted = await memory.forget_entity(maria)

    assert deleted.entity_id == maria
    assert deleted.observation_id
    after = await _seen(memory, store, maria, 3)
    assert not any(after.values()), after
    with pytest.raises(NotFoundError):
        await store.get_entity_snapshot(maria)
    with pytest.raises(NotFoundError):  # deleted already: nothing to delete
        await memory.forget_entity(maria)
    # As on a real server, its edges stay (only the deleted end is skipped by readers):
    # the messages that named it still REFERS_TO it, undeleted.
    edges = (await store.retrieve_related_entities(maria, direction="inbound")).relationships
    assert edges
    assert all(r.relationship_type == "REFERS_TO" for r in edges)
    assert all(r.metadata.get("_deleted") is not True for r in edges)
    # the other entity is untouched
    assert (await store.get_entity_snapshot(acme)).snapshot["name"] == "Acme Corp"

    await memory.restore_entity(maria)

    assert set((await _seen(memory, store, maria, 4)).values()) == {True}
    snapshot = (await store.get_entity_snapshot(maria)).snapshot
    assert (snapshot["name"], snapshot["notes"]) == ("Maria Gomez", MARKER)
    # and it can be deleted again after a restore (the newer of the two decides)
    await memory.forget_entity(maria)
    assert not any((await _seen(memory, store, maria, 5)).values())


async def test_the_transports_speak_the_delete_entity_route(store: Any) -> None:
    """Both transports have the real server's two routes, answering its shape."""
    assert isinstance(store, EntityDeleter)
    _, maria, _ = await _seed(store)
    answer = await store.delete_entity(maria, "person", reason="asked to")
    assert answer.raw["success"] is True
    assert answer.raw["entity_id"] == maria
    observations = (await store.list_observations(maria)).observations
    newest = observations[0]
    assert (newest.source_priority, newest.fields["_deleted"]) == (1000, True)
    assert newest.fields["deletion_reason"] == "asked to"
    with pytest.raises(NotFoundError):
        await store.delete_entity("ent_" + "0" * 24, "person")
    restored = await store.restore_entity(maria, "person")
    assert restored.observation_id
    assert restored.observation_id != answer.observation_id
    assert (await store.get_entity_snapshot(maria)).snapshot["name"] == "Maria Gomez"


BAD_IDS: list[object] = [
    "",
    "ent_",
    "Maria Gomez",
    "ent_" + "A" * 24,  # ids are lowercase hex
    "ent_" + "0" * 23 + "\n",
    "ent_" + "0" * 24 + "\x00",
    "ent_" + "0" * 10_000,
    123,
    None,
    b"ent_000000000000000000000000",
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_a_bad_id_is_a_typed_error_before_any_write(store: Any, bad: object) -> None:
    memory, maria, _ = await _seed(store)
    before = (await store.list_observations(maria)).observations
    for call in (memory.forget_entity, memory.restore_entity):
        with pytest.raises(InvalidEntityIdError) as raised:
            await call(bad)  # type: ignore[arg-type]
        assert isinstance(raised.value, ValueError)
        assert len(str(raised.value)) < 200  # never the id itself
    assert (await store.list_observations(maria)).observations == before


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_an_entity_id_is_ent_and_24_lowercase_hex_digits(text: str) -> None:
    valid = (
        len(text) == 28
        and text.startswith("ent_")
        and all(c in "0123456789abcdef" for c in text[4:])
    )
    if valid:
        assert check_entity_id(text) == text
    else:
        with pytest.raises(InvalidEntityIdError):
            check_entity_id(text)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # aiohttp
async def test_the_web_view_no_longer_shows_it(tmp_path: Path, anyio_backend: str) -> None:
    pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer
    from server_support import TOKEN

    from neotoma_agent.ui import create_ui_app, mount_ui

    async def pages(store: EmbeddedStore) -> str:
        app = web.Application()
        mount_ui(app, create_ui_app(store, token=TOKEN))
        client: TestClient[web.Request, web.Application] = TestClient(
            TestServer(app), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        async with client:
            parts = [
                await (await client.get(path)).text()
                for path in ("/ui/conversation?id=clinic", "/ui/api/conversation?id=clinic")
            ]
        return "\n".join(parts)

    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory, maria, acme = await _seed(store)
        assert maria in await pages(store)
        await memory.forget_entity(maria)
        text = await pages(store)
        assert maria not in text
        assert acme in text
        await memory.restore_entity(maria)
        assert maria in await pages(store)


class _ServerPriorities(RecordingTransport):
    """A real Neotoma server's priorities: its restore (1001) outranks its deletions (1000),
    so after a restore its ``/delete_entity`` no longer hides the entity (seen on 0.22.0)."""

    async def delete_entity(
        self, entity_id: str, entity_type: str, *, reason: str | None = None
    ) -> EntityDeletion:
        inner = self.inner
        assert isinstance(inner, EntityDeleter)
        return await inner.delete_entity(entity_id, entity_type)

    async def restore_entity(
        self, entity_id: str, entity_type: str, *, reason: str | None = None
    ) -> EntityDeletion:
        await self.inner.store(
            [{"entity_type": entity_type, "target_id": entity_id, "_deleted": False}],
            idempotency_key=f"server-restore-{uuid.uuid4().hex}",
            source_priority=1001,
        )
        return EntityDeletion(entity_id, None, raw={})


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_forget_restore_forget_holds_where_a_restore_outranks_deletions(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as embedded:
        store = _ServerPriorities(embedded)
        memory, maria, _ = await _seed(store)
        for _ in range(2):
            await memory.forget_entity(maria)
            with pytest.raises(NotFoundError):
                await store.get_entity_snapshot(maria)
            await memory.restore_entity(maria)
            assert (await store.get_entity_snapshot(maria)).snapshot["name"] == "Maria Gomez"


def test_a_real_servers_answer_for_a_deleted_entity_finds_nothing() -> None:
    """Neotoma 0.22.0's ``/retrieve_entity_by_identifier`` still answers a soft-deleted
    entity, with ``"snapshot": null`` (recorded on a real server after ``/delete_entity``):
    the transports' result leaves it out, so retrieval over HTTP does not bring it back."""
    deleted = {
        "id": "ent_fb9d414d9b1af5630e72d6e6",
        "entity_type": "person",
        "canonical_name": "person:Maria Gomez",
        "aliases": [],
        "merged_to_entity_id": None,
        "snapshot": None,
    }
    live = {**deleted, "id": "ent_18dbab85f498fbd4a1164f53", "snapshot": {"name": "Ana"}}
    found = LookupResult.from_json(
        {"entities": [deleted, live], "total": 2, "match_mode": "direct"}
    )
    assert [e.id for e in found.entities] == [live["id"]]
    assert found.total == 1
    assert LookupResult.from_json({"entities": [deleted], "total": 1}).entities == ()
