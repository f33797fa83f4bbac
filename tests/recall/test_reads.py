"""Paged reads (neotoma_agent._recall.paged) and the readers on them: a server's offset cap degrades
every listing to an explicit ``partial`` instead of failing it."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

from neotoma_agent._recall.paged import gather_bounded, scan_entities, snapshot_or_none
from neotoma_agent.cli._show import _render_list
from neotoma_agent.exceptions import ConnectionLost, ValidationError
from neotoma_agent.reads import collect_stats, list_conversations
from neotoma_agent.transport._base import EntityQueryResult, Transport
from neotoma_agent.transport._wire import error_from_response, flat_envelope
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = pytest.mark.anyio

#: a Neotoma server's deepest query offset (``/entities/query``: ``offset <= 2000``)
SERVER_OFFSET_CAP = 2000
#: the most entities a server returns per page with snapshots included
SERVER_PAGE_LIMIT = 500


def _conversation(n: int) -> dict[str, Any]:
    return {
        "entity_id": f"ent_{n:024x}",
        "entity_type": "conversation",
        "canonical_name": f"conversation:c{n}",
        "snapshot": {"conversation_id": f"c{n}", "title": f"chat {n}"},
        "observation_count": 1,
        "last_observation_at": f"2026-01-01T00:00:{n % 60:02d}Z",
        "provenance": {},
    }


class ManyConversations:
    """A server holding ``count`` conversations, paging like a Neotoma server by offset.

    Offsets past 2,000 are refused as the server's request validation refuses them (400
    ``VALIDATION_INVALID_FORMAT``); with ``cursors=True`` it offers keyset paging instead.
    Only ``query_entities`` is implemented: it is all a listing reads.
    """

    def __init__(self, count: int, *, cursors: bool = False) -> None:
        self.rows = [_conversation(n) for n in range(count)]
        self.cursors = cursors
        self.offsets: list[int] = []

    async def query_entities(
        self,
        *,
        entity_type: str | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> EntityQueryResult:
        await anyio.lowlevel.checkpoint()
        if offset > SERVER_OFFSET_CAP:
            raise error_from_response(
                400,
                flat_envelope(
                    "VALIDATION_INVALID_FORMAT",
                    "Invalid request",
                    {"issues": [{"path": ["offset"], "message": "must be <= 2000"}]},
                ),
            )
        self.offsets.append(offset)
        start = int(cursor) if cursor is not None else offset
        rows = [r for r in self.rows if entity_type in (None, r["entity_type"])]
        page = rows[start : start + min(limit, SERVER_PAGE_LIMIT)]
        raw: dict[str, Any] = {"entities": page, "total": len(rows), "limit": limit}
        raw["offset"] = offset
        if self.cursors:
            end = start + len(page)
            raw["next_cursor"] = str(end) if end < len(rows) else None
        return EntityQueryResult.from_json(raw)


def _server(count: int, *, cursors: bool = False) -> tuple[ManyConversations, Transport]:
    server = ManyConversations(count, cursors=cursors)
    return server, cast(Transport, server)


async def test_a_scan_past_the_server_offset_cap_is_partial_not_an_error() -> None:
    server, transport = _server(2_600)
    scan = await scan_entities(transport, entity_type="conversation", concurrency=4)
    assert scan.partial
    assert scan.refused_offset == 2_500
    assert len(scan.entities) == 2_500  # every page up to offset 2,000, none lost
    assert scan.total == 2_600
    assert max(server.offsets) == SERVER_OFFSET_CAP


async def test_a_scan_within_the_cap_is_complete_and_in_order() -> None:
    _, transport = _server(1_800)
    scan = await scan_entities(transport, entity_type="conversation", concurrency=4)
    assert not scan.partial
    assert [e.entity_id for e in scan.entities] == [f"ent_{n:024x}" for n in range(1_800)]


async def test_a_scan_goes_by_cursor_when_the_server_offers_one_and_has_no_cap() -> None:
    server, transport = _server(2_600, cursors=True)
    scan = await scan_entities(transport, entity_type="conversation")
    assert not scan.partial
    assert len(scan.entities) == 2_600
    assert set(server.offsets) == {0}  # only the first page went by offset


async def test_a_refused_first_page_is_raised() -> None:
    class Refuses:
        async def query_entities(self, **kwargs: Any) -> EntityQueryResult:
            raise ValidationError("bad query", status=400)

    with pytest.raises(ValidationError):
        await scan_entities(cast(Transport, Refuses()))


async def test_show_lists_the_conversations_it_could_read_and_says_it_is_partial() -> None:
    _, transport = _server(2_600)
    listing = await list_conversations(transport)
    assert listing.partial
    assert (len(listing.conversations), listing.total) == (2_500, 2_600)
    out = io.StringIO()
    _render_list(listing, out, "http://server")
    text = out.getvalue()
    assert text.startswith("2500 conversation(s) in http://server, most recent first:\n")
    assert text.endswith(
        "(partial: the server caps offsets below 2,500; 2,500 of 2,600 conversations listed)\n"
    )


async def test_show_lists_every_conversation_within_the_cap_without_a_note() -> None:
    _, transport = _server(30)
    listing = await list_conversations(transport)
    assert not listing.partial
    assert listing.note() == ""
    assert len(listing.conversations) == 30


async def test_stats_past_the_cap_count_what_was_read_and_are_partial() -> None:
    _, transport = _server(2_600)
    stats = await collect_stats(transport)
    assert stats.partial
    assert stats.entities == 2_600  # the server's total
    assert stats.conversations == 2_500  # what was counted


async def test_gather_bounded_keeps_order_and_the_limit() -> None:
    running = peak = 0

    async def call(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.001 * (n % 3))
        running -= 1
        return n

    calls = [lambda n=n: call(n) for n in range(20)]
    assert await gather_bounded(calls, limit=3) == list(range(20))
    assert peak == 3


async def test_gather_bounded_raises_the_first_failure_bare() -> None:
    async def fails() -> None:
        raise ConnectionLost("down")

    with pytest.raises(ConnectionLost):
        await gather_bounded([fails, fails], limit=2)


async def test_snapshot_or_none_is_none_for_a_missing_entity(tmp_path: Any) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        assert await snapshot_or_none(store, "ent_" + "0" * 24) is None


def test_the_fake_server_refuses_like_the_real_one() -> None:
    error = error_from_response(400, flat_envelope("VALIDATION_INVALID_FORMAT", "Invalid"))
    assert isinstance(error, ValidationError)
    assert cast(Mapping[str, Any], error.body)["error_code"] == "VALIDATION_INVALID_FORMAT"
