"""The conversations page reads the same on every path: the store's summary (embedded store,
dev server through HttpTransport) and the list a store without one gets (a real Neotoma
server's path: every conversation's snapshot, then the page's turns counted).

The JSON must be one thing whatever the backend, where the data allows it (every turn here
has its record, and no conversation has more than the 100 turns the second path counts).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from server_support import TOKEN

from neotoma_agent import ConversationSummaryPage, EmbeddedStore, NeotomaMemory
from neotoma_agent.exceptions import NeotomaError, NotFoundError
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport._forward import Forwarding
from neotoma_agent.transport.http import HttpTransport, RetryPolicy
from neotoma_agent.ui._views import conversations_view

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedStore, HttpTransport]]:
    async with (
        EmbeddedStore.open(tmp_path / "memory.db") as embedded,
        serving(create_app(embedded, token=TOKEN)) as url,
        HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
    ):
        yield embedded, http


async def _pages(transport: Any, *, summaries: bool) -> list[dict[str, Any]]:
    pages, after = [], None
    while True:
        page = await conversations_view(transport, after=after, summaries=summaries)
        pages.append(page)
        after = page["next"]
        if after is None:
            return pages


async def _abandoned_turn(memory: NeotomaMemory) -> None:
    async with memory.turn("and?") as turn:
        turn.reply = "par"
        raise RuntimeError("boom")


async def test_every_path_gives_the_same_pages(
    stores: tuple[EmbeddedStore, HttpTransport],
) -> None:
    embedded, http = stores
    for n in range(28):
        memory = NeotomaMemory(embedded, conversation_id=f"c{n:02d}", platform=f"p{n % 3}")
        for t in range(n % 4 + 1):
            await memory.record_turn(f"q{t}", f"a{t}", turn_id=f"t{t}", retrieve=False)
        if n % 5 == 0:
            with pytest.raises(RuntimeError):
                await _abandoned_turn(memory)
    await NeotomaMemory(embedded, conversation_id="c03").forget()
    reference = await _pages(embedded, summaries=True)
    assert [len(p["conversations"]) for p in reference] == [25, 2]
    assert reference[0]["total"] == 27
    assert all(c["conversation_id"] != "c03" for p in reference for c in p["conversations"])
    assert {c["abandoned"] for p in reference for c in p["conversations"]} == {0, 1}
    for transport, summaries in ((embedded, False), (http, True), (http, False)):
        assert await _pages(transport, summaries=summaries) == reference, (transport, summaries)


class _NoSummaryRoute(Forwarding):
    """A server without ``GET /conversation_summaries``: what HttpTransport raises against
    a real Neotoma 0.22.0 server (checked by hand; CI has none)."""

    async def conversation_summaries(
        self, *, limit: int = 25, after: str | None = None
    ) -> ConversationSummaryPage:
        raise NotFoundError("Cannot GET /conversation_summaries", status=404)


async def test_a_server_without_the_summary_route_gets_the_same_page(
    stores: tuple[EmbeddedStore, HttpTransport],
) -> None:
    embedded, http = stores
    for n in range(3):
        memory = NeotomaMemory(embedded, conversation_id=f"conv-{n}", platform="t")
        await memory.record_turn("q", "a", turn_id="t0", retrieve=False)
    with pytest.raises(NeotomaError):
        await http.conversation_summaries(limit=0)  # the dev server refuses a bad limit
    reference = await _pages(http, summaries=True)
    assert await _pages(_NoSummaryRoute(http), summaries=True) == reference
    assert [c["turns"] for c in reference[0]["conversations"]] == [1, 1, 1]
