"""A history page as the typed answer a turn reads, made from its rows: no parse between.

A turn's enter reads its history on the store's thread (``_turn_write``) and hands the
event loop a :class:`RecentConversation`. Parsing the page's answer (``from_json``: a
dozen lookups and type checks for each message) is work the page had already done: its
rows were decoded once per stored state into the message's values (``_page_rows``,
memoised), so each :class:`ConversationMessage` is made from those values directly. The
page's answer is still its ``raw``, and each message's ``raw`` its item in it, as parsing
them gives: the same answer, field for field (``tests/transport/embedded/
test_typed_page.py`` compares both on any page). Only the paging read a turn makes goes
this way (a ``limit`` in range, a ``before`` that is a text or ``None``); any other body
is the route's, parsed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from .._results import ConversationMessage, EntitySnapshot, RecentConversation, RelatedEntity
from ._conversations import MAX_PAGE, recent_conversation
from ._history_page import history_page

__all__ = ["typed_page"]


def typed_page(conn: sqlite3.Connection, body: Mapping[str, Any]) -> RecentConversation:
    """``RecentConversation.from_json(recent_conversation(conn, body))``, for the same
    ``body`` and answer, made without parsing the page's messages back."""
    limit, before = body.get("limit"), body.get("before")
    if (
        type(limit) is not int
        or not 1 <= limit <= MAX_PAGE
        or not (before is None or isinstance(before, str))
    ):
        # Not the paging read (no limit, or one the route refuses): the route's answer.
        return RecentConversation.from_json(recent_conversation(conn, body))
    values: list[tuple[Any, ...]] = []
    raw = history_page(conn, body, values)
    items = raw["messages"]
    messages = []
    for item, (mid, role, content, turn_key, at, number) in zip(items, values, strict=True):
        related = item["related_entities"]
        messages.append(
            ConversationMessage(
                mid,
                role,
                content,
                turn_key,
                at,
                tuple([RelatedEntity.from_json(r) for r in related]) if related else (),
                number,
                item,
            )
        )
    return RecentConversation._of(
        raw, tuple(messages), tuple([_record(r) for r in raw["turn_records"]])
    )


def _record(raw: dict[str, Any]) -> EntitySnapshot:
    """``EntitySnapshot.from_json(raw)`` of a page's turn record (``_rows.snapshot_record``'s
    keys), its values read as they are when they are of the types it gives them."""
    eid, etype, count = raw["entity_id"], raw["entity_type"], raw["observation_count"]
    snapshot, provenance = raw["snapshot"], raw["provenance"]
    if not (
        type(eid) is str
        and eid
        and type(etype) is str
        and type(count) is int
        and type(snapshot) is dict
        and type(provenance) is dict
    ):
        return EntitySnapshot.from_json(raw)
    name, observed = raw["canonical_name"], raw["last_observation_at"]
    return EntitySnapshot(
        eid,
        etype,
        name if type(name) is str else None,
        snapshot,
        count,
        observed if type(observed) is str else None,
        provenance,
        raw,
    )
