"""A whole-store backup as JSON lines: every entity with its observations, every edge.

What ``neotoma-agent export`` writes by default and ``import`` restores. A store holds more
than finished turns: abandoned and open turns, tool calls (their arguments and results
live on observations, not in snapshots), an abandoned turn's error class, the entities a
memory remembered, conversation titles and platforms. Rather than a format per concept,
the backup keeps what the store keeps, through the Transport protocol alone (so it works
on the embedded store, the dev server and a real Neotoma server):

- a header line, ``{"format": "neotoma-agent-backup", "version": 1}``;
- one line per entity, ``{"entity_id", "entity_type", "observations": [...]}``, each
  observation ``{"fields", "source_priority", "observation_source"}``, oldest first: the
  entities no conversation owns first (by id), then each conversation (by id): its entity,
  then its turns in the order ``show`` prints them (user message, reply, turn record, tool
  calls). An entity deleted on its own (``forget --entity``) is there too, its deletion
  observation included, so a restore leaves it deleted and restorable: the ones an edge
  reaches on any store, every one on a store that lists them (the embedded store). A
  forgotten conversation's records are not (its edges are deleted too), nor a forgotten
  user's (nothing of theirs is live), nor a purged entity (nothing of it is left);
- one line per edge that is not deleted, ``{"relationship_type", "source_entity_id",
  "target_entity_id", "metadata"}``, in the order of their source entities (so a
  conversation's messages are linked to it in turn order, as ``history`` pages them).

Times of writing are not kept (a restore writes now) and neither are observation ids;
everything ``show``, ``stats``, history and retrieval read is. Restoring writes each
observation again, in order, with its priority and source, under an idempotency key derived
from its content (a second restore replays), and each edge; ids come out the same because
a store derives them from the fields. So export, import into an empty store and export
again give identical bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from .. import StoreResult, Transport
from ..exceptions import NotFoundError
from ..reads import (
    bulk_reader,
    gather_bounded,
    read_conversation,
    scan_entities,
    snapshot_or_none,
)
from ..transport.rest import store_arguments, store_body
from ._common import plural

__all__ = [
    "BACKUP_FORMAT",
    "BackupError",
    "BackupStats",
    "is_backup_header",
    "read_backup",
    "restore_backup",
]

#: the ``format`` of a backup's header line
BACKUP_FORMAT: Final = "neotoma-agent-backup"
_VERSION: Final = 1
_OBSERVATIONS_PAGE: Final = 1000
# Stores per job on a store that takes many at once; edges per request elsewhere.
_BATCH: Final = 256
_EDGES: Final = 100


class BackupError(ValueError):
    """A backup cannot be written (the store cannot list everything) or restored (a line
    that is not one, an entity the store names otherwise); the message says which."""


@attrs.define
class BackupStats:
    """What a backup holds, or what a restore wrote."""

    conversations: int = 0
    entities: int = 0
    observations: int = 0
    relationships: int = 0
    #: observations a restore found already stored (the same backup restored again)
    replayed: int = 0

    def note(self) -> str:
        """One line: the counts."""
        return (
            f"{plural(self.entities, 'entity', 'entities')} "
            f"({plural(self.observations, 'observation')}) and "
            f"{plural(self.relationships, 'relationship')}, "
            f"{plural(self.conversations, 'conversation')}"
        )


def is_backup_header(obj: object) -> bool:
    """Whether a decoded line is a backup's header."""
    return isinstance(obj, dict) and obj.get("format") == BACKUP_FORMAT


def _dumps(obj: object) -> str:
    # Keys in the order the store gave them: a stored object's key order is its content.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


async def _observations(transport: Transport, entity_id: str) -> list[dict[str, Any]]:
    """The entity's observations, oldest first (a store lists them newest first)."""
    found: list[Any] = []
    while True:
        page = await transport.list_observations(
            entity_id, limit=_OBSERVATIONS_PAGE, offset=len(found)
        )
        found.extend(page.observations)
        if len(page.observations) < _OBSERVATIONS_PAGE:
            break
    kept = [
        {
            "fields": dict(o.fields),
            "source_priority": o.source_priority,
            "observation_source": o.observation_source,
        }
        for o in reversed(found)
    ]
    # A store keeps one observation per content (its id hashes the fields and the request's
    # entities), so a restore cannot write two later observations with the same fields
    # (each names its entity the same way, by id): such a pair is kept once, at its later
    # place, which is what decides the snapshot (the newest observation wins among equal
    # priorities). The first observation is kept whatever follows: it creates the entity
    # (by its identifying fields, so it differs from a later one naming it by id).
    later: dict[str, dict[str, Any]] = {}
    for observation in kept[1:]:
        text = _dumps(observation["fields"])
        later.pop(text, None)
        later[text] = observation
    return kept[:1] + list(later.values())


