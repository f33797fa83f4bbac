"""Storing records: a store's optional capability of taking a turn's records directly.

``Transport.store`` is a ``POST /store``: its entities become a request body (copies, as
the outbox keeps them and HTTP sends them) and its answer is parsed back from the store's
JSON. A store in the same process needs neither: the embedded store offers
``_store_records``, which takes the records the turn machine built as they are and
answers the :class:`StoreResult` itself. A turn's driver asks :func:`records_store` once
which way its transport takes a store; every wrapper (the outbox, the test wrappers) and
every other transport is a plain ``store``, so a wrapper sees each store it wraps.

The embedded store also takes a turn's whole enter as one job (``_enter_records``,
:func:`enter_job`): the user store's records, then the history read's pages and the
retrieval's lookups, read on the store's thread after the store and within the
retrieval's deadline, answered together: one trip to the store's thread a turn's enter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ._results import StoreResult

if TYPE_CHECKING:
    from .._engine.history import Paged
    from ._results import ConversationMessage, LookupResult

__all__ = ["EnterJob", "Entered", "RecordsStore", "TimedOut", "enter_job", "records_store"]


class RecordsStore(Protocol):
    """``_store_records`` of a store that takes records directly (the embedded store's)."""

    def __call__(
        self,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]] = (),
    ) -> Awaitable[StoreResult]: ...


def records_store(transport: object) -> RecordsStore | None:
    """``transport``'s ``_store_records`` (what it stores as ``store`` would, given the
    records), or ``None`` when it takes stores as request bodies only."""
    method: RecordsStore | None = getattr(transport, "_store_records", None)
    return method


class TimedOut(Exception):
    """A read of an enter's job that the retrieval's deadline cut short (never raised:
    it stands in an :class:`Entered` for the answer the read did not give)."""


class Entered(NamedTuple):
    """What an enter's job answered: the user store's answer, and each read's answer,
    or the error it raised (``TimedOut``: past the deadline), or ``None`` (not asked)."""

    stored: StoreResult
    #: what the history read's pages answered (``_engine.history.page_reads``)
    history: Paged | list[ConversationMessage] | Exception | None
    #: each lookup's answer by its place in the bodies (``None`` in a slot: the deadline
    #: came first)
    lookups: list[LookupResult | Exception | None] | None


class EnterJob(Protocol):
    """``_enter_records`` of a store that runs a turn's enter as one job (the embedded
    store's): :class:`RecordsStore`'s store, then the reads, within ``deadline`` (a
    ``time.monotonic()`` reading; ``None``: none). A failed store raises, reading nothing."""

    def __call__(
        self,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]],
        history: Mapping[str, Any] | None,
        lookups: Sequence[Mapping[str, Any]] | None,
        deadline: float | None,
    ) -> Awaitable[Entered]: ...


def enter_job(transport: object) -> EnterJob | None:
    """``transport``'s ``_enter_records``, or ``None`` (its enter is one call per store
    and read)."""
    method: EnterJob | None = getattr(transport, "_enter_records", None)
    return method
