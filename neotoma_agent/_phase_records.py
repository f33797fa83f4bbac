"""What the store phases of a turn return (``_phases``), and what a failed enter leaves.

:class:`Opened` (what the enter store wrote), :class:`CloseOutcome` (what a closing store
wrote) and :class:`EnterAttempt` (an enter that did not open); the turn (``_turn``), the
explicit API (``_memory``) and the results (``_turn_result``) read them.
"""

from __future__ import annotations

import attrs

from ._keys import TurnKeys
from ._retrieval import EMPTY_RETRIEVAL, Retrieved

__all__ = ["CloseOutcome", "EnterAttempt", "Opened", "error_class_name", "unopened"]


@attrs.frozen
class Opened:
    """What the enter store wrote (:class:`~neotoma_agent.OpenTurn` is the public view)."""

    keys: TurnKeys
    turn_number: int | None
    user_message_id: str
    conversation_entity_id: str
    turn_record_id: str | None
    #: the enter store replayed: this turn id was entered before
    replayed: bool
    #: the turn record's status before this run (known on a replay), e.g. ``completed``
    prior_status: str | None
    #: the ``started_at`` the user store wrote on the turn record
    started_at: str | None = None
    #: the user store created the conversation entity: this turn started the conversation
    started_conversation: bool = False


def error_class_name(exc: BaseException) -> str:
    """``ValueError`` for builtins, ``module.QualName`` for everything else."""
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


@attrs.frozen
class CloseOutcome:
    """What a closing store (completed or abandoned) wrote."""

    stored_status: str | None
    assistant_message_id: str | None
    turn_record_id: str | None
    replayed: bool
    #: the ids the store gave the produced entities (``t.remember``), in order
    produced_ids: tuple[str, ...] = ()
    #: the transport queued the store in its outbox (the server was unreachable); the ids
    #: are the ones the server will give it
    queued: bool = False
    #: the ids the store gave the tool calls, in the order of ``tools``
    tool_ids: tuple[str, ...] = ()
    #: which of ``produced_ids`` this store created (the rest existed and were updated;
    #: a replay or a queued store created nothing this time)
    created_ids: tuple[str, ...] = ()


@attrs.define
class EnterAttempt:
    """What an enter phase that did not open left in the store.

    Set when the user store may have been written and the turn was therefore closed as
    abandoned (or that failed too): the caller builds the turn's result from it.
    """

    closed: bool = False
    opened: Opened | None = None
    outcome: CloseOutcome | None = None
    retrieved: Retrieved = EMPTY_RETRIEVAL
    error_class: str | None = None
    close_error: Exception | None = None


def unopened(keys: TurnKeys, turn_number: int | None) -> Opened:
    # A turn whose user store answer never arrived: nothing known but its keys.
    return Opened(
        keys=keys,
        turn_number=turn_number,
        user_message_id="",
        conversation_entity_id="",
        turn_record_id=None,
        replayed=False,
        prior_status=None,
    )
