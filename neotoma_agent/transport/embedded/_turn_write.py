"""A turn's store handed over as records: the store's own write, with no request body.

A turn's driver (``_phases``) hands a store request's records to the embedded store
directly (its optional ``_store_records``, :mod:`neotoma_agent.transport._records`): the
entities and relationships the turn machine built, not a ``POST /store`` body built from
copies of them, and the answer comes back as the :class:`StoreResult` itself, made on the
store's thread from what the write wrote, with no answer dict built and parsed back. The
write is ``store``'s own (every check, then the plan, in the job's one transaction), so
what is stored is the same, byte for byte, whichever way the records came, and so is the
typed answer (tests/transport/embedded/test_turn_write.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from .._results import StoredEntity, StoreResult
from ._write import write

__all__ = ["store_records"]

#: an entry's ``raw``: the typed fields are all a records store answers
_NO_RAW: Mapping[str, Any] = {}


def store_records(conn: sqlite3.Connection, records: Mapping[str, Any]) -> StoreResult:
    """Store ``records`` (``entities``, ``relationships``: sequences of mappings, and
    ``idempotency_key``) as ``store`` stores a body of them, with the store's defaults: the
    body holds the records themselves, not copies, and every check ``store`` makes runs.

    A fresh store's answer is made from what it wrote: its ``raw`` holds the answer's
    counts, not its entries (the typed entries are ``entities``), its advisories or the
    conversation's message count; a replay's is ``store``'s answer, parsed."""
    entities = list(records["entities"])
    body = {
        "entities": entities,
        "idempotency_key": records["idempotency_key"],
        "relationships": list(records["relationships"]) or None,
    }
    written = write(conn, body)
    if isinstance(written, dict):
        return StoreResult.from_json(written, request_entities=entities)
    stored = [
        StoredEntity(
            item.identity.entity_id,
            item.entity_type,
            obs_id,
            item.index,
            item.action,
            item.identity.canonical_name,
            snapshot,
            _NO_RAW,
        )
        for item, obs_id, snapshot in written.entries
    ]
    by_index: dict[int, str] = {}
    in_order = True
    last = -1
    for entry in stored:
        index = entry.observation_index
        assert index is not None
        by_index.setdefault(index, entry.entity_id)
        in_order = in_order and index >= last
        last = index
    if not in_order:
        # The answer aligns entries to the request: by index, stably (as parsing one does).
        stored.sort(key=lambda e: e.observation_index or 0)
    raw = {
        "success": True,
        "replayed": False,
        "commit": True,
        "source_id": written.source_id,
        "entities_created": written.created,
        "observations_created": len(stored),
    }
    result = StoreResult(
        replayed=False,
        source_id=written.source_id,
        entities=tuple(stored),
        entities_created=written.created,
        observations_created=len(stored),
        raw=raw,
    )
    object.__setattr__(result, "_by_index", by_index)
    return result
