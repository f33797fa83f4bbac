"""``TurnState`` and ``TurnResult``: where a turn is in its life, and what a finished one
stored; :func:`finish` builds every result (and logs the turn's ``turn.*`` event).

Shared by the turn object (``_turn``) and the explicit API (``_memory``), which both end
turns through :func:`finish`.
"""

from __future__ import annotations

import enum
import warnings
from typing import Any

import attrs

from ._engine.closing import close_failure as close_failure
from ._engine.phase_records import CloseOutcome, Ending, EnterAttempt
from ._recall.retrieval import RetrievalStats, Retrieved
from ._records.tools import ToolCall
from ._util.log import get_logger
from .exceptions import error_label
from .transport._base import Entity

__all__ = ["TurnResult", "TurnState", "close_failure", "finish", "finish_attempt"]

logger = get_logger()


class _States(enum.EnumMeta):
    # TurnState.CLOSED, the older name of COMPLETED, resolves with a DeprecationWarning.
    def __getattr__(cls, name: str) -> Any:
        if name == "CLOSED":
            warnings.warn(
                "TurnState.CLOSED is deprecated: use TurnState.COMPLETED",
                DeprecationWarning,
                stacklevel=2,
            )
            return cls.COMPLETED
        parent = getattr(enum.EnumMeta, "__getattr__", None)  # where 3.10 finds members
        if parent is None:
            raise AttributeError(name)
        return parent(cls, name)


class TurnState(str, enum.Enum, metaclass=_States):
    """Where a :class:`Turn` is in its life.

    A ``str`` enum whose values are the words the store, ``show`` and
    ``memory.history()`` use: ``TurnState.COMPLETED == "completed"``, and it prints as
    ``completed``. A turn that stored its reply is ``COMPLETED``, the store's word (the
    older name ``CLOSED`` still resolves, with a ``DeprecationWarning``).
    """

    #: created by ``memory.turn()``, not entered yet
    NEW = "new"
    #: entering: retrieval and the user store are running
    OPENING = "opening"
    #: the body is running; the reply can be written
    OPEN = "open"
    #: the closing store is running
    CLOSING = "closing"
    #: the reply is stored and the turn record says ``completed``
    COMPLETED = "completed"
    #: the body raised or was cancelled; the turn record says ``abandoned``
    ABANDONED = "abandoned"
    #: the turn could not be stored as planned: the user store failed (or the enter was
    #: cancelled), or the closing store failed
    FAILED = "failed"
    #: the body ended normally after :meth:`Turn.suspend`: nothing was stored on exit and the
    #: turn record still says ``open``, waiting for a later close of the same turn id
    SUSPENDED = "suspended"

    def __str__(self) -> str:
        # The word itself, on every Python (3.12 changed what format() of a str enum gives).
        return str(self.value)


@attrs.frozen
class TurnResult:
    """What a finished turn stored, and how it went (timings and counts are never stored).

    ``t.result`` after the ``async with`` block, or what ``close_turn`` / ``abandon_turn`` /
    ``record_turn`` return.

    **How the turn ended: read** ``status``. It is the one answer: a :class:`TurnState`,
    ``COMPLETED``, ``ABANDONED``, ``FAILED`` or ``SUSPENDED``. The other two are shorthands
    of it, never a second opinion: ``completed`` is ``status is TurnState.COMPLETED``, and
    ``stored_status`` is the word on the turn record in the store, for code that compares
    with what ``show`` or ``memory.history()`` print: ``status.value``, ``None`` when
    ``FAILED`` (nothing was written), and ``"completed"`` for the one case where they part,
    a re-run of a completed turn whose body failed (this run ``ABANDONED``, the stored
    turn kept as it was). ``queued`` says where the close is kept, not how the turn ended.
    Each field is documented where it is declared.
    """

    conversation_id: str
    turn_id: str
    #: the user message's ``turn_key`` (``{conversation_id}:{turn_id}``)
    turn_key: str
    #: how the turn ended: ``COMPLETED``, ``ABANDONED``, ``FAILED`` (the closing store
    #: failed; ``close_error`` holds why) or ``SUSPENDED`` (:meth:`Turn.suspend`: left open)
    status: TurnState
    #: what the turn record says in the store: ``"completed"``, ``"abandoned"``, ``"open"``
    #: (suspended), or ``None`` when the closing store failed
    stored_status: str | None
    #: the stored entities' ids, ``None`` where nothing was stored
    conversation_entity_id: str | None
    user_message_id: str | None
    #: ``None`` when nothing was replied (abandoned with an empty reply) or the store failed
    assistant_message_id: str | None
    turn_record_id: str | None
    #: the ids of what retrieval found, best match first (see :attr:`retrieved`)
    retrieved_ids: tuple[str, ...]
    #: the ids ``t.cite`` added
    cited_ids: tuple[str, ...]
    #: lookup counts and time of the turn's retrieval
    retrieval: RetrievalStats
    #: length of the stored reply (or partial reply), in characters
    reply_chars: int
    #: the class of the body's exception when the turn was abandoned (``module.Class``)
    error_class: str | None = None
    #: the closing store's failure, if it failed
    close_error: BaseException | None = attrs.field(default=None, eq=False)
    #: the closing store replayed an identical earlier one (the turn was run before)
    replayed: bool = False
    #: the server was unreachable, so the closing store was queued in the transport's outbox
    #: (``status`` and ``stored_status`` say what it will store once delivered; until then
    #: the turn still looks ``open`` on the server)
    queued: bool = False
    #: milliseconds of the enter phase, the body and the closing store (:attr:`total_ms`
    #: is their sum)
    open_ms: float = 0.0
    body_ms: float = 0.0
    close_ms: float = 0.0
    #: the retrieved entities themselves (type, name, snapshot), best match first
    retrieved: tuple[Entity, ...] = attrs.field(default=(), eq=False, repr=False)
    #: ids of the entities the reply produced (``t.remember``), written in the closing
    #: store, completed or abandoned
    produced_ids: tuple[str, ...] = ()
    #: which of :attr:`produced_ids` the closing store created (the others existed and were
    #: updated; a replayed or queued store created nothing)
    created_ids: tuple[str, ...] = ()
    #: the tool calls stored with the turn, ordered by ``invoked_at``
    tools: tuple[ToolCall, ...] = attrs.field(default=(), eq=False, repr=False)
    #: the ``tool_invocation`` entity ids of :attr:`tools`, in the same order
    tool_ids: tuple[str, ...] = ()

    @property
    def completed(self) -> bool:
        """True when both messages are stored and the turn record says ``completed``."""
        return self.status is TurnState.COMPLETED

    @property
    def total_ms(self) -> float:
        """Wall time from enter to the end of the closing store."""
        return self.open_ms + self.body_ms + self.close_ms


