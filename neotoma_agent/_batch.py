"""Recording many finished turns at once (transcript import), one idempotency key per turn.

:func:`record_batch` leaves exactly what :meth:`NeotomaMemory.record_turn` would for each
turn (the same payload, under the same key), and says per turn whether it was written,
replayed, or refused. Over a transport that can take many stores in one job
(:class:`BatchStore`, the embedded store), a batch costs two jobs instead of one per turn:

1. ``replay_status``: one read tells which turns are stored already, with the same
   entities. Those are replays and nothing is sent for them; retrieval does not run for
   them either (its edges are not part of what a key's replay compares).
2. ``store_many``: the others, after their retrieval, in one transaction, each store in a
   savepoint of its own.

Any turn that does not come out of that cleanly (a key stored with other text, a refusal,
a lost answer) is recorded again with ``record_turn`` alone, so it fails with exactly the
error (and message) a single turn gets; a refused store wrote nothing, and a replayed one
writes nothing, so the second attempt is safe. Over any other transport every turn is a
``record_turn``, ``concurrency`` at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import anyio
import attrs

from ._keys import TurnKeys
from ._memory import NeotomaMemory
from ._payloads import recorded_payload
from .transport._base import StoreResult, Transport
from .transport._rest import store_body

__all__ = ["BatchOutcome", "BatchStore", "BatchTurn", "record_batch"]


@runtime_checkable
class BatchStore(Protocol):
    """A transport that runs many store bodies as one job (:class:`EmbeddedStore`)."""

    async def store_many(
        self, bodies: Sequence[Mapping[str, Any]]
    ) -> list[StoreResult | Exception]: ...

    async def replay_status(self, bodies: Sequence[Mapping[str, Any]]) -> list[bool | None]: ...


@attrs.frozen
class BatchTurn:
    """One finished turn to record (the arguments of ``record_turn``, already checked:
    ids with ``validate_turn_id``, texts with ``check_text``, ``refers_to`` entity ids)."""

    memory: NeotomaMemory
    user: str
    assistant: str
    turn_id: str
    turn_number: int | None = None
    refers_to: tuple[str, ...] = ()


@attrs.frozen
class BatchOutcome:
    """What recording one turn did: written, replayed (nothing written), or refused."""

    replayed: bool = False
    error: Exception | None = None


_WRITTEN = BatchOutcome()
_REPLAYED = BatchOutcome(replayed=True)


def _body(turn: BatchTurn, retrieved_ids: Sequence[str]) -> dict[str, Any]:
    memory = turn.memory
    payload = recorded_payload(
        memory.settings,
        # The ids were validated when the turn was made (parse_line); not again per body.
        TurnKeys(memory.conversation_id, turn.turn_id),
        turn.user,
        turn.assistant,
        retrieved_ids=retrieved_ids,
        cited_ids=turn.refers_to,
        turn_number=turn.turn_number,
    )
    return store_body(
        payload.entities,
        idempotency_key=payload.idempotency_key,
        relationships=payload.relationships,
    )


async def record_batch(
    transport: Transport,
    turns: Sequence[BatchTurn],
    *,
    retrieve: bool = True,
    concurrency: int = 16,
) -> list[BatchOutcome]:
    """Record ``turns`` (each over its own ``memory``, all over ``transport``), in order.

    Returns one :class:`BatchOutcome` per turn. Errors a single turn would raise are in its
    outcome; an error no turn could survive (the store closed, a programming error) is
    raised. ``concurrency`` bounds retrieval lookups and single-turn records in flight.
    """
    outcomes: list[BatchOutcome | None] = [None] * len(turns)
    alone: list[int] = list(range(len(turns)))
    if isinstance(transport, BatchStore) and turns:
        alone = await _batched(transport, turns, outcomes, retrieve, concurrency)
    slots = anyio.Semaphore(concurrency)

    async def record_alone(index: int) -> None:
        turn = turns[index]
        async with slots:
            try:
                result = await turn.memory.record_turn(
                    turn.user,
                    turn.assistant,
                    turn_id=turn.turn_id,
                    turn_number=turn.turn_number,
                    refers_to=turn.refers_to,
                    retrieve=retrieve,
                )
            except Exception as exc:  # the turn's own failure, reported by the caller
                outcomes[index] = BatchOutcome(error=exc)
            else:
                outcomes[index] = _REPLAYED if result.replayed else _WRITTEN

    if len(alone) == 1:
        await record_alone(alone[0])
    elif alone:
        async with anyio.create_task_group() as tg:
            for index in alone:
                tg.start_soon(record_alone, index)
    done = [outcome for outcome in outcomes if outcome is not None]
    assert len(done) == len(turns)
    return done


async def _batched(
    transport: BatchStore,
    turns: Sequence[BatchTurn],
    outcomes: list[BatchOutcome | None],
    retrieve: bool,
    concurrency: int,
) -> list[int]:
    """The two-job path; returns the indexes left for ``record_turn`` alone."""
    # Retrieval adds edges only, which a replay does not compare: check the keys first.
    bodies = [_body(turn, ()) for turn in turns]
    statuses = await transport.replay_status(bodies)
    alone: list[int] = []
    fresh: list[int] = []
    for index, status in enumerate(statuses):
        if status is True:
            outcomes[index] = _REPLAYED
        elif status is False:
            alone.append(index)  # refused as a mismatch: record_turn says so, with its message
        else:
            fresh.append(index)
    if retrieve and fresh:
        slots = anyio.Semaphore(concurrency)

        async def with_retrieval(index: int) -> None:
            turn = turns[index]
            async with slots:
                retrieved = await turn.memory.retrieve(turn.user)
            bodies[index] = _body(turn, retrieved.ids)

        async with anyio.create_task_group() as tg:
            for index in fresh:
                tg.start_soon(with_retrieval, index)
    if fresh:
        results = await transport.store_many([bodies[index] for index in fresh])
        for index, result in zip(fresh, results, strict=True):
            if isinstance(result, Exception):
                alone.append(index)
            else:
                outcomes[index] = _REPLAYED if result.replayed else _WRITTEN
    return sorted(alone)
