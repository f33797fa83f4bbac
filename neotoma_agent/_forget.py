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

Erasing the bytes is the embedded store's :meth:`~neotoma_agent.EmbeddedStore.purge`.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from ._history import read_conversation
from ._keys import conversation_entity_id
from .transport._base import Transport

__all__ = [
    "DELETION_PRIORITY",
    "Forgotten",
    "forget_conversation",
    "forget_planned",
    "plan_forget",
    "restore_conversation",
]

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
    head = conversation_entity_id(forgotten.conversation_id)
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
