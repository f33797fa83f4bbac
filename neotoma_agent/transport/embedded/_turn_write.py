"""A turn's store handed over as records: the store's own write, with no request body.

A turn's driver (``_phases``) hands a store request's records to the embedded store
directly (its optional ``_store_records``, :mod:`neotoma_agent.transport._records`): the
entities and relationships the turn machine built, not a ``POST /store`` body built from
copies of them, and the answer comes back as the :class:`StoreResult` itself, made on the
store's thread. The write is ``store``'s own (every check, then the plan, in the job's
one transaction), so what is stored is the same, byte for byte, whichever way the
records came (tests/transport/embedded/test_turn_write.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from .._results import StoreResult
from ._write import store

__all__ = ["store_records"]


def store_records(conn: sqlite3.Connection, records: Mapping[str, Any]) -> StoreResult:
    """Store ``records`` (``entities``, ``relationships``: sequences of mappings, and
    ``idempotency_key``) as ``store`` stores a body of them, with the store's defaults: the
    body holds the records themselves, not copies, and every check ``store`` makes runs."""
    entities = list(records["entities"])
    body = {
        "entities": entities,
        "idempotency_key": records["idempotency_key"],
        "relationships": list(records["relationships"]) or None,
    }
    return StoreResult.from_json(store(conn, body), request_entities=entities)
