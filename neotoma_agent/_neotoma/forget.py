"""Forgetting a conversation: Neotoma's soft deletion of what the conversation owns.

Neotoma deletes by observation, never by erasing: ``/delete_entity`` writes an observation
with ``_deleted: true`` at ``source_priority`` 1000, which wins the entity's deletion order
(priority, source rank, recency), so the entity has no snapshot and no read returns it;
``/delete_relationship`` does the same to an edge (``metadata._deleted: true``). Both are
reversible: a later observation with ``_deleted: false`` brings the entity back.

:func:`forget_conversation` writes exactly those observations through the Transport's own
``store`` and ``create_relationships``, so it works the same on every backend (the embedded
store, the dev server, a real Neotoma server, through an outbox): the conversation entity,
its messages, turn records and tool calls, and every edge that touches them. Entities the
conversation only refers to (a company, a produced note) stay; their edges to it go.
:func:`restore_conversation` undoes it from the :class:`Forgotten` record ``forget`` returns
(deleted entities cannot be found by reading any more: the record is the map back).

:func:`forget_entity` deletes one entity the way ``/delete_entity`` does (through the
transport's ``delete_entity`` when it has one, :class:`~neotoma_agent.EntityDeleter`; else
the same observation through ``store``); its edges stay, as on a server, and readers skip
the deleted end. :func:`restore_entity` undoes it.

Erasing the bytes is the embedded store's :func:`~neotoma_agent.purge_forgotten` (a
conversation) and :func:`~neotoma_agent.purge_entities` (entities).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from .._recall.history import read_conversation
from .._records.keys import conversation_entity_id
from .._records.user_id import identify, tenant_for
from ..exceptions import InvalidEntityIdError, NotFoundError
from ..transport._base import EntityDeleter, EntityDeletion, Transport
from .identity import ENTITY_ID_RE

# No __all__: neotoma_agent.forget lists the public names (each list in one place).

#: the ``source_priority`` of Neotoma's deletion observations (``services/deletion.ts``);
#: a restore writes at the same priority, so the newer of the two decides, and a
#: conversation can be forgotten, restored and forgotten again
DELETION_PRIORITY: Final = 1000
# Entities (and edges) per request: well inside every backend's body limit.
_CHUNK: Final = 100


@attrs.frozen
class Forgotten:
    """What :func:`forget_conversation` deleted: the map :func:`restore_conversation` reads.

    ``entities``: ``(entity_id, entity_type)`` pairs; ``relationships``:
    ``(relationship_type, source_entity_id, target_entity_id)`` triples. JSON-plain through
    :meth:`to_json` / :meth:`from_json`, so it can be kept to restore later.
    """

    conversation_id: str
    entities: tuple[tuple[str, str], ...]
    relationships: tuple[tuple[str, str, str], ...]

    @property
    def entity_ids(self) -> tuple[str, ...]:
        """The ids of the deleted entities."""
        return tuple(e for e, _ in self.entities)

    def to_json(self) -> dict[str, Any]:
        """The JSON-plain form."""
        return {
            "conversation_id": self.conversation_id,
            "entities": [list(e) for e in self.entities],
            "relationships": [list(r) for r in self.relationships],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Forgotten:
        """The record :meth:`to_json` wrote."""
        return cls(
            str(doc["conversation_id"]),
            tuple((str(i), str(t)) for i, t in doc["entities"]),
            tuple((str(r), str(s), str(d)) for r, s, d in doc["relationships"]),
        )


def _now() -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _owned(transport: Transport, conversation_id: str) -> list[tuple[str, str]]:
    """The conversation entity, its messages, turn records and tool calls (id, type)."""
    stored = await read_conversation(transport, conversation_id)
    if stored.snapshot is None:
        return []
    owned: dict[str, str] = {stored.conversation_entity_id: stored.snapshot.entity_type}
    for turn in stored.turns:
        for m in turn.messages:
            owned.setdefault(m.entity_id, "conversation_message")
        if turn.record is not None:
            owned.setdefault(turn.record.entity_id, turn.record.entity_type)
        for call in turn.tools:
            owned.setdefault(call.entity_id, "tool_invocation")
    return list(owned.items())


async def _edges(transport: Transport, ids: Iterable[str]) -> list[tuple[str, str, str]]:
    """Every edge touching one of ``ids``, once."""
    edges: dict[tuple[str, str, str], None] = {}
    for entity_id in ids:
        related = await transport.retrieve_related_entities(entity_id, direction="both")
        for r in related.relationships:
            if r.metadata.get("_deleted") is True:
                continue
            edges[(r.relationship_type, r.source_entity_id, r.target_entity_id)] = None
    return list(edges)


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


async def _mark(transport: Transport, forgotten: Forgotten, *, deleted: bool) -> None:
    """Write the deletion (or restoring) observations of everything ``forgotten`` names.

    Edges first, then the entities, the conversation entity last: a forget cut short
    leaves the conversation readable (and ``forget`` can run again), never half-hidden.
    """
    at = _now()
    stamp = {"_deleted": deleted, ("deleted_at" if deleted else "restored_at"): at}
    run = uuid.uuid4().hex  # every forget or restore is a new act, never a replay
    for chunk in _chunks(forgotten.relationships):
        await transport.create_relationships(
            [
                {
                    "relationship_type": rtype,
                    "source_entity_id": src,
                    "target_entity_id": dst,
                    "metadata": stamp,
                }
                for rtype, src, dst in chunk
            ]
        )
    await identify(transport)
    head = conversation_entity_id(forgotten.conversation_id, tenant_for(transport))
    ordered = [e for e in forgotten.entities if e[0] != head]
    ordered += [e for e in forgotten.entities if e[0] == head]
    for n, chunk in enumerate(_chunks(ordered)):
        await transport.store(
            [{"entity_type": t, "target_id": i, **stamp} for i, t in chunk],
            idempotency_key=f"{'forget' if deleted else 'restore'}-{run}-{n}",
            source_priority=DELETION_PRIORITY,
        )


async def plan_forget(transport: Transport, conversation_id: str) -> Forgotten:
    """What :func:`forget_conversation` would delete, read without writing anything.

    A caller that must keep the record before anything is deleted (the CLI's undo record)
    reads it here, keeps it, then passes it to :func:`forget_planned`.
    """
    owned = await _owned(transport, conversation_id)
    edges = await _edges(transport, (i for i, _ in owned))
    return Forgotten(conversation_id, tuple(owned), tuple(edges))


async def forget_planned(transport: Transport, forgotten: Forgotten) -> None:
    """Soft-delete what :func:`plan_forget` returned (nothing, if it names nothing)."""
    if forgotten.entities:
        await _mark(transport, forgotten, deleted=True)


async def forget_conversation(transport: Transport, conversation_id: str) -> Forgotten:
    """Soft-delete a conversation: its entity, messages, turn records, tool calls and edges.

    Returns what was deleted (nothing when there is no such conversation, or it is
    forgotten already). Reversible with :func:`restore_conversation`.
    """
    forgotten = await plan_forget(transport, conversation_id)
    await forget_planned(transport, forgotten)
    return forgotten


async def restore_conversation(transport: Transport, forgotten: Forgotten) -> None:
    """Undo :func:`forget_conversation`: the same entities and edges, readable again."""
    await _mark(transport, forgotten, deleted=False)


def check_entity_id(entity_id: object) -> str:
    """``entity_id`` if it is an entity id (``ent_`` + 24 lowercase hex digits);
    :class:`~neotoma_agent.InvalidEntityIdError` (never quoting it) otherwise."""
    if not isinstance(entity_id, str):
        raise InvalidEntityIdError(f"an entity id is a str, not {type(entity_id).__name__}")
    if not ENTITY_ID_RE.match(entity_id):
        raise InvalidEntityIdError(
            f"not an entity id ({len(entity_id)} characters): an entity id is "
            "'ent_' and 24 lowercase hex digits"
        )
    return entity_id


async def _entity_type(transport: Transport, entity_id: str) -> str:
    """The type of an entity, deleted or not (its newest observation says it)."""
    listed = await transport.list_observations(entity_id, limit=1)
    if not listed.observations:
        raise NotFoundError("Entity not found", status=404, code="RESOURCE_NOT_FOUND")
    return listed.observations[0].entity_type


async def _in_state(transport: Transport, entity_id: str, *, deleted: bool) -> bool:
    """Whether the entity reads as ``deleted`` (404) or not."""
    try:
        await transport.get_entity_snapshot(entity_id)
    except NotFoundError:
        return deleted
    return not deleted


async def _mark_entity(
    transport: Transport, entity_id: str, entity_type: str, *, deleted: bool
) -> EntityDeletion:
    """Delete (or restore) through the routes, checked by a read; else through ``store``.

    A real Neotoma server restores at ``source_priority`` 1001, above its deletions (1000),
    so after a restore its ``/delete_entity`` no longer hides the entity. When the read
    shows that the route's observation did not decide (or the transport has no routes),
    the same observation goes through ``store`` at 1001: a tie with the server's restore
    that it wins (a server's own deletions carry no ``observation_source``, which ranks
    last), and among such writes the newest decides.
    """
    if isinstance(transport, EntityDeleter):
        if deleted:
            answer = await transport.delete_entity(entity_id, entity_type)
        else:
            answer = await transport.restore_entity(entity_id, entity_type)
        if await _in_state(transport, entity_id, deleted=deleted):
            return answer
    at = _now()
    result = await transport.store(
        [
            {
                "entity_type": entity_type,
                "target_id": entity_id,
                "_deleted": deleted,
                ("deleted_at" if deleted else "restored_at"): at,
            }
        ],
        idempotency_key=f"{'delete' if deleted else 'restore'}-entity-{uuid.uuid4().hex}",
        source_priority=DELETION_PRIORITY + 1,
    )
    stored = result.entities[0] if result.entities else None
    observation = stored.observation_id if stored is not None else None
    return EntityDeletion(entity_id, observation, raw={"success": True, "entity_id": entity_id})


async def forget_entity(transport: Transport, entity_id: str) -> EntityDeletion:
    """Soft-delete one entity as Neotoma's ``/delete_entity`` does.

    The entity leaves every read (lookups and retrieval, search, snapshots, the messages'
    REFERS_TO lists, ``show``, the context block); its observations and edges stay, so
    :func:`restore_entity` brings it back. A malformed id raises
    :class:`~neotoma_agent.InvalidEntityIdError` before any I/O; an unknown (or already
    deleted) entity :class:`~neotoma_agent.NotFoundError`, writing nothing.
    """
    check_entity_id(entity_id)
    snapshot = await transport.get_entity_snapshot(entity_id)  # 404: unknown or deleted
    return await _mark_entity(transport, entity_id, snapshot.entity_type, deleted=True)


async def restore_entity(transport: Transport, entity_id: str) -> EntityDeletion:
    """Undo :func:`forget_entity`: the entity is readable again (restoring an entity that
    is not deleted writes an observation that changes nothing). Errors as
    :func:`forget_entity`'s (an entity a purge erased is unknown)."""
    check_entity_id(entity_id)
    entity_type = await _entity_type(transport, entity_id)
    return await _mark_entity(transport, entity_id, entity_type, deleted=False)
