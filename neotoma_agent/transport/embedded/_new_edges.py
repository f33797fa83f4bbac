"""A store's edges: the route of each, and a new message's PART_OF edge written with no read.

Most stores that carry a message (every turn's) create it and place it in its
conversation with a PART_OF edge. A message the store creates has no edge yet but those the
same store writes, so its first such edge is known to be new before anything is read: it is
written as the conversation index's row alone (``_edges.index_message``), and when the
store writes the conversation too, the conversation's message count moves in that row's own
write (``Counted``), not in an UPDATE of its own. Every other edge goes through
``_edges.relate``, as it is. The rows written are the same either way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

from ._edges import index_message, relate
from ._part_of import DERIVED
from ._validate import Edge

__all__ = ["Counted", "edge_routes", "fast_pairs", "write_edges"]


#: an edge's way in a store: a new message's PART_OF edge to a conversation, indexed with
#: no read first (``_FAST``), or ``relate`` (``_RELATE``)
_FAST: Final = "fast"
_RELATE: Final = "relate"


class Counted:
    """The messages a store's fast edges add to each conversation it writes (``by_id``),
    added to the conversation's row by its own write (``applied``) rather than by an
    UPDATE of their own."""

    __slots__ = ("applied", "by_id")

    def __init__(self) -> None:
        self.by_id: dict[str, int] = {}
        self.applied: set[str] = set()

    def take(self, entity_id: str) -> int:
        """The messages to add to ``entity_id``'s row as it is written now (once)."""
        n = self.by_id.pop(entity_id, 0)
        if n:
            self.applied.add(entity_id)
        return n


def edge_routes(
    relationships: Sequence[Edge],
    ids_by_index: Mapping[int, str],
    types_by_id: Mapping[str, str],
    fresh: AbstractSet[str],
    mine: AbstractSet[str],
) -> tuple[list[str], Counted]:
    """Each edge's route, and the messages the fast ones add to each conversation.

    A message this store creates has no edge but those this store writes, so its first
    PART_OF edge (no metadata) to a conversation is new: it is indexed (``_edges``'s
    ``index_message``) with no read for it first. An edge between the same two ends as an
    earlier one of the store goes through ``relate`` as it is. A conversation this store
    writes (resolved by identity: this user's, of type ``conversation``) counts its fast
    edges' messages in its own row's write (``mine``: those conversations' ids); any other
    is counted by an UPDATE, as ``relate`` counts.
    """
    counted = Counted()
    routes: list[str] = []
    if not relationships:
        return routes, counted
    seen: set[tuple[str, str]] = set()
    for rtype, src_end, dst_end, metadata in relationships:
        src = ids_by_index[src_end] if isinstance(src_end, int) else src_end
        dst = ids_by_index[dst_end] if isinstance(dst_end, int) else dst_end
        pair = (src, dst)
        if (
            rtype == DERIVED
            and not metadata
            and pair not in seen
            and src in fresh
            and types_by_id.get(src) == "conversation_message"
            and types_by_id.get(dst, "conversation") == "conversation"
        ):
            routes.append(_FAST)
            if dst in mine:
                counted.by_id[dst] = counted.by_id.get(dst, 0) + 1
        else:
            routes.append(_RELATE)
        seen.add(pair)
    return routes, counted


def fast_pairs(
    relationships: Sequence[Edge], routes: Sequence[str], ids_by_index: Mapping[int, str]
) -> list[tuple[str, str]]:
    """The (message, conversation) ends of the edges :func:`edge_routes` routed as a new
    message's first PART_OF edge to a conversation."""
    out: list[tuple[str, str]] = []
    for (_, src_end, dst_end, _), route in zip(relationships, routes, strict=True):
        if route is _FAST:
            src = ids_by_index[src_end] if isinstance(src_end, int) else src_end
            dst = ids_by_index[dst_end] if isinstance(dst_end, int) else dst_end
            out.append((src, dst))
    return out


def write_edges(
    conn: sqlite3.Connection,
    relationships: Sequence[Edge],
    routes: Sequence[str],
    counted: Counted,
    ids_by_index: Mapping[int, str],
    types_by_id: Mapping[str, str],
    fresh: AbstractSet[str],
    source_id: str,
    now: str,
    counts: dict[str, int],
    rows: Mapping[str, tuple[int, Any]] | None = None,
    restated: AbstractSet[tuple[str, str]] = frozenset(),
) -> list[dict[str, Any]]:
    """Write a store's ``relationships`` by their ``routes`` (:func:`edge_routes`), once its
    entities are written; the edges created, as the answer lists them. ``counts`` collects
    each conversation's new messages; ``rows``: the rowids (first) of the entity rows the
    store loaded or created, by id (a fast edge's index row holds them); ``restated``: the
    (message, conversation) pairs whose index row says the store's restatement of the
    conversation is derived from the message (``_derived_restatement``)."""
    created: list[dict[str, Any]] = []
    for (rtype, src_end, dst_end, metadata), route in zip(relationships, routes, strict=True):
        src = ids_by_index[src_end] if isinstance(src_end, int) else src_end
        dst = ids_by_index[dst_end] if isinstance(dst_end, int) else dst_end
        if route is not _FAST or not index_message(
            conn, src, dst, counts, dst in counted.applied, rows, (src, dst) in restated
        ):
            # A fast edge whose conversation was not counted (not this user's conversation)
            # goes on as ``relate``'s own would after its index step: with no fresh ends.
            ends = fresh if route is _RELATE else frozenset()
            relate(conn, rtype, src, dst, metadata, source_id, now, types_by_id, counts, ends)
        created.append(
            {"relationship_type": rtype, "source_entity_id": src, "target_entity_id": dst}
        )
    return created
