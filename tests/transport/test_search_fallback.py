"""Search where the store keeps no index: a real Neotoma server, reached over HTTP.

A real server answers ``POST /text_search`` 404; :class:`HttpTransport` then searches
through the server's own reads. CI has no real server, so two stand-ins play its part:
the dev server with the route refused as a real server refuses it (404, through the
middleware hook tests inject faults with), and, for ``/entities/query`` with ``search``, a
wrapper answering as a 0.22.0 server's lexical search does (a substring match of every word
against the canonical name and the snapshot's JSON, both lowercased with ``-`` / ``_`` as
spaces and every other non-ASCII-word character removed; ``real-server.md`` has the
commands that ran the same checks against a real one).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from server_support import TOKEN

from neotoma_agent import (
    EmbeddedStore,
    EntityQueryResult,
    HttpTransport,
    NeotomaMemory,
    RetryPolicy,
    SearchHitKind,
)
from neotoma_agent.server import create_app, serving
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport import _search_fallback
from neotoma_agent.transport._forward import Forwarding
from neotoma_agent.transport._search_fallback import search_without_index, server_search

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # aiohttp


@web.middleware
async def _no_search_route(request: web.Request, handler: Any) -> web.StreamResponse:
    if request.path == "/text_search":  # as a real server: no such route
        return web.Response(status=404, text="Cannot POST /text_search")
    response: web.StreamResponse = await handler(request)
    return response


async def _said(store: Any) -> None:
    deal = NeotomaMemory(store, conversation_id="deal-room")
    async with deal.turn("Has María de la Cruz confirmed the certificates?", turn_id="t1") as t:
        t.reply = "Maria says the certification is done; certificates next week."
    async with deal.turn("Any update on OPS-412?", turn_id="t2") as t:
        t.reply = "OPS-412 is blocked on the certificates."
    ops = NeotomaMemory(store, conversation_id="ops-room")
    async with ops.turn("Who rotates certificates here?", turn_id="t1") as t:
        t.reply = "The platform team."
    await deal.remember("company", name="Halcyon Bio Inc", website="halcyonbio.com")


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        await _said(store)
        yield store


@pytest.fixture
async def real_like(embedded: EmbeddedStore) -> AsyncIterator[HttpTransport]:
    """HttpTransport to a server without the route (a real server, as far as search goes)."""
    app = create_app(embedded, token=TOKEN, middlewares=[_no_search_route])
    async with (
        serving(app) as url,
        HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
    ):
        yield http


async def test_one_conversation_is_read_whole_and_ranked_as_the_index_ranks(
    embedded: EmbeddedStore, real_like: HttpTransport
) -> None:
    for query in ("certificates", "ops-412", '"de la cruz"', "maria"):
        indexed = await embedded.search(query, conversation_id="deal-room")
        fallback = await real_like.search(query, conversation_id="deal-room")
        assert fallback.partial is False
        assert [h.text for h in fallback.hits] == [h.text for h in indexed.hits], query
        assert [(h.turn_id, h.role) for h in fallback.hits] == [
            (h.turn_id, h.role) for h in indexed.hits
        ]
    assert (await real_like.search("certificates", conversation_id="nowhere")).hits == ()


_DROP = re.compile(r"[^\w\s]", re.ASCII)


def _normalize(text: str) -> str:
    """A 0.22.0 server's ``normalizeSearchText`` (JavaScript's ``\\w`` is ASCII only)."""
    text = re.sub(r"[-_]", " ", text.lower())
    return re.sub(r"\s+", " ", _DROP.sub("", text)).strip()


class _ServerSearch(Forwarding):
    """``query_entities(search=...)`` as a real server answers it (see the docstring)."""

    async def query_entities(
        self,
        *,
        entity_type: str | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> EntityQueryResult:
        if search is None:
            return await self.inner.query_entities(
                entity_type=entity_type, limit=limit, offset=offset, cursor=cursor
            )
        tokens = _normalize(search).split()
        found = []
        page = await self.inner.query_entities(entity_type=entity_type, limit=500)
        for entity in page.entities:
            haystack = _normalize(
                f"{entity.canonical_name} {json.dumps(entity.snapshot, ensure_ascii=False)}"
            )
            if all(t in haystack for t in tokens):
                found.append(entity.raw)
        return EntityQueryResult.from_json(
            {"entities": found[offset : offset + limit], "total": len(found)}
        )


async def test_every_conversation_through_the_server_search_keeps_whole_words(
    embedded: EmbeddedStore,
) -> None:
    server = _ServerSearch(embedded)

    result = await search_without_index(server, "certificates", limit=10, conversation_id=None)

    indexed = await embedded.search("certificates")
    assert [h.text for h in result.hits] == [h.text for h in indexed.hits]
    assert {h.conversation_id for h in result.hits} == {"deal-room", "ops-room"}
    # The server's substring match sends every text holding "cert": whole words keep none.
    assert (await search_without_index(server, "cert", limit=10, conversation_id=None)).hits == ()
    [one] = (
        await search_without_index(server, "certification", limit=10, conversation_id=None)
    ).hits
    assert one.text.startswith("Maria says")
    entity = await search_without_index(server, "halcyonbio", limit=10, conversation_id=None)
    assert [(h.kind, h.text) for h in entity.hits] == [
        (SearchHitKind.ENTITY, "Halcyon Bio Inc\nhalcyonbio.com")
    ]
    assert (await search_without_index(server, "ops-41", limit=10, conversation_id=None)).hits == ()


async def test_accents_as_far_as_the_server_keeps_them(embedded: EmbeddedStore) -> None:
    server = _ServerSearch(embedded)

    accented = await search_without_index(server, "María", limit=10, conversation_id=None)
    plain = await search_without_index(server, "Maria", limit=10, conversation_id=None)

    assert server_search([("María",)]) == "mar a"  # the ASCII pieces the server can find
    assert len(accented.hits) == 2  # "María" and "Maria" alike
    assert [h.text for h in plain.hits] == [  # the server dropped the í of a stored María
        "Maria says the certification is done; certificates next week."
    ]


async def test_a_search_that_reaches_the_servers_cap_says_it_is_partial(
    embedded: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_search_fallback, "MAX_CANDIDATES", 2)
    monkeypatch.setattr(_search_fallback, "_PAGE", 1)

    result = await search_without_index(
        _ServerSearch(embedded), "certificates", limit=10, conversation_id=None
    )

    assert result.partial is True
    assert len(result.hits) <= 2


async def test_memory_search_uses_the_index_through_a_wrapper(embedded: EmbeddedStore) -> None:
    recorder = RecordingTransport(embedded)

    result = await NeotomaMemory(recorder, conversation_id="x").search("certificates")

    assert [c.method for c in recorder.calls] == ["search"]
    assert len(result.hits) == 4
