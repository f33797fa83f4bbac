"""REST request bodies that are plain data: built without the typed results.

The transports (``_rest``) and the synchronous driver on a store file (``embedded._turns``)
send the same ``POST /store`` body, built here. :class:`StoreOptions` states the keyword
arguments of ``Transport.store`` once: the protocol, every implementation and
:func:`store_body` take them as ``**options: Unpack[StoreOptions]``; likewise
:class:`ConversationWindow` for ``recent_conversation``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from .._util.signature import check_options
from ._spliced import EncodedEntity

if sys.version_info >= (3, 11):
    from typing import Required, TypedDict, Unpack
else:  # the TypedDict that reads Required
    from typing_extensions import Required, TypedDict, Unpack

__all__ = [
    "STORE_DEFAULTS",
    "WINDOW_DEFAULTS",
    "ConversationWindow",
    "StoreOptions",
    "present",
    "store_body",
    "window_query",
]


class StoreOptions(TypedDict, total=False):
    """The keyword arguments of ``Transport.store`` (and of :func:`store_body`)."""

    idempotency_key: Required[str]
    """The store's key: the same key with the same body is a replay (the result has
    ``replayed=True``, nothing is written); with a different body it raises
    :class:`~neotoma_agent.IdempotencyMismatchError`."""
    relationships: Sequence[Mapping[str, Any]]
    """Edges to write with the entities (default: none):
    ``{"relationship_type": "REFERS_TO", "source_index": 0, "target_index": 1}``, where an
    end is ``*_index`` (an entity of this request) or ``*_entity_id`` (an existing id)."""
    source_priority: int | None
    """Tags the observations with a merge order (default: the store's)."""
    observation_source: str | None
    """Tags the observations with their provenance (default: none)."""
    strict: bool
    """Refuse to merge into an existing entity matched by a heuristic name rule
    (``ERR_MERGE_REFUSED``) instead of extending it (default ``False``)."""
    lane: str | None
    """A hint for a transport that may queue a store (an
    :class:`~neotoma_agent.OutboxTransport`), no part of the body: names an order (the turn
    engine passes the conversation id). Stores of one lane are made in the order they were
    issued, and one waits behind the lane's queued stores (default: none)."""
    deferrable: bool
    """A hint for a transport that may queue a store, no part of the body: a transient
    failure may queue this store instead of raising (the turn engine sets it on closing
    stores, never on the user store that opens a turn); the answer then has
    ``queued=True`` and the ids the server will give (default ``False``)."""


#: What each optional keyword of :class:`StoreOptions` is when a call leaves it out (what a
#: wrapper passes on for it: see ``_forward``).
STORE_DEFAULTS: Final[Mapping[str, object]] = MappingProxyType(
    {
        "relationships": (),
        "source_priority": None,
        "observation_source": None,
        "strict": False,
        "lane": None,
        "deferrable": False,
    }
)


class ConversationWindow(TypedDict, total=False):
    """The keyword arguments of ``ConversationReader.recent_conversation``: which of the
    conversation's messages to read, an extension the embedded store and the dev server
    honour (the answer's ``has_more`` is then set) and a real server ignores (it sends
    every message, in activity order)."""

    limit: int | None
    """The last ``limit`` messages in write order (default: every message)."""
    before: str | None
    """A message id: the messages written before it (default: up to the newest)."""


#: What each keyword of :class:`ConversationWindow` is when a call leaves it out.
WINDOW_DEFAULTS: Final[Mapping[str, object]] = MappingProxyType({"limit": None, "before": None})


def present(**fields: Any) -> dict[str, Any]:
    """A REST body of the fields that were given: ``None`` means absent, as a server reads it."""
    return {key: value for key, value in fields.items() if value is not None}


def store_body(
    entities: Sequence[Mapping[str, Any]], **options: Unpack[StoreOptions]
) -> dict[str, Any]:
    """The JSON body of ``POST /store`` that ``Transport.store(entities, **options)`` sends
    (the outbox keeps exactly this body); the hints ``lane`` and ``deferrable`` are no part
    of it.

    Raises :class:`TypeError` for a keyword it does not take, or without
    ``idempotency_key``, as a call to an explicit signature would.
    """
    check_options(options, StoreOptions, "store")
    if "idempotency_key" not in options:
        raise TypeError("store() missing required keyword argument: 'idempotency_key'")
    return present(
        # A copy of each element; one that kept its JSON text keeps it (see _spliced).
        entities=[e.copy() if type(e) is EncodedEntity else dict(e) for e in entities],
        relationships=[dict(r) for r in options.get("relationships", ())] or None,
        idempotency_key=options["idempotency_key"],
        source_priority=options.get("source_priority"),
        observation_source=options.get("observation_source"),
        strict=options.get("strict") or None,
    )


def window_query(**window: Unpack[ConversationWindow]) -> dict[str, Any]:
    """The query of ``GET /recent_conversations/{entity_id}`` that
    ``recent_conversation(entity_id, **window)`` sends; :class:`TypeError` for a keyword it
    does not take."""
    check_options(window, ConversationWindow, "recent_conversation")
    return present(limit=window.get("limit"), before=window.get("before"))
