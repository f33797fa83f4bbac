"""The records of a turn's phases, in the order a turn meets them, and what a failed enter
leaves.

:class:`Prompt` (what a turn opens with), :class:`Opened` (what the enter store wrote),
:class:`Ending` (how the turn ends: what its closing store is to write),
:class:`CloseOutcome` (what a closing store wrote) and :class:`EnterAttempt` (an enter that
did not open). Each is built once, where its phase decides it, and passed whole: the turn
(``_turn``), the explicit API (``_memory``), the async driver (``_phases``), the turn
machine (``_engine``), the hooks' driver (``hooks._embedded*``) and the results
(``_turn_result``) read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from .._records.keys import TurnKeys

if TYPE_CHECKING:
    from .._recall.retrieval import Retrieved
    from .._records.payloads import Produced
    from .._records.tools import ToolCall

__all__ = ["CloseOutcome", "Ending", "EnterAttempt", "Opened", "Prompt", "unopened"]


# Plain records, not attrs: a coding-agent hook (a fresh process per event) builds Opened to
# open a turn and Ending to close one, and none of them validates anything.


class Prompt(NamedTuple):
    """What a turn opens with: the user message and what its user store writes beside it.

    Checked and built once, before any I/O (``NeotomaMemory._prepare``, a hook's prompt),
    and passed whole to the turn, the enter (``Phases.enter``), the machine's ``Entering``
    and the user store's payload.
    """

    keys: TurnKeys
    #: the exact user text
    user_message: str
    turn_number: int | None = None
    #: extra fields of the user message (checked: none of the protocol's own)
    user_extra: Mapping[str, Any] | None = None
    #: the model that answers (stored on the turn record)
    model: str | None = None


class Opened(NamedTuple):
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


class Ending(NamedTuple):
    """How a turn ends: everything its closing store writes but the run fields (the clock's
    readings, which the driver takes when it stores).

    Built once, where the turn ends (``Turn``'s exit, ``close_turn`` / ``abandon_turn``, a
    failed enter, a hook's stop), and passed whole to the closing phase, the turn machine,
    the payload builders and the result. Immutable, and a plain record as the others here
    (a hook's process builds it, and an attrs class costs it ~3 ms to define).
    """

    #: what the enter store wrote (or, for a turn opened elsewhere, what is known of it)
    opened: Opened
    #: ``completed`` (the reply is whole) or ``abandoned``
    status: Literal["completed", "abandoned"]
    #: the exact reply; for an abandoned turn, what the user saw of it (may be empty)
    reply: str
    #: the ids retrieval linked (the user message's and the reply's REFERS_TO)
    retrieved_ids: tuple[str, ...] = ()
    #: the ids the reply cites
    cited_ids: tuple[str, ...] = ()
    #: the entities the reply produced (``t.remember``), written in the closing store
    produced: tuple[Produced, ...] = ()
    #: the tool calls the turn made, written in the closing store
    tools: tuple[ToolCall, ...] = ()
    #: the exception class of an abandoned turn
    error_class: str | None = None
    #: the model that answered (stored on the turn record)
    model: str | None = None
    #: the characters of the context the turn rendered (a run field)
    context_chars: int | None = None

    @property
    def keys(self) -> TurnKeys:
        """The turn's keys."""
        return self.opened.keys

    @property
    def phase(self) -> Literal["assistant", "abandoned"]:
        """The closing store's phase (its idempotency key's)."""
        return "assistant" if self.status == "completed" else "abandoned"


class CloseOutcome(NamedTuple):
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
    #: the calls with the clock readings the store keeps, when a re-run took an earlier
    #: run's (``None``: as the turn recorded them)
    stored_tools: tuple[ToolCall, ...] | None = None


class EnterAttempt:
    """What an enter phase that did not open left in the store.

    Set when the user store may have been written and the turn was therefore closed as
    abandoned (or that failed too): the caller builds the turn's result from it.
    """

    __slots__ = ("close_error", "closed", "error_class", "opened", "outcome", "retrieved")

    def __init__(
        self,
        closed: bool = False,
        opened: Opened | None = None,
        outcome: CloseOutcome | None = None,
        retrieved: Retrieved | None = None,
        error_class: str | None = None,
        close_error: Exception | None = None,
    ) -> None:
        self.closed = closed
        self.opened = opened
        self.outcome = outcome
        self.retrieved: Retrieved = _empty_retrieval() if retrieved is None else retrieved
        self.error_class = error_class
        self.close_error = close_error

    def __repr__(self) -> str:
        return (
            f"EnterAttempt(closed={self.closed!r}, opened={self.opened!r}, "
            f"outcome={self.outcome!r}, error_class={self.error_class!r})"
        )


def _empty_retrieval() -> Retrieved:
    # Imported here: a hook process that closes a turn reads Opened and never retrieves.
    from .._recall.retrieval import EMPTY_RETRIEVAL

    return EMPTY_RETRIEVAL


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