async def _edges(transport: Transport, entity_id: str) -> list[tuple[str, str, str, Any]]:
    related = await transport.retrieve_related_entities(entity_id, direction="both")
    return [
        (r.relationship_type, r.source_entity_id, r.target_entity_id, dict(r.metadata))
        for r in related.relationships
        if r.metadata.get("_deleted") is not True
    ]


async def _conversation_order(
    transport: Transport, conversation_ids: Sequence[str]
) -> list[tuple[str, str]]:
    """The entities each conversation owns, conversation by conversation, in turn order."""
    order: list[tuple[str, str]] = []
    for cid in conversation_ids:
        stored = await read_conversation(transport, cid)
        if stored.snapshot is None:
            raise BackupError(f"no conversation {cid!r} in this store")
        order.append((stored.conversation_entity_id, stored.snapshot.entity_type))
        for turn in stored.turns:
            order += [(m.entity_id, "conversation_message") for m in turn.messages]
            if turn.record is not None:
                order.append((turn.record.entity_id, turn.record.entity_type))
            order += [(c.entity_id, "tool_invocation") for c in turn.tools]
    return order


async def read_backup(
    transport: Transport,
    conversation_ids: Sequence[str],
    *,
    everything: bool,
    stats: BackupStats,
) -> AsyncIterator[str]:
    """The backup's lines (without newlines).

    ``everything``: every live entity of the store (``conversation_ids`` must then be
    all of its conversations); else the named conversations, the edges touching them and
    the entities at their far ends that no conversation owns.
    """
    order = list(dict.fromkeys(await _conversation_order(transport, conversation_ids)))
    owned = {entity_id for entity_id, _ in order}
    others: dict[str, str] = {}
    if everything:
        scan = await scan_entities(transport)
        if scan.partial:
            raise BackupError(f"the store listed {len(scan.entities):,} of {scan.total:,} entities")
        # Every other live entity: what memories remembered, and what a conversation's
        # reads do not reach (a turn record whose messages are gone).
        others = {e.entity_id: e.entity_type for e in scan.entities if e.entity_id not in owned}
        if scan.entities:
            # Nothing live: a forgotten user (`forget --user`), whose backup holds nothing
            # of theirs, or an empty store.
            others.update(await _deleted(transport))
    ids = [entity_id for entity_id, _ in order] + list(others)
    edge_lists = await gather_bounded([functools.partial(_edges, transport, i) for i in ids])
    edges = {e[:3]: e for found in edge_lists for e in found}
    # The far ends of the edges that are not listed yet: with conversation ids, the
    # entities their turns refer to; and in any backup the entities deleted with
    # `forget --entity`, which no listing names but whose edges stay (a message still
    # REFERS_TO one). A deleted entity is kept with its deletion observation, so a
    # restore leaves it deleted and as restorable as it was; a purged one has no
    # observations left and stays out.
    ends = sorted({end for e in edges.values() for end in e[1:3]} - owned - others.keys())
    types = await gather_bounded([functools.partial(_entity_type, transport, i) for i in ends])
    others.update((i, t) for i, t in zip(ends, types, strict=True) if t is not None)
    entities = sorted(others.items()) + order
    place = {entity_id: n for n, (entity_id, _) in enumerate(entities)}
    yield _dumps({"format": BACKUP_FORMAT, "version": _VERSION})
    for start in range(0, len(entities), _BATCH):
        chunk = entities[start : start + _BATCH]
        observed = await gather_bounded(
            [functools.partial(_observations, transport, i) for i, _ in chunk]
        )
        for (entity_id, entity_type), observations in zip(chunk, observed, strict=True):
            if not observations:
                continue  # deleted meanwhile
            stats.entities += 1
            stats.observations += len(observations)
            stats.conversations += entity_type == "conversation"
            yield _dumps(
                {
                    "entity_id": entity_id,
                    "entity_type": entity_type,
                    "observations": observations,
                }
            )
    kept = [e for e in edges.values() if e[1] in place or e[2] in place]
    kept.sort(key=lambda e: (place.get(e[1], len(place)), e[0], e[2]))
    for rtype, src, dst, metadata in kept:
        stats.relationships += 1
        yield _dumps(
            {
                "relationship_type": rtype,
                "source_entity_id": src,
                "target_entity_id": dst,
                "metadata": metadata,
            }
        )


#: the records a conversation owns: deleted, they are a forgotten conversation's, which
#: a backup leaves out (its edges are deleted too: it is restored whole or not at all)
_CONVERSATION_TYPES: Final = frozenset(
    ("conversation", "conversation_message", "conversation_turn", "tool_invocation")
)


