"""The Transport methods as Neotoma REST requests, shared by both transports.

Each method builds the JSON body of its REST action and parses the answer into its typed
result. A transport only says how one request is carried out (``request``): the embedded
store runs it on SQLite, the HTTP transport POSTs it. So both send and parse exactly the
same bodies, and a difference between them can only be in the store.
"""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from .._recall.search_text import check_search
from ._base import (
    AsyncClosing,
    ConversationPage,
    ConversationSummaryPage,
    CorrectionResult,
    CreateRelationshipsResult,
    Direction,
    EntityDeletion,
    EntityQueryResult,
    EntitySnapshot,
    LookupResult,
    ObservationList,
    RecentConversation,
    RelatedEntities,
    RelationshipSnapshot,
    StoreResult,
)
from ._bodies import ConversationWindow, StoreOptions, present, store_body, window_query
from ._search_results import SEARCH_ACTION, SearchResult

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = ["RestActions", "present", "store_arguments", "store_body"]


def store_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``Transport.store`` that :func:`store_body` made ``body`` of
    (``entities`` among them): how a kept body is sent again through any transport."""
    return {
        "entities": list(body["entities"]),
        "idempotency_key": str(body["idempotency_key"]),
        "relationships": list(body.get("relationships") or ()),
        "source_priority": body.get("source_priority"),
        "observation_source": body.get("observation_source"),
        "strict": bool(body.get("strict", False)),
    }


class RestActions(AsyncClosing):
    """Implements the Transport protocol on top of ``request(action, body)``."""

    __slots__ = ()

    async def request(self, action: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run REST ``action`` (``"store"``, ``"entities/query"``, …); the decoded answer."""
        raise NotImplementedError

    async def get_route(self, path: str, query: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run the read-only route ``GET {path}?{query}``; the decoded answer."""
        raise NotImplementedError

    async def store(
        self, entities: Sequence[Mapping[str, Any]], **options: Unpack[StoreOptions]
    ) -> StoreResult:
        """``POST /store``; entries come back aligned to ``entities``, fresh or replayed.

        ``lane`` and ``deferrable`` are hints for a queueing wrapper: a store ignores them.
        """
        body = store_body(entities, **options)
        raw = await self.request("store", body)
        return StoreResult.from_json(raw, request_entities=body["entities"])

    async def retrieve_entity_by_identifier(
        self,
        identifier: str,
        *,
        entity_type: str | None = None,
        by: str | None = None,
        limit: int | None = None,
    ) -> LookupResult:
        """``POST /retrieve_entity_by_identifier``: by id, name substring or identity field."""
        body = present(identifier=identifier, entity_type=entity_type, by=by, limit=limit)
        return LookupResult.from_json(await self.request("retrieve_entity_by_identifier", body))

    async def create_relationship(
        self,
        relationship_type: str,
        source_entity_id: str,
        target_entity_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> RelationshipSnapshot:
        """``POST /create_relationship``: create (or re-observe) one edge."""
        body = present(
            relationship_type=relationship_type,
            source_entity_id=source_entity_id,
            target_entity_id=target_entity_id,
            metadata=None if metadata is None else dict(metadata),
        )
        return RelationshipSnapshot.from_json(await self.request("create_relationship", body))

    async def create_relationships(
        self, relationships: Sequence[Mapping[str, Any]]
    ) -> CreateRelationshipsResult:
        """``POST /create_relationships``: several edges given by entity id."""
        body = {"relationships": [dict(r) for r in relationships]}
        return CreateRelationshipsResult.from_json(await self.request("create_relationships", body))

    async def get_entity_snapshot(self, entity_id: str) -> EntitySnapshot:
        """``POST /get_entity_snapshot``; :class:`NotFoundError` for an unknown id."""
        return EntitySnapshot.from_json(
            await self.request("get_entity_snapshot", {"entity_id": entity_id})
        )

    async def list_observations(
        self, entity_id: str, *, limit: int = 100, offset: int = 0
    ) -> ObservationList:
        """``POST /list_observations``: newest first."""
        body = {"entity_id": entity_id, "limit": limit, "offset": offset}
        return ObservationList.from_json(await self.request("list_observations", body))

    async def retrieve_related_entities(
        self,
        entity_id: str,
        *,
        relationship_types: Sequence[str] | None = None,
        direction: Direction = "both",
        max_hops: int = 1,
    ) -> RelatedEntities:
        """``POST /retrieve_related_entities``: edges around an entity and their far ends."""
        body = present(
            entity_id=entity_id,
            direction=direction,
            max_hops=max_hops,
            relationship_types=None if relationship_types is None else list(relationship_types),
        )
        return RelatedEntities.from_json(await self.request("retrieve_related_entities", body))

    async def query_entities(
        self,
        *,
        entity_type: str | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> EntityQueryResult:
        """``POST /entities/query``: page through entities by type and/or search string.

        Pass the previous page's ``next_cursor`` as ``cursor`` to read on from it: unlike a
        growing ``offset`` it costs the same on every page (a server caps offsets at 2,000).
        """
        body = present(
            limit=limit, offset=offset, cursor=cursor, entity_type=entity_type, search=search
        )
        return EntityQueryResult.from_json(await self.request("entities/query", body))

    async def correct(
        self,
        entity_id: str,
        entity_type: str,
        field: str,
        value: Any,
        *,
        idempotency_key: str,
    ) -> CorrectionResult:
        """``POST /correct``: a priority-1000 correction of one field."""
        body = {
            "entity_id": entity_id,
            "entity_type": entity_type,
            "field": field,
            "value": value,
            "idempotency_key": idempotency_key,
        }
        return CorrectionResult.from_json(await self.request("correct", body))

    async def delete_entity(
        self, entity_id: str, entity_type: str, *, reason: str | None = None
    ) -> EntityDeletion:
        """``POST /delete_entity``: soft-delete one entity (see ``EntityDeleter``)."""
        body = present(entity_id=entity_id, entity_type=entity_type, reason=reason)
        return EntityDeletion.from_json(await self.request("delete_entity", body))

    async def restore_entity(
        self, entity_id: str, entity_type: str, *, reason: str | None = None
    ) -> EntityDeletion:
        """``POST /restore_entity``: undo ``delete_entity``."""
        body = present(entity_id=entity_id, entity_type=entity_type, reason=reason)
        return EntityDeletion.from_json(await self.request("restore_entity", body))

    async def recent_conversation(
        self, conversation_entity_id: str, **window: Unpack[ConversationWindow]
    ) -> RecentConversation:
        """``GET /recent_conversations/{entity_id}``; ``limit`` / ``before``: the extension
        that the embedded store and the dev server honour (see ``ConversationReader``)."""
        path = "/recent_conversations/" + urllib.parse.quote(conversation_entity_id, safe="")
        return RecentConversation.from_json(await self.get_route(path, window_query(**window)))

    async def recent_conversations(
        self,
        *,
        limit: int = 25,
        offset: int = 0,
        activity_after: str | None = None,
        activity_before: str | None = None,
    ) -> ConversationPage:
        """``GET /recent_conversations``: conversations, most recently active first."""
        query = present(
            limit=limit,
            offset=offset,
            activity_after=activity_after,
            activity_before=activity_before,
        )
        return ConversationPage.from_json(await self.get_route("/recent_conversations", query))

    async def conversation_summaries(
        self, *, limit: int = 25, after: str | None = None
    ) -> ConversationSummaryPage:
        """``GET /conversation_summaries``: the extension the embedded store and the dev
        server serve (see ``SummaryReader``); a real server answers 404."""
        query = present(limit=limit, after=after)
        return ConversationSummaryPage.from_json(
            await self.get_route("/conversation_summaries", query)
        )

    async def search(
        self, query: str, *, limit: int = 10, conversation_id: str | None = None
    ) -> SearchResult:
        """``POST /text_search``: the extension the embedded store and the dev server serve
        (see ``SearchReader``); a real server answers 404."""
        body = present(q=check_search(query, limit), limit=limit, conversation_id=conversation_id)
        return SearchResult.from_json(await self.request(SEARCH_ACTION, body))
