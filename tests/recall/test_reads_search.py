"""``neotoma_agent.reads.search``: a tool holding a transport and no memory searches what was
said, with the same answers as ``NeotomaMemory.search``, on the embedded store and over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from turn_support import db_path, memory, store

from neotoma_agent import EmptySearchQueryError, SearchHitKind
from neotoma_agent.reads import search

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio


async def test_it_finds_what_was_said_as_memory_search_does(store: Any) -> None:
    deal = memory(store, "deal-room")
    async with deal.turn("Has Maria confirmed the Halcyon deal?", turn_id="t1") as t:
        t.reply = "Not yet: she wants the certificates rotated first."
    ops = memory(store, "ops-room")
    async with ops.turn("Who rotates certificates here?", turn_id="t1") as t:
        t.reply = "The platform team."

    everywhere = await search(store, "certificates")
    assert everywhere == await deal.search("certificates")
    assert {(h.conversation_id, h.role) for h in everywhere.hits} == {
        ("deal-room", "assistant"),
        ("ops-room", "user"),
    }
    [hit] = (await search(store, "certificates", conversation_id="ops-room")).hits
    assert hit.kind is SearchHitKind.MESSAGE
    assert (hit.conversation_id, hit.turn_id, hit.text) == (
        "ops-room",
        "t1",
        "Who rotates certificates here?",
    )
    assert len((await search(store, "certificates", limit=1)).hits) == 1


async def test_bad_queries_are_typed_errors_before_any_io(store: Any) -> None:
    with pytest.raises(EmptySearchQueryError):
        await search(store, "   ")
    with pytest.raises(ValueError, match="limit"):
        await search(store, "acme", limit=0)
    with pytest.raises(TypeError, match="conversation_id"):
        await search(store, "acme", conversation_id=7)  # type: ignore[arg-type]
