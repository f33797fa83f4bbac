"""The requests the turn machine yields, each answered by one read or write of a store.

A step of the machine is a :data:`Machine`: a generator that yields a request, is sent its
answer (or has the error it raised thrown in), and returns what it decided. The driver maps
each request to a :class:`~neotoma_agent.Transport` call; the answer is what that call
returns. Plain records: a hook, a fresh process per event, builds them too.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    from .._records.payloads import StorePayload

__all__ = [
    "HistoryPage",
    "Lookup",
    "Lookups",
    "Machine",
    "Observations",
    "Request",
    "Store",
    "ToolObservations",
    "run",
]

T = TypeVar("T")


class Store(NamedTuple):
    """Store ``payload`` (answer: ``StoreResult``), with the hints a queueing transport
    (an outbox) reads: ``lane``, the folded conversation id its stores keep order in, and
    ``deferrable``, whether the phase may wait in the queue (a closing store may; the enter
    and a whole recorded turn never do)."""

    payload: StorePayload
    #: ``user``, ``assistant``, ``abandoned`` or ``recorded`` (a trace's span names it)
    phase: str
    lane: str
    deferrable: bool


class Lookup(NamedTuple):
    """The entities whose names hold ``identifier`` (answer: their ``(id,
    canonical_name)`` pairs, from ``retrieve_entity_by_identifier(identifier,
    limit=limit)``)."""

    identifier: str
    limit: int


class Lookups(NamedTuple):
    """The lookups of a retrieval's plan, each ``(the identifiers it serves, what, by,
    entity type)`` (``_recall.retrieval.lookup_plan``), at most ``limit`` entities each (answer:
    a ``_recall.retrieval.Found`` of the plan, filled in as its reads answered: each lookup's
    entities or failure by its slot, and what was read beside them).

    The async driver runs them concurrently under the retrieval's deadline (beside the
    recent entities and an application's retriever); the synchronous one in turn."""

    plan: Sequence[tuple[tuple[int, ...], str, str | None, str | None]]
    limit: int


class Observations(NamedTuple):
    """The fields of an entity's observations, newest first (answer: a list of mappings,
    from ``list_observations``)."""

    entity_id: str


class HistoryPage(NamedTuple):
    """The last ``limit`` messages of a conversation before message ``before`` (``None``:
    its last), with their turns' records (answer: ``RecentConversation``, from
    ``recent_conversation(entity_id, limit=limit, before=before)``)."""

    entity_id: str
    limit: int
    before: str | None


class ToolObservations(NamedTuple):
    """The stored fields of the tool calls turn record ``record_id`` REFERS_TO (answer:
    one list per call, of the fields of its observations that hold an ``invoked_at``;
    none for a record that is not stored)."""

    record_id: str


Request = Store | Lookup | Lookups | Observations | HistoryPage | ToolObservations

#: A step of the machine: yields requests, is sent their answers, returns a ``T``.
Machine = Generator[Request, Any, T]


def run(machine: Machine[T], answer: Callable[[Request], Any]) -> T:
    """Run a step of the machine to its end in this thread: ``answer(request)`` for each
    request it yields, the error ``answer`` raises thrown in (the synchronous driver; the
    async one is ``Phases.drive``)."""
    try:
        request = next(machine)
        while True:
            try:
                reply = answer(request)
            except Exception as exc:
                request = machine.throw(exc)
            else:
                request = machine.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        machine.close()
