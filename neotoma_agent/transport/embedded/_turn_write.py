"""A turn's writes handed over as records, with no request body: its stores, its enter.

A turn's driver (``_phases``) hands a store request's records to the embedded store
directly (its optional ``_store_records``, :mod:`neotoma_agent.transport._records`): the
entities and relationships the turn machine built, not a ``POST /store`` body built from
copies of them, and the answer comes back as the :class:`StoreResult` itself, made on the
store's thread from what the write wrote, with no answer dict built and parsed back. The
write is ``store``'s own (every check, then the plan, in the job's one transaction), so
what is stored is the same, byte for byte, whichever way the records came, and so is the
typed answer (tests/transport/embedded/test_turn_write.py).

A turn's enter is a user store (:func:`store_records`), the history read's pages
(``recent_conversation``'s, as ``_engine.history.page_reads`` asks for them, made typed
from their rows: ``_typed_page``) and the
retrieval's lookups (``retrieve_entity_by_identifier``, as :func:`lookup_each` runs
many). Sent as three jobs they share a trip to the store's
thread only when they arrive together; :func:`enter_records` runs them as one job, in the
order a lone caller's jobs run in (the store first, then the reads), so a turn's enter
costs one trip whatever the timing, and its answers are the ones the three jobs give.

The reads are best-effort and bounded by the retrieval's deadline, as on the event loop:
past it, a statement still running is interrupted (SQLite's progress handler) and the
reads not yet made are left out (:class:`~neotoma_agent.transport._records.TimedOut`,
``None`` in a lookup's slot), so a slow read never holds the user store's answer longer
than the deadline. A failed store raises, reading nothing (the driver reads apart).
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..._engine.history import Paged, page_reads
from ..._records.keys import conversation_entity_id
from .._bodies import present
from .._records import Entered, TimedOut
from .._results import (
    ConversationMessage,
    LookupResult,
    StoredEntity,
    StoreResult,
)
from ._connect import encodable
from ._read import retrieve_entity_by_identifier
from ._store_answer import answer_json, message_count
from ._typed_page import typed_page
from ._write import write

__all__ = ["enter_records", "lookup_each", "store_answered", "store_records"]

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


def store_answered(conn: sqlite3.Connection, body: Mapping[str, Any]) -> StoreResult:
    """``store`` of ``body`` (a ``POST /store`` body, ``store_body``'s), answered with the
    :class:`StoreResult` that parsing its answer would give: a fresh store's answer JSON
    (its ``raw``) is made from what the store wrote when first read, not made here and
    parsed on the caller's side (``EmbeddedStore.store``); what is stored is ``store``'s."""
    written = write(conn, body)
    entities = body["entities"]
    if isinstance(written, dict):
        return StoreResult.from_json(written, request_entities=entities)
    by_index: dict[int, str] = {}
    for item, _, _ in written.entries:
        by_index.setdefault(item.index, item.identity.entity_id)
    return StoreResult._answered(
        functools.partial(answer_json, written, message_count(conn, written)),
        entities,
        source_id=written.source_id,
        created=written.created,
        observations=len(written.entries),
        by_index=by_index,
    )


#: SQLite virtual-machine steps between two looks at the clock while a read runs
_CLOCK_EVERY = 4096


def lookup_each(
    conn: sqlite3.Connection, body: Mapping[str, Any], past: Callable[[], bool] | None = None
) -> list[Any]:
    """``retrieve_entity_by_identifier`` on every body of ``body["lookups"]``: each answer,
    or the error it raised; ``None`` for each lookup not made or cut short once ``past()``."""
    out: list[Any] = []
    memo: dict[str, list[tuple[str, str]]] = {}  # one transaction: the searches are shared
    lookup = functools.partial(retrieve_entity_by_identifier, memo=memo)
    for item in body["lookups"]:
        if past is not None and past():
            out.append(None)
            continue
        try:
            out.append(encodable(lookup, conn, item))
        except Exception as exc:  # that lookup's own failure, as a lone one would raise it
            out.append(None if past is not None and past() else exc)
    return out


def enter_records(conn: sqlite3.Connection, body: Mapping[str, Any]) -> Entered:
    """Store ``body``'s records (``entities``, ``relationships``, ``idempotency_key``, as
    :func:`store_records`), then read the history ``body["history"]`` (its
    ``conversation_id``, ``limit``, ``before`` turn and ``tenant``: the pages
    ``page_reads`` asks for, or ``None``) and the lookups ``body["lookups"]``
    (``retrieve_entity_by_identifier`` bodies, or ``None``) until ``body["deadline"]`` (a
    ``time.monotonic()`` reading, or ``None``)."""
    stored = store_records(conn, body)
    history, lookups, deadline = body["history"], body["lookups"], body["deadline"]
    if history is None and lookups is None:
        return Entered(stored, None, None)
    past: Callable[[], bool] | None = None
    if deadline is not None:
        at = float(deadline)

        def past() -> bool:
            return time.monotonic() > at

        conn.set_progress_handler(past, _CLOCK_EVERY)
    try:
        read: Paged | list[ConversationMessage] | Exception | None = None
        if history is not None:
            read = _history(conn, history, past)
        found: list[LookupResult | Exception | None] | None = None
        if lookups is not None:
            found = [
                a if a is None or isinstance(a, Exception) else LookupResult.from_json(a)
                for a in lookup_each(conn, {"lookups": lookups}, past)
            ]
    finally:
        if past is not None:
            conn.set_progress_handler(None, 0)
    if not conn.in_transaction:
        # Never seen (a read's interruption rolls nothing back), but then the store's rows
        # are gone: fail the job, and the store's thread runs the group again.
        raise sqlite3.OperationalError("the enter's transaction was rolled back")
    return Entered(stored, read, found)


def _history(
    conn: sqlite3.Connection, body: Mapping[str, Any], past: Callable[[], bool] | None
) -> Paged | list[ConversationMessage] | Exception:
    # The pages page_reads asks for (_recall.history's read on a store that pages), each
    # read with the store's own history read.
    conversation_id, tenant = body["conversation_id"], body["tenant"]
    entity_id = conversation_entity_id(conversation_id, tenant)
    steps = page_reads(conversation_id, entity_id, body["limit"], body["before"], tenant)
    request = next(steps)
    while True:
        if past is not None and past():
            return TimedOut()
        query = present(entity_id=request.entity_id, limit=request.limit, before=request.before)
        try:
            page = encodable(typed_page, conn, query)
        except Exception as exc:  # the history read's own failure: the turn goes on without it
            return TimedOut() if past is not None and past() else exc
        try:
            request = steps.send(page)
        except StopIteration as done:
            answer: Paged | list[ConversationMessage] = done.value
            return answer