def finish(
    ending: Ending,
    retrieved: Retrieved,
    outcome: CloseOutcome | None,
    *,
    close_error: BaseException | None = None,
    open_ms: float = 0.0,
    body_ms: float = 0.0,
    close_ms: float = 0.0,
) -> TurnResult:
    """The one place a :class:`TurnResult` is built, and its ``turn.*`` event logged.

    ``ending`` says what the turn meant to end as (completed or abandoned); without an
    ``outcome`` (the closing store failed) it is ``FAILED``. Ids the store did not give are
    ``None``.
    """
    opened = ending.opened
    keys = opened.keys
    state = TurnState.COMPLETED if ending.status == "completed" else TurnState.ABANDONED
    tools = ending.tools
    result = TurnResult(
        conversation_id=keys.conversation_id,
        turn_id=keys.turn_id,
        turn_key=keys.user_turn_key,
        status=state if outcome is not None else TurnState.FAILED,
        stored_status=None if outcome is None else outcome.stored_status,
        conversation_entity_id=opened.conversation_entity_id or None,
        user_message_id=opened.user_message_id or None,
        assistant_message_id=None if outcome is None else outcome.assistant_message_id,
        turn_record_id=(outcome.turn_record_id if outcome else None) or opened.turn_record_id,
        retrieved_ids=retrieved.ids,
        retrieved=retrieved.entities,
        cited_ids=ending.cited_ids,
        retrieval=retrieved.stats,
        reply_chars=len(ending.reply),
        error_class=ending.error_class,
        close_error=close_error,
        replayed=False if outcome is None else outcome.replayed,
        produced_ids=() if outcome is None else outcome.produced_ids,
        created_ids=() if outcome is None else outcome.created_ids,
        tools=tools if outcome is None or outcome.stored_tools is None else outcome.stored_tools,
        tool_ids=() if outcome is None else outcome.tool_ids,
        queued=False if outcome is None else outcome.queued,
        open_ms=open_ms,
        body_ms=body_ms,
        close_ms=close_ms,
    )
    _log_close(result)
    return result


def finish_attempt(attempt: EnterAttempt, open_ms: float) -> TurnResult:
    """The result of an enter that did not open but closed the turn as abandoned."""
    assert attempt.opened is not None
    retrieved = attempt.retrieved
    ending = Ending(attempt.opened, "abandoned", "", retrieved.ids, error_class=attempt.error_class)
    return finish(
        ending, retrieved, attempt.outcome, close_error=attempt.close_error, open_ms=open_ms
    )


def _log_close(result: TurnResult) -> None:
    completed = result.status is TurnState.COMPLETED
    if completed and not logger.enabled():
        return  # nothing would take the INFO event: its fields are not built
    fields = {
        "assistant_message_id": result.assistant_message_id,
        "reply_chars": result.reply_chars,
        "retrieved": len(result.retrieved_ids),
        "cited": len(result.cited_ids),
        "tools": len(result.tools),
        "replayed": result.replayed,
        "queued": result.queued,
        "open_ms": round(result.open_ms, 3),
        "body_ms": round(result.body_ms, 3),
        "close_ms": round(result.close_ms, 3),
    }
    # The levels follow the documented rule ("Log levels"): a stop, a queued close and a
    # body's error (raised to the caller) are normal outcomes, INFO; only a close that
    # failed, so the turn is not stored as it ended, is above it.
    if completed:
        logger.info("turn.closed", **fields)
    elif result.status is TurnState.ABANDONED:
        logger.info("turn.abandoned", error_class=result.error_class, **fields)
    else:
        logger.error(
            "turn.close_failed",
            error_class=result.error_class,
            close_error_class=type(result.close_error).__name__,
            close_error=error_label(result.close_error) if result.close_error else None,
            **fields,
        )
