"""The typed answers of the calls a turn never makes: entity queries, observations,
relationships, corrections, conversation lists.

Parsed as :mod:`._results` parses the answers a turn reads (a store's, a lookup's, a history
page's), from the same JSON either transport produces; kept apart so that a process that
only runs turns (a coding-agent hook, a fresh process per event) does not build these
records. Re-exported by :mod:`._base` with the others.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, cast

import attrs
from attrs import AttrsInstance

if sys.version_info >= (3, 11):
    from typing import Self
else:
    from typing_extensions import Self

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

#: how a field is read from the answer's key of the same name, by the field's declared type
_READERS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "str": lambda value: "" if value is None else str(value),
    "str | None": _opt_str,
    "int": lambda value: _opt_int(value) or 0,
    "bool": bool,
    "Mapping[str, Any]": _map,
    "Any": lambda value: value,
}


@functools.cache
def _readers(cls: type[AttrsInstance]) -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
    # Each field the answer gives as it is, with its reader; ``raw`` (None) is the answer
    # itself. A field of another type (the parsed lists) is given by its ``from_json``.
    return tuple(
        (f.name, None if f.name == "raw" else _READERS[str(f.type)])
        for f in attrs.fields(cls)
        if f.name == "raw" or str(f.type) in _READERS
    )


def _read(cls: type[_T], raw: Mapping[str, Any], **given: Any) -> _T:
    """A result from its JSON answer: each field not ``given`` read from the key of its name
    as its type says (a ``str`` absent is ``""``, an ``int`` 0, a ``str | None`` ``None``),
    and the answer itself as ``raw`` where the result keeps it."""
    for name, read in _readers(cast("type[AttrsInstance]", cls)):
        if name not in given:
            given[name] = raw if read is None else read(raw.get(name))
    return cls(**given)


class _ReadByType:
    """A result every field of which its answer gives as it is: ``from_json`` reads each from
    the key of its name, as its type says (:func:`_read`)."""

    __slots__ = ()

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Self:
        return _read(cls, raw)


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
        return _read(cls, raw, entities=entities, total=_opt_int(raw.get("total")) or len(entities))


@attrs.frozen
class Observation(_ReadByType):
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
        return _read(cls, raw, snapshot=snap if isinstance(snap, Mapping) else None)


@attrs.frozen
class EntityDeletion(_ReadByType):
    """The answer to ``delete_entity`` / ``restore_entity``: Neotoma's ``{success,
    entity_id, observation_id}``, the id of the deletion (or restoring) observation."""

    entity_id: str
    observation_id: str | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)


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
        return _read(cls, raw, items=_parsed(raw, "items", RecentConversation.from_json))


@attrs.frozen
class ConversationSummaryItem(_ReadByType):
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
        return _read(cls, raw, items=_parsed(raw, "items", ConversationSummaryItem.from_json))
