"""The Transport protocol, the optional ConversationReader, and AsyncClosing.

The typed results the methods return live in :mod:`._results` and :mod:`._query_results`;
they are re-exported here, where the package's modules import them from.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

# `X as X`: explicit re-exports (mypy --strict); the package imports the results from here
# (except the modules a coding-agent hook's prompt loads: they import ._results itself).
from .._util.exits import ExitWith as ExitWith
from ._bodies import ConversationWindow, StoreOptions
from ._query_results import ConversationPage as ConversationPage
from ._query_results import ConversationSummaryItem as ConversationSummaryItem
from ._query_results import ConversationSummaryPage as ConversationSummaryPage
from ._query_results import CorrectionResult as CorrectionResult
from ._query_results import CreateRelationshipsResult as CreateRelationshipsResult
from ._query_results import EntityDeletion as EntityDeletion
from ._query_results import EntityQueryResult as EntityQueryResult
from ._query_results import Observation as Observation
from ._query_results import ObservationList as ObservationList
from ._query_results import RelatedEntities as RelatedEntities
from ._query_results import RelationshipSnapshot as RelationshipSnapshot
from ._results import ConversationMessage as ConversationMessage
from ._results import Entity as Entity
from ._results import EntitySnapshot as EntitySnapshot
from ._results import LookupResult as LookupResult
from ._results import RecentConversation as RecentConversation
from ._results import RelatedEntity as RelatedEntity
from ._results import StoredEntity as StoredEntity
from ._results import StoreResult as StoreResult
from ._search_results import SearchResult as SearchResult
from ._wire import Direction

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = [
    "AsyncClosing",
    "ConversationReader",
    "Direction",
    "EntityDeleter",
    "ExitWith",
    "SearchReader",
    "SummaryReader",
    "Transport",
]


_Closing = TypeVar("_Closing", bound="AsyncClosing")


class AsyncClosing(ExitWith):
    """``async with x:`` for an object with ``aclose()``: enter gives it, exit closes it."""

    __slots__ = ()

    async def aclose(self) -> None:
        """Release what the object holds; idempotent."""
        raise NotImplementedError

    async def __aenter__(self: _Closing) -> _Closing:
        return self

    async def _exit(self, exc: BaseException | None) -> None:
        await self.aclose()


@runtime_checkable
class Transport(Protocol):
    """What the turn protocol needs from a Neotoma store: its REST actions, as async methods.

    Implementations: :class:`~neotoma_agent.EmbeddedStore` (SQLite, the default) and
    :class:`~neotoma_agent.HttpTransport` (a real Neotoma server); wrappers over any of
    them: :class:`~neotoma_agent.OutboxTransport` (queues closing stores while the inner
    transport is unreachable) and the ones in :mod:`neotoma_agent.testing`. A wrapper
    forwards every method with every argument, so what the turn engine passes (the
    ``store`` hints included) reaches the transport that reads it. Errors are raised as the
    :mod:`neotoma_agent.exceptions` tree.
    """

    async def store(
        self, entities: Sequence[Mapping[str, Any]], **options: Unpack[StoreOptions]
    ) -> StoreResult:
        """Write entities (one observation each) and relationships under an idempotency key.

        Each entity is a plain JSON mapping: ``entity_type`` (required, e.g. ``"company"``)
        plus its fields, e.g. ``{"entity_type": "company", "name": "Acme Corp", "domain":
        "acme.com"}``. The store derives the entity id from the type's identity fields
        (``name`` for most types), so storing the same name again adds an observation to
        the same entity; ``target_id`` (an ``ent_…`` id) names the entity explicitly.

        ``lane`` and ``deferrable`` are hints for a transport that may queue a store (an
        :class:`~neotoma_agent.OutboxTransport`); a store ignores them, and a wrapper passes
        them on unchanged.
        """
        ...

    async def retrieve_entity_by_identifier(
        self,
        identifier: str,
        *,
        entity_type: str | None = None,
        by: str | None = None,
        limit: int | None = None,
    ) -> LookupResult:
        """Find entities by id, name substring or identity field."""
        ...

    async def create_relationship(
        self,
        relationship_type: str,
        source_entity_id: str,
        target_entity_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> RelationshipSnapshot:
        """Create (or re-observe) one edge between two existing entity ids."""
        ...

    async def create_relationships(
        self, relationships: Sequence[Mapping[str, Any]]
    ) -> CreateRelationshipsResult:
        """Create several edges given by entity id."""
        ...

    async def get_entity_snapshot(self, entity_id: str) -> EntitySnapshot:
        """The current snapshot of one entity; :class:`NotFoundError` if it does not exist."""
        ...

    async def list_observations(
        self, entity_id: str, *, limit: int = 100, offset: int = 0
    ) -> ObservationList:
        """The observations of one entity, newest first."""
        ...

    async def retrieve_related_entities(
        self,
        entity_id: str,
        *,
        relationship_types: Sequence[str] | None = None,
        direction: Direction = "both",
        max_hops: int = 1,
    ) -> RelatedEntities:
        """Edges touching an entity (breadth-first up to ``max_hops``) and their entities."""
        ...

    async def query_entities(
        self,
        *,
        entity_type: str | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> EntityQueryResult:
        """Page through entities, optionally of one type or matching a search string.

        ``cursor``: the ``next_cursor`` of the previous page, to read on from it.
        """
        ...

    async def correct(
        self,
        entity_id: str,
        entity_type: str,
        field: str,
        value: Any,
        *,
        idempotency_key: str,
    ) -> CorrectionResult:
        """Write a high-priority correction of one field."""
        ...

    async def aclose(self) -> None:
        """Release the transport's resources; idempotent."""
        ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class ConversationReader(Protocol):
    """The optional Transport methods that read conversations (Neotoma's
    ``GET /recent_conversations`` routes).

    :class:`~neotoma_agent.EmbeddedStore` and :class:`~neotoma_agent.HttpTransport` have
    them; a transport without them still works (history then uses the generic reads). A
    wrapper that forwards them to a transport without them raises
    :class:`NotImplementedError`, which readers take as "not supported".
    """

    async def recent_conversation(
        self, conversation_entity_id: str, **window: Unpack[ConversationWindow]
    ) -> RecentConversation:
        """A conversation (by **entity id**) and its messages; 404 :class:`NotFoundError` if
        that id is no conversation.

        ``limit`` / ``before`` (a message id) ask for the last ``limit`` messages in write
        order, before that message: an extension the embedded store and the dev server
        honour (the answer's ``has_more`` is then set) and a real server ignores (it sends
        every message, in activity order).
        """
        ...

    async def recent_conversations(
        self,
        *,
        limit: int = 25,
        offset: int = 0,
        activity_after: str | None = None,
        activity_before: str | None = None,
    ) -> ConversationPage:
        """Conversations, most recently active first (``limit`` 1–100), with their messages."""
        ...


