"""The typed answers of the calls a turn never makes: entity queries, observations,
relationships, corrections, conversation lists.

Parsed as :mod:`._results` parses the answers a turn reads (a store's, a lookup's, a history
page's), from the same JSON either transport produces; kept apart so that a process that
only runs turns (a coding-agent hook, a fresh process per event) does not build these
records. Re-exported by :mod:`._base` with the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from ._results import (
    Entity,
    EntitySnapshot,
    RecentConversation,
    _items,
    _map,
    _opt_int,
    _opt_str,
)

__all__ = [
    "ConversationPage",
    "ConversationSummaryItem",
    "ConversationSummaryPage",
    "CorrectionResult",
    "CreateRelationshipsResult",
    "EntityQueryResult",
    "Observation",
    "ObservationList",
    "RelatedEntities",
    "RelationshipSnapshot",
]

_T = TypeVar("_T")


def _parsed(
    raw: Mapping[str, Any], key: str, parse: Callable[[Mapping[str, Any]], _T]
) -> tuple[_T, ...]:
    """The answer's list ``key``, each object parsed (anything else in it skipped)."""
    return tuple(parse(item) for item in _items(raw.get(key)))


@attrs.frozen
class EntityQueryResult:
    """The answer to ``query_entities``."""

    entities: tuple[EntitySnapshot, ...]
    total: int
    limit: int
    offset: int
    #: pass as ``cursor`` to read the next page; ``None`` after the last page
    next_cursor: str | None = None
    raw: Mapping[str, Any] = attrs.field(default=attrs.Factory(dict), repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EntityQueryResult:
        entities = _parsed(raw, "entities", EntitySnapshot.from_json)
        return cls(
            entities=entities,
            total=_opt_int(raw.get("total")) or len(entities),
            limit=_opt_int(raw.get("limit")) or 0,
            offset=_opt_int(raw.get("offset")) or 0,
            next_cursor=_opt_str(raw.get("next_cursor")),
            raw=raw,
        )


@attrs.frozen
class Observation:
    """One observation: the exact fields one write contributed to an entity."""

    id: str
    entity_id: str
    entity_type: str
    source_id: str | None
    observed_at: str
    source_priority: int
    observation_source: str | None
    fields: Mapping[str, Any]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Observation:
        return cls(
            id=str(raw.get("id", "")),
            entity_id=str(raw.get("entity_id", "")),
            entity_type=str(raw.get("entity_type", "")),
            source_id=_opt_str(raw.get("source_id")),
            observed_at=str(raw.get("observed_at", "")),
            source_priority=_opt_int(raw.get("source_priority")) or 0,
            observation_source=_opt_str(raw.get("observation_source")),
            fields=_map(raw.get("fields")),
            raw=raw,
        )


@attrs.frozen
class ObservationList:
    """The answer to ``list_observations``: newest first."""

    observations: tuple[Observation, ...]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    def __len__(self) -> int:
        return len(self.observations)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ObservationList:
        obs = _parsed(raw, "observations", Observation.from_json)
        return cls(observations=obs, raw=raw)


@attrs.frozen
class RelationshipSnapshot:
    """One relationship (edge), keyed ``type:source:target``, with its merged metadata."""

    relationship_key: str
    relationship_type: str
    source_entity_id: str
    target_entity_id: str
    metadata: Mapping[str, Any]
    observation_count: int
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RelationshipSnapshot:
        rtype = str(raw.get("relationship_type", ""))
        src = str(raw.get("source_entity_id", ""))
        dst = str(raw.get("target_entity_id", ""))
        return cls(
            relationship_key=str(raw.get("relationship_key") or f"{rtype}:{src}:{dst}"),
            relationship_type=rtype,
            source_entity_id=src,
            target_entity_id=dst,
            metadata=_map(raw.get("snapshot")),
            observation_count=_opt_int(raw.get("observation_count")) or 0,
            raw=raw,
        )


@attrs.frozen
class CreateRelationshipsResult:
    """The answer to ``create_relationships`` (partial success is normal on a server)."""

    relationships: tuple[RelationshipSnapshot, ...]
    errors: tuple[Mapping[str, Any], ...]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CreateRelationshipsResult:
        return cls(
            relationships=_parsed(raw, "relationships", RelationshipSnapshot.from_json),
            errors=tuple(_items(raw.get("errors"))),
            raw=raw,
        )


@attrs.frozen
class RelatedEntities:
    """The answer to ``retrieve_related_entities``: edges and the entities at their far ends."""

    relationships: tuple[RelationshipSnapshot, ...]
    entities: tuple[Entity, ...]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RelatedEntities:
        return cls(
            relationships=_parsed(raw, "relationships", RelationshipSnapshot.from_json),
            entities=_parsed(raw, "entities", Entity.from_json),
            raw=raw,
        )


@attrs.frozen
class CorrectionResult:
    """The answer to ``correct``."""

    entity_id: str
    field: str
    value: Any
    observation_id: str | None
    #: the snapshot after the correction; ``None`` when an identical correction was a no-op
    snapshot: Mapping[str, Any] | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CorrectionResult:
        snap = raw.get("snapshot")
        return cls(
            entity_id=str(raw.get("entity_id", "")),
            field=str(raw.get("field", "")),
            value=raw.get("value"),
            observation_id=_opt_str(raw.get("observation_id")),
            snapshot=snap if isinstance(snap, Mapping) else None,
            raw=raw,
        )


@attrs.frozen
class EntityDeletion:
    """The answer to ``delete_entity`` / ``restore_entity``: Neotoma's ``{success,
    entity_id, observation_id}``, the id of the deletion (or restoring) observation."""

    entity_id: str
    observation_id: str | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EntityDeletion:
        return cls(
            entity_id=str(raw.get("entity_id", "")),
            observation_id=_opt_str(raw.get("observation_id")),
            raw=raw,
        )


@attrs.frozen
class ConversationPage:
    """The answer to ``recent_conversations``: conversations, most recently active first."""

    items: tuple[RecentConversation, ...]
    has_more: bool
    limit: int
    offset: int
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ConversationPage:
        return cls(
            items=_parsed(raw, "items", RecentConversation.from_json),
            has_more=bool(raw.get("has_more", False)),
            limit=_opt_int(raw.get("limit")) or 0,
            offset=_opt_int(raw.get("offset")) or 0,
            raw=raw,
        )


@attrs.frozen
class ConversationSummaryItem:
    """One conversation as a list shows it, with its turn records counted by status."""

    conversation_id: str
    #: the conversation's entity id
    entity_id: str
    title: str | None
    platform: str | None
    #: the conversation entity's last observation time (ISO 8601)
    last_activity: str | None
    #: its turn records; ``completed`` + ``abandoned`` + ``open`` unless some have another
    #: status
    turns: int
    completed: int
    abandoned: int
    open: int

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ConversationSummaryItem:
        return cls(
            conversation_id=str(raw.get("conversation_id") or ""),
            entity_id=str(raw.get("entity_id") or ""),
            title=_opt_str(raw.get("title")),
            platform=_opt_str(raw.get("platform")),
            last_activity=_opt_str(raw.get("last_activity")),
            turns=_opt_int(raw.get("turns")) or 0,
            completed=_opt_int(raw.get("completed")) or 0,
            abandoned=_opt_int(raw.get("abandoned")) or 0,
            open=_opt_int(raw.get("open")) or 0,
        )


@attrs.frozen
class ConversationSummaryPage:
    """The answer to ``conversation_summaries``: a page of conversations, most recent
    activity first; ``next`` is the ``after`` of the next page (``None``: the last page)."""

    items: tuple[ConversationSummaryItem, ...]
    #: how many conversations are listed in all
    total: int
    next: str | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ConversationSummaryPage:
        return cls(
            items=_parsed(raw, "items", ConversationSummaryItem.from_json),
            total=_opt_int(raw.get("total")) or 0,
            next=_opt_str(raw.get("next")),
            raw=raw,
        )
