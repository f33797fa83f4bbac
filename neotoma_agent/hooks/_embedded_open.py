"""A hook's opening of a turn on an embedded store file, without the event loop.

A prompt opens its turn: the user store, the history read, retrieval, and the context block
the answer carries. On an embedded store each is a store action on the file; this module
runs them in the hook's own thread (``hooks._embedded``'s :class:`EmbeddedFile`), loading
neither the async driver nor asyncio, anyio or the store's thread. Everything it decides
comes from what the engine's enter (``Phases.enter``) decides with, for a memory with
default settings: the user store and what it wrote (the turn machine's ``Entering``,
driven on the file by ``hooks._embedded.drive``), the history
pages (``_history.read_history_now``), the lookups and their ranking
(``_retrieval.retrieve_now``), and the block (``_context.render_context``). So the file ends
up the same and the answer says the same (tests/hooks/test_hook_embedded.py replays
recorded sessions both ways and compares every row and every answer).

In the engine's order: the user store first (its answer says whether the turn was open
before), then the history read, then the lookups. Unlike the engine's enter this has no
deadline of its own (the store's reads answer at once; the hook's timeout bounds the lock
wait), and a failed user store wrote nothing (one transaction), so nothing is abandoned:
the turn stays due for a later event.
"""

from __future__ import annotations

from typing import NamedTuple

from .._closing import check_model, started_at
from .._context import render_context
from .._engine import Entering, Prompt, TurnMachine
from .._extract import extract
from .._history import DEFAULT_HISTORY_TURNS, HistoryTurn, read_history_now
from .._keys import turn_keys
from .._payloads import ConversationSettings, RunFields
from .._ranking import DEFAULT_LINK_THRESHOLD
from .._retrieval import (
    DEFAULT_LOOKUP_LIMIT,
    DEFAULT_MAX_IDENTIFIERS,
    DEFAULT_RETRIEVAL_LIMIT,
    EMPTY_RETRIEVAL,
    recent_entities,
    retrieve_now,
)
from .._text import check_text
from ..transport._bodies import present
from ..transport._results import LookupResult, RecentConversation, StoreResult
from ..transport.embedded import _connect
from ..transport.embedded._conversations import recent_conversation
from ..transport.embedded._read import retrieve_entity_by_identifier
from ._embedded import EmbeddedFile, Stored, drive
from ._state import PendingTurn

__all__ = ["Opening", "open_turn"]


class Opening(NamedTuple):
    """What the state file keeps of an opened turn (as ``OpenTurn`` gives them)."""

    user_message_id: str
    retrieved_ids: tuple[str, ...]
    #: ``OpenTurn.context(max_chars=context_chars)``
    context: str


def open_turn(file: EmbeddedFile, harness: str, row: PendingTurn, context_chars: int) -> Opening:
    """Open the turn of ``row`` (its user message), as ``open_turn`` of a memory with
    default settings would, and render its context block within ``context_chars``.

    Raises what the user store raises (``IdempotencyMismatchError`` for a turn id stored
    before with another message); the reads after it are best-effort, as the engine's.
    """
    conv = row.conversation_id
    text = check_text("user_message", row.user_message)
    keys = turn_keys(conv, row.turn_id)
    model = check_model(row.model)
    identifiers = extract(text, None, DEFAULT_MAX_IDENTIFIERS)
    entering = Entering(
        TurnMachine(ConversationSettings(platform=harness), None),
        Prompt(keys, text, model=model),
        run=RunFields(started_at=started_at(keys)),
        retrieved=EMPTY_RETRIEVAL,
    )
    drive(file, entering.store(), _store_result)
    # As Phases.enter: an answer it could not align is asked by name instead.
    user_message_id = drive(file, entering.open()).user_message_id
    history = _history(file, conv, row.turn_id)
    retrieved = retrieve_now(
        lambda what, by, kind, limit: _lookup(file, what, by, kind, limit),
        identifiers,
        limit=DEFAULT_RETRIEVAL_LIMIT,
        lookup_limit=DEFAULT_LOOKUP_LIMIT,
        threshold=DEFAULT_LINK_THRESHOLD,
        text=text,
        recent=recent_entities(history),
    )
    context = render_context(retrieved.entities, history, max_chars=context_chars)
    return Opening(user_message_id, retrieved.ids, context)


def _store_result(stored: Stored) -> StoreResult:
    # The user store's answer, read as the engine reads it (what it wrote, and whether the
    # turn was open before).
    return StoreResult.from_json(stored.raw, request_entities=stored.request_entities)


def _history(file: EmbeddedFile, conv: str, before: str) -> tuple[HistoryTurn, ...]:
    """``Phases.history``: the last turns before this one; best-effort (a failed read: none)."""

    def page(entity_id: str, limit: int, bound: str | None) -> RecentConversation:
        body = present(entity_id=entity_id, limit=limit, before=bound)
        raw = _connect.run(file.conn, recent_conversation, body, writes=False)
        return RecentConversation.from_json(raw)

    try:
        turns = read_history_now(page, conv, limit=DEFAULT_HISTORY_TURNS, before=before)
    except Exception:
        return ()
    return turns or ()


def _lookup(
    file: EmbeddedFile, what: str, by: str | None, kind: str | None, limit: int
) -> LookupResult:
    # The body RestActions.retrieve_entity_by_identifier sends.
    body = present(identifier=what, entity_type=kind, by=by, limit=limit)
    return LookupResult.from_json(
        _connect.run(file.conn, retrieve_entity_by_identifier, body, writes=False)
    )
