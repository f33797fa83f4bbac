"""Storing records: a store's optional capability of taking a turn's records directly.

``Transport.store`` is a ``POST /store``: its entities become a request body (copies, as
the outbox keeps them and HTTP sends them) and its answer is parsed back from the store's
JSON. A store in the same process needs neither: the embedded store offers
``_store_records``, which takes the records the turn machine built as they are and
answers the :class:`StoreResult` itself. A turn's driver asks :func:`records_store` once
which way its transport takes a store; every wrapper (the outbox, the test wrappers) and
every other transport is a plain ``store``, so a wrapper sees each store it wraps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol

from ._results import StoreResult

__all__ = ["RecordsStore", "records_store"]


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
