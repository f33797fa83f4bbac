"""Recording many finished turns at once (transcript import), one idempotency key per turn.

:func:`record_batch` leaves exactly what :meth:`NeotomaMemory.record_turn` would for each
turn (the same payload, under the same key), and says per turn whether it was written,
replayed, or refused. Over a transport that can take many stores in one job
(:class:`BatchStore`, the embedded store), a batch costs two jobs instead of one per turn:

1. ``replay_status``: one read tells which turns are stored already, with the same
   entities. Those are replays and nothing is sent for them; retrieval does not run for
   them either (its edges are not part of what a key's replay compares).
2. ``store_many``: the others, after their retrieval, in one transaction, each store in a
   savepoint of its own. Their retrieval shares one lookup per distinct identifier across
   the batch (:class:`_SharedLookups`): a transcript names the same few entities turn after
   turn, and a lookup's answer does not depend on the turn that asks (nothing in the batch
   is written before all of them are answered).

Any turn that does not come out of that cleanly (a key stored with other text, a refusal,
a lost answer) is recorded again with ``record_turn`` alone, so it fails with exactly the
error (and message) a single turn gets; a refused store wrote nothing, and a replayed one
writes nothing, so the second attempt is safe. Over any other transport every turn is a
``record_turn``, ``concurrency`` at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import anyio
import attrs

from ._memory import NeotomaMemory
from ._records.checks import check_optional_count
from ._records.keys import TurnKeys, validate_entity_id, validate_turn_id
from ._records.payloads import StorePayload, recorded_payload
from ._records.text import check_text
from .transport._base import LookupResult, StoreResult, Transport
from .transport._rest import store_body

__all__ = ["BatchOutcome", "BatchStore", "BatchTurn", "record_batch"]


@runtime_checkable
class BatchStore(Protocol):
    """A transport that runs many store bodies as one job (:class:`EmbeddedStore`)."""

    async def store_many(
        self, bodies: Sequence[Mapping[str, Any]]
    ) -> list[StoreResult | Exception]: ...

    async def replay_status(self, bodies: Sequence[Mapping[str, Any]]) -> list[bool | None]: ...


def _user_text(value: object) -> str:
    return check_text("user_message", value)


def _assistant_text(value: object) -> str:
    return check_text("assistant_message", value)


def _turn_id(value: object) -> str:
    return validate_turn_id(value)


def _turn_number(value: object) -> int | None:
    return check_optional_count(value, "turn_number")


def _refers_to(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError("refers_to must be a sequence of entity ids, not a str")
    return tuple(validate_entity_id(e) for e in value)


@attrs.frozen
class BatchTurn:
    """One finished turn to record: the arguments of
    :meth:`NeotomaMemory.record_turn <neotoma_agent.NeotomaMemory.record_turn>` for the
    conversation of ``memory``, checked as it checks them when the turn is built
    (``TypeError``, ``ValueError`` or :class:`~neotoma_agent.ValidationError`, before any
    I/O): the texts storable, ``turn_id`` usable in keys, ``turn_number`` a count,
    ``refers_to`` entity ids."""

    memory: NeotomaMemory
    user: str = attrs.field(converter=_user_text)
    assistant: str = attrs.field(converter=_assistant_text)
    turn_id: str = attrs.field(converter=_turn_id)
    turn_number: int | None = attrs.field(default=None, converter=_turn_number)
    refers_to: tuple[str, ...] = attrs.field(default=(), converter=_refers_to)


@attrs.frozen
class BatchOutcome:
    """What recording one turn did: written, replayed (nothing written), or refused."""

    replayed: bool = False
    error: Exception | None = None


_WRITTEN = BatchOutcome()
_REPLAYED = BatchOutcome(replayed=True)


def _payload(turn: BatchTurn, retrieved_ids: Sequence[str]) -> StorePayload:
    memory = turn.memory
    return recorded_payload(
        memory._phases.conversation,  # the record the memory's own stores use
        # The ids were validated when the turn was made (parse_line); not again per body.
        TurnKeys(memory.conversation_id, turn.turn_id),
        turn.user,
        turn.assistant,
        retrieved_ids=retrieved_ids,
        cited_ids=turn.refers_to,
        turn_number=turn.turn_number,
    )


def _store_body(payload: StorePayload) -> dict[str, Any]:
    return store_body(
        payload.entities,
        idempotency_key=payload.idempotency_key,
        relationships=payload.relationships,
    )


def _body(turn: BatchTurn, retrieved_ids: Sequence[str]) -> dict[str, Any]:
    """The store body ``record_turn`` would send for ``turn``."""
    return _store_body(_payload(turn, retrieved_ids))


def _replay_probe(payload: StorePayload) -> dict[str, Any]:
    # All that replay_status reads (the key, and the entities its source id hashes); the
    # whole store body is built only for the turns that are stored.
    return {"entities": list(payload.entities), "idempotency_key": payload.idempotency_key}


class _SharedLookups:
    """A transport whose identifier lookups are shared by every turn of one batch.

    The first turn to name an identifier looks it up; the others wait for that answer. A
    lookup that fails (or is cancelled by its turn's deadline) is not kept: the next turn
    asking looks it up again, so each turn still sees and logs its own failures. Every other
    method is the inner transport's.
    """

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self._answers: dict[tuple[Any, ...], LookupResult | anyio.Event] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def retrieve_entity_by_identifier(self, identifier: str, **options: Any) -> LookupResult:
        key = (identifier, *sorted(options.items()))
        while isinstance(entry := self._answers.get(key), anyio.Event):
            await entry.wait()
        if entry is not None:
            return entry
        done = self._answers[key] = anyio.Event()
        try:
            answer = await self._inner.retrieve_entity_by_identifier(identifier, **options)
        except BaseException:
            del self._answers[key]
            raise
        finally:
            done.set()
        self._answers[key] = answer
        return answer


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
    payloads = [_payload(turn, ()) for turn in turns]
    statuses = await transport.replay_status([_replay_probe(p) for p in payloads])
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
        # Each memory's lookups shared over the batch (a memory per conversation, with the
        # turn's own settings, over its transport's shared lookups).
        shared: dict[int, _SharedLookups] = {}
        memories: dict[int, NeotomaMemory] = {}

        def sharing(memory: NeotomaMemory) -> NeotomaMemory:
            over = memories.get(id(memory))
            if over is None:
                inner = memory.transport
                lookups = shared.get(id(inner))
                if lookups is None:
                    lookups = shared[id(inner)] = _SharedLookups(inner)
                over = memories[id(memory)] = attrs.evolve(
                    memory, transport=cast(Transport, lookups)
                )
            return over

        async def with_retrieval(index: int) -> None:
            turn = turns[index]
            memory = sharing(turn.memory)
            async with slots:
                retrieved = await memory.retrieve(turn.user)
            if retrieved.ids:
                payloads[index] = _payload(turn, retrieved.ids)

        async with anyio.create_task_group() as tg:
            for index in fresh:
                tg.start_soon(with_retrieval, index)
    if fresh:
        results = await transport.store_many([_store_body(payloads[index]) for index in fresh])
        for index, result in zip(fresh, results, strict=True):
            if isinstance(result, Exception):
                alone.append(index)
            else:
                outcomes[index] = _REPLAYED if result.replayed else _WRITTEN
    return sorted(alone)