async def _deleted(transport: Transport) -> dict[str, str]:
    """The entities deleted one by one (``forget --entity``) that a store can list (the
    embedded store's bulk reads): those no edge reaches too (remembered outside a turn).
    Elsewhere the edges' far ends find them (:func:`read_backup`)."""
    reader = bulk_reader(transport)
    if reader is None:
        return {}
    found = await reader.deleted_entities()
    return {i: t for i, t in found if t not in _CONVERSATION_TYPES}


async def _entity_type(transport: Transport, entity_id: str) -> str | None:
    """The entity's type: its snapshot's, or for a deleted entity (no snapshot, its
    observations kept) its latest observation's; ``None`` for an unknown (purged) one."""
    snapshot = await snapshot_or_none(transport, entity_id)
    if snapshot is not None:
        return snapshot.entity_type
    try:
        page = await transport.list_observations(entity_id, limit=1, offset=0)
    except NotFoundError:
        return None
    return page.observations[0].entity_type if page.observations else None


# --- restoring ------------------------------------------------------------------------------


def _key(entity_id: str, n: int, observation: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(_dumps([entity_id, n, observation]).encode()).hexdigest()
    return f"backup-{digest[:32]}"


def _bodies(line: int, obj: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The store bodies of an entity line, one per observation, in order."""
    try:
        entity_id, entity_type = str(obj["entity_id"]), str(obj["entity_type"])
        observations = list(obj["observations"])
        bodies = []
        for n, observation in enumerate(observations):
            fields = dict(observation["fields"])
            entity = {**fields, "entity_type": entity_type}
            if n:  # the entity exists now: later observations name it
                entity["target_id"] = entity_id
            bodies.append(
                store_body(
                    [entity],
                    idempotency_key=_key(entity_id, n, observation),
                    source_priority=observation.get("source_priority"),
                    observation_source=observation.get("observation_source"),
                )
            )
    except (KeyError, TypeError, ValueError):
        raise BackupError(f"line {line}: not an entity line of a backup") from None
    return entity_id, bodies


async def _store_all(
    transport: Transport, bodies: Sequence[Mapping[str, Any]]
) -> list[StoreResult | Exception]:
    many = getattr(transport, "store_many", None)
    if many is not None:
        results: list[StoreResult | Exception] = await many(bodies)
        return results
    return [await transport.store(**store_arguments(b)) for b in bodies]


async def restore_backup(
    transport: Transport, lines: Iterable[tuple[int, Mapping[str, Any]]], stats: BackupStats
) -> None:
    """Write a backup's entity and edge lines (after its header) into ``transport``.

    Entities in batches (one job each on a store that takes many), their observations in
    order; then the edges, in order. Raises :class:`BackupError` for a line that is not a
    backup's, or an entity the store names with another id, and the store's own errors.
    """
    pending: list[tuple[int, str, list[dict[str, Any]]]] = []
    edges: list[dict[str, Any]] = []

    async def flush() -> None:
        bodies = [b for _, _, bs in pending for b in bs]
        results = iter(await _store_all(transport, bodies))
        for line, entity_id, entity_bodies in pending:
            for n in range(len(entity_bodies)):
                result = next(results)
                if isinstance(result, Exception):
                    raise result
                stats.observations += 1
                stats.replayed += result.replayed
                got = result.entities[0].entity_id if result.entities else None
                if n == 0 and got != entity_id:
                    raise BackupError(
                        f"line {line}: entity {entity_id} was stored as {got}: this store "
                        "derives ids from fields otherwise than the one backed up"
                    )
        pending.clear()

    for line, obj in lines:
        if is_backup_header(obj):
            continue
        if "relationship_type" in obj:
            try:
                edges.append(
                    {
                        "relationship_type": str(obj["relationship_type"]),
                        "source_entity_id": str(obj["source_entity_id"]),
                        "target_entity_id": str(obj["target_entity_id"]),
                        "metadata": dict(obj.get("metadata") or {}),
                    }
                )
            except (KeyError, TypeError, ValueError):
                raise BackupError(f"line {line}: not a relationship line of a backup") from None
            continue
        entity_id, bodies = _bodies(line, obj)
        stats.entities += 1
        stats.conversations += obj.get("entity_type") == "conversation"
        pending.append((line, entity_id, bodies))
        if sum(len(b) for _, _, b in pending) >= _BATCH:
            await flush()
    await flush()
    for start in range(0, len(edges), _EDGES):
        chunk = edges[start : start + _EDGES]
        await transport.create_relationships(chunk)
        stats.relationships += len(chunk)
