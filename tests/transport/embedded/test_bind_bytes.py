"""A store binds ``bytes`` parameters through an adapter of ``bytes`` to itself (``sqlite3``
otherwise fails a lookup for each one): the same blob is stored, and an adapter the
application registered for ``bytes`` stays its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.transport.embedded._rows import encode_entity

pytestmark = pytest.mark.anyio

_KEY = (bytes, sqlite3.PrepareProtocol)


async def test_a_store_binds_bytes_as_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sqlite3.adapters, _KEY, raising=False)
    async with EmbeddedStore.open(tmp_path / "store.db") as store:
        async with NeotomaMemory(store, conversation_id="c1").turn("hello") as t:
            t.reply = "hi"
        conversation = (await store.query_entities(entity_type="conversation")).entities[0]
    assert sqlite3.adapters[_KEY] is bytes
    with sqlite3.connect(tmp_path / "store.db") as conn:
        row = conn.execute(
            "SELECT typeof(id), id FROM entities WHERE id = ?",
            (encode_entity(conversation.entity_id),),
        ).fetchone()
    assert row == ("blob", encode_entity(conversation.entity_id))


async def test_an_applications_own_bytes_adapter_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def theirs(value: bytes) -> bytes:
        return value

    monkeypatch.setitem(sqlite3.adapters, _KEY, theirs)
    async with EmbeddedStore.open(tmp_path / "store.db") as store:
        await store.store([{"entity_type": "company", "name": "Acme"}], idempotency_key="k")
    assert sqlite3.adapters[_KEY] is theirs
