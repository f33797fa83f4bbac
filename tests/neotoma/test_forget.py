"""``memory.forget()``: Neotoma's soft deletion of a conversation, on the embedded store and
on the dev server over HTTP, and ``purge_forgotten`` erasing its bytes from the file.

What matters: after a forget no reader sees the conversation (history, ``show``'s reader,
the conversation list, entity queries, the web view), other conversations and the entities
it only referred to are untouched, it is reversible (and repeatable), and a purge leaves
none of the conversation's text anywhere in the store's files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from server_support import TOKEN
from turn_support import db_path, store

from neotoma_agent import EmbeddedStore, Forgotten, NeotomaMemory, purge_forgotten
from neotoma_agent._recall.history import read_conversation
from neotoma_agent.reads import list_conversations

__all__ = ["db_path", "store"]  # fixtures

# Store semantics; the web view test runs the dev server (asyncio).
pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

SECRET = "my passport number is X-SECRET-4471"


async def _seed(store: Any) -> tuple[NeotomaMemory, NeotomaMemory, str]:
    memory = NeotomaMemory(store, conversation_id="forget-me")
    acme = await memory.remember("company", name="Acme Corp")
    async with memory.turn(f"Acme Corp: {SECRET}", turn_number=1) as t:
        async with t.tool("lookup", {"q": "Acme"}) as call:
            call.result = {"found": SECRET}
        t.reply = "Noted, Acme Corp."

    async def failing() -> None:
        async with memory.turn("and then?", turn_number=2) as t:
            t.reply = "partial"
            raise RuntimeError("cut")

    with pytest.raises(RuntimeError):
        await failing()
    other = NeotomaMemory(store, conversation_id="keep-me")
    async with other.turn("Acme Corp again", turn_number=1) as t:
        t.reply = "kept"
    return memory, other, acme


async def test_forget_hides_the_conversation_from_every_reader(store: Any) -> None:
    memory, other, acme = await _seed(store)
    assert len(await memory.history()) == 2

    forgotten = await memory.forget()

    types = sorted({t for _, t in forgotten.entities})
    assert types == ["conversation", "conversation_message", "conversation_turn", "tool_invocation"]
    assert acme not in forgotten.entity_ids  # referred to, not owned: it stays
    assert await memory.history() == ()
    assert (await read_conversation(store, "forget-me")).snapshot is None
    listed = await list_conversations(store)
    assert [c.conversation_id for c in listed.conversations] == ["keep-me"]
    for entity_type in ("conversation_message", "conversation_turn", "tool_invocation"):
        found = await store.query_entities(entity_type=entity_type)
        assert all(e.entity_id not in forgotten.entity_ids for e in found.entities)
        assert found.total == len(found.entities)
    assert (await store.get_entity_snapshot(acme)).snapshot["name"] == "Acme Corp"
    assert [h.reply for h in await other.history()] == ["kept"]
    # Every edge that touched the conversation is deleted too, as /delete_relationship does.
    edges = await store.retrieve_related_entities(acme)
    owned = set(forgotten.entity_ids)
    for r in edges.relationships:
        if r.source_entity_id in owned or r.target_entity_id in owned:
            assert r.metadata.get("_deleted") is True


async def test_forget_is_reversible_and_repeatable(store: Any) -> None:
    memory, _, _ = await _seed(store)
    before = await memory.history()

    forgotten = await memory.forget()
    kept = Forgotten.from_json(json.loads(json.dumps(forgotten.to_json())))
    assert kept == forgotten
    await memory.restore(kept)
    assert await memory.history() == before

    again = await memory.forget()
    assert set(again.entity_ids) == set(forgotten.entity_ids)
    assert await memory.history() == ()
    assert (await memory.forget()).entities == ()  # already forgotten: nothing to do


async def test_the_web_view_no_longer_lists_or_shows_it(store: Any) -> None:
    pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from neotoma_agent.ui import create_ui_app, mount_ui

    memory, _, _ = await _seed(store)
    await memory.forget()
    app = web.Application()
    mount_ui(app, create_ui_app(store, token=TOKEN))
    client: TestClient[web.Request, web.Application] = TestClient(
        TestServer(app), headers={"Authorization": f"Bearer {TOKEN}"}
    )
    async with client:
        listed = await (await client.get("/ui/api/conversations")).json()
        page = await client.get("/ui/conversation?id=forget-me")
        text = await page.text()
    assert [c["conversation_id"] for c in listed["conversations"]] == ["keep-me"]
    assert page.status == 404
    assert SECRET not in text


async def _files_hold(path: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in path.parent.glob(path.name + "*"))


async def test_purge_erases_every_byte_of_the_conversation(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        memory, other, acme = await _seed(store)
        forgotten = await memory.forget()
    assert await _files_hold(path, SECRET.encode())  # a soft deletion keeps the bytes

    stats = purge_forgotten(path, forgotten)

    assert stats.entities == len(forgotten.entities)
    assert stats.observations > stats.entities
    assert not await _files_hold(path, SECRET.encode())
    assert not await _files_hold(path, b"forget-me")
    async with EmbeddedStore.open(path) as store:
        other = NeotomaMemory(store, conversation_id="keep-me")
        assert [h.reply for h in await other.history()] == ["kept"]
        assert (await store.get_entity_snapshot(acme)).snapshot["name"] == "Acme Corp"
        # the store still works, and a turn can be written to the forgotten id afresh
        again = NeotomaMemory(store, conversation_id="forget-me")
        async with again.turn("hello", turn_number=1) as t:
            t.reply = "new start"
        assert [h.reply for h in await again.history()] == ["new start"]


async def test_retrieval_no_longer_sees_it(store: Any) -> None:
    memory, _, acme = await _seed(store)
    # Before: a turn that names nothing still finds what the conversation's last turns
    # referred to (recency, from the history the enter reads).
    async with memory.turn("and what about that?", turn_number=3) as t:
        t.reply = "..."
    assert acme in [e.id for e in (*t.retrieved, *t.candidates)]

    forgotten = await memory.forget()

    async with memory.turn("and what about that?", turn_number=1) as t:
        t.reply = "..."
        assert t.history == ()
    seen = [e.id for e in (*t.retrieved, *t.candidates)]
    assert acme not in seen
    assert not set(seen) & set(forgotten.entity_ids)
    # Named outright, the entity it only referred to is still found (it was not forgotten),
    # and nothing of the forgotten conversation comes with it.
    async with memory.turn("What do we know about Acme Corp?", turn_number=2) as t:
        t.reply = "..."
    assert t.retrieved_ids[:1] == (acme,)
    assert not set(t.retrieved_ids) & set(forgotten.entity_ids)