@runtime_checkable
class SummaryReader(Protocol):
    """The optional Transport method that lists conversations from a per-conversation
    summary the store keeps (``GET /conversation_summaries``).

    An extension: :class:`~neotoma_agent.EmbeddedStore` keeps the summary (in the same
    transaction as each store that changes it) and the dev server serves it;
    :class:`~neotoma_agent.HttpTransport` asks for it, and a real Neotoma server, which has
    no such route, answers 404 :class:`~neotoma_agent.NotFoundError` (readers then fall back
    to listing conversations themselves).
    """

    async def conversation_summaries(
        self, *, limit: int = 25, after: str | None = None
    ) -> ConversationSummaryPage:
        """``limit`` (1–100) conversations, most recent activity first (ties: the larger
        ``conversation_id`` first), after the cursor ``after`` (a page's ``next``): keyset
        paging, so a deep page costs what the first one does."""
        ...


@runtime_checkable
class SearchReader(Protocol):
    """The optional Transport method that searches what was said: the text of every stored
    message and the text fields of every entity (``GET /text_search``).

    :class:`~neotoma_agent.EmbeddedStore` keeps a full-text index (in the same transaction
    as each store that changes it) and the dev server serves it;
    :class:`~neotoma_agent.HttpTransport` asks for it and, from a real Neotoma server (which
    answers the route 404), falls back to the server's own reads (``/entities/query`` with
    ``search``, a conversation's messages), ranking what they return: see the search guide
    for what that finds. :meth:`~neotoma_agent.NeotomaMemory.search` uses the same fallback
    over a transport without this method.
    """

    async def search(
        self, query: str, *, limit: int = 10, conversation_id: str | None = None
    ) -> SearchResult:
        """At most ``limit`` (1–100) messages and entities holding every word and phrase of
        ``query`` (plain text; ``"..."`` marks a phrase), best first; with
        ``conversation_id``, that conversation's messages only. An empty or blank query
        raises :class:`~neotoma_agent.EmptySearchQueryError` before any I/O."""
        ...


@runtime_checkable
class EntityDeleter(Protocol):
    """The optional Transport methods that delete one entity as Neotoma does
    (``POST /delete_entity``, ``POST /restore_entity``).

    A deletion is an observation ``{_deleted: true, deleted_at}`` at ``source_priority``
    1000 on the entity: it wins the entity's deletion order, so no read returns the entity
    (its observations and its edges stay, and a restore brings it back).
    :class:`~neotoma_agent.EmbeddedStore` and :class:`~neotoma_agent.HttpTransport` have
    them (the dev server serves both routes); :meth:`~neotoma_agent.NeotomaMemory.forget_entity`
    writes the same observation through ``store`` on a transport without them.
    """

    async def delete_entity(
        self, entity_id: str, entity_type: str, *, reason: str | None = None
    ) -> EntityDeletion:
        """Soft-delete the entity; 404 :class:`NotFoundError` if there is no such entity."""
        ...

    async def restore_entity(
        self, entity_id: str, entity_type: str, *, reason: str | None = None
    ) -> EntityDeletion:
        """Undo :meth:`delete_entity`: the entity is readable again."""
        ...
