"""The turn machine: the decisions of a turn's stores, as steps that yield requests.

Every store of a turn goes through :meth:`TurnMachine.store` (the outbox hints, the
mismatch reworded for the turn), and every phase through :meth:`TurnMachine.store_phase`:
a store refused as a mismatch may be a re-run of a phase that landed, whose run fields
(clock readings, what retrieval found) differ; then the turn record's observations are read
(one request, only then), and the payload is sent again with an earlier run's fields: a
replay. The closing (:meth:`TurnMachine.close`, of a turn's
:class:`~neotoma_agent._engine.phase_records.Ending`) writes the reply or the abandonment; a
closing store whose tool calls ran again takes the readings the earlier run stored
(:mod:`.rerun`). The enter (:class:`Entering`) decides whether retrieval runs before its
user store, builds the store, and reads what it wrote off the answer; an
enter that fails once its store may have been issued is closed as abandoned.

Payloads come from the pure builders of ``_records.payloads`` and ``_engine.closing``, of the turn's
records (``_engine.phase_records``: the :class:`~neotoma_agent._engine.phase_records.Prompt` it
opens with, the ``Ending`` it closes with); the run fields come in as arguments (the driver reads
the clock). A hook opening a turn on a store file runs the same :class:`Entering`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._records.keys import TurnKeys, turn_record_entity_id
from .._records.payloads import (
    ConversationSettings,
    Produced,
    RunFields,
    StorePayload,
    user_payload,
)
from .._util.log import get_logger
from ..exceptions import APIError, IdempotencyMismatchError, ServerError
from .closing import (
    MAX_RERUN_TRIES,
    ClosingBuild,
    closing_builder,
    content_key,
    matching_runs,
    mismatch,
    named,
    tool_entities,
)
from .phase_records import CloseOutcome, Ending, Opened, Prompt
from .requests import Lookup, Machine, Observations, Store, ToolObservations

if TYPE_CHECKING:
    from .._recall.history import HistoryTurn
    from .._recall.retrieval import Retrieved
    from .._records.tool_payload import ToolPayloads
    from .._records.tools import ToolCall
    from ..transport._results import StoreResult

__all__ = [
    "DEFERRABLE",
    "Closing",
    "EnterState",
    "Entering",
    "TurnMachine",
    "assistant_id",
    "created",
    "entry_id",
    "may_have_written",
    "opened_from",
    "tool_ids",
]

logger = get_logger()

#: The closing phases: a transport with an outbox may queue these on a transient failure.
#: The enter stays store-first (never queued), and so does a whole-turn import.
DEFERRABLE: Final = frozenset({"assistant", "abandoned"})

#: What a closing store got: the store's answer, the payload that got it, and the calls
#: with the clock readings an earlier run stored (``None``: as the turn recorded them).
Closing = tuple["StoreResult", StorePayload, "list[ToolCall] | None"]

#: A closing phase's builder, given its calls' request elements.
BuildWith = Callable[[Sequence[Mapping[str, Any]]], ClosingBuild]


class TurnMachine(NamedTuple):
    """The decisions of one conversation's turn stores (sans I/O: see :mod:`._engine`)."""

    #: what every payload of the conversation shares
    conversation: ConversationSettings
    #: what a stored tool call keeps (built, and so checked, once); ``None`` for a turn
    #: without calls (a hook's, which then loads no tool payloads)
    tool_payloads: ToolPayloads | None
    #: the store's tenant, which the ids it derives carry (``None``: none)
    tenant: str | None = None

    def store(self, payload: StorePayload, keys: TurnKeys, phase: str) -> Machine[StoreResult]:
        """One store; a mismatch is raised as this turn's (what differs, the revision hint).

        A queued store's result says so (``queued``) and holds the ids the server will give.
        """
        request = Store(payload, phase, keys.folded[0], phase in DEFERRABLE)
        try:
            stored: StoreResult = yield request
        except IdempotencyMismatchError as exc:
            raise mismatch(keys, payload, phase, exc) from exc
        return stored

    def store_phase(
        self,
        payload: StorePayload,
        build: ClosingBuild,
        run: RunFields,
        keys: TurnKeys,
        phase: str,
    ) -> Machine[tuple[StoreResult, StorePayload]]:
        """Store ``payload`` (``build(run)``); a re-run whose only difference is ``run``
        replays: on a mismatch, the turn record's observations are read, the ones this
        phase wrote earlier found (same fields but for the run fields, newest first), and
        the payload sent again with their values. If none matches, the mismatch stands."""
        try:
            return (yield from self.store(payload, keys, phase)), payload
        except IdempotencyMismatchError as refused:
            for earlier in (yield from _earlier_runs(keys, build, run, self.tenant)):
                again = build(earlier)
                try:
                    return (yield from self.store(again, keys, phase)), again
                except IdempotencyMismatchError:
                    continue
            raise refused from None

    def tool_entities(self, keys: TurnKeys, tools: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """The ``tool_invocation`` request elements of a turn's calls (capped, redacted)."""
        if not tools:
            return []
        assert self.tool_payloads is not None, "a turn with tool calls needs tool_payloads"
        return tool_entities(self.conversation, self.tool_payloads, keys, tools)

    def closing(
        self,
        keys: TurnKeys,
        phase: str,
        run: RunFields,
        tools: Sequence[ToolCall],
        build_with: BuildWith,
    ) -> Machine[Closing]:
        """:meth:`store_phase` for a closing store, whose calls' clock readings are run
        values too; with the calls as stored when they took an earlier run's readings.

        A re-run's calls ran again at other times: on a mismatch, the calls an earlier run
        stored are read (only then), and if they are this run's but for their readings
        (:func:`calls_as_stored`), their readings are sent.
        """
        elements = self.tool_entities(keys, tools)
        build = build_with(elements)
        try:
            stored, payload = yield from self.store_phase(build(run), build, run, keys, phase)
            return stored, payload, None
        except IdempotencyMismatchError as mismatch:
            if not tools:
                raise
            refused = mismatch
        record_id = turn_record_entity_id(keys.conversation_id, keys.turn_id, self.tenant)
        try:
            found = yield ToolObservations(record_id)
        except Exception as exc:  # the mismatch is what the caller will see
            logger.info("turn.rerun_read_failed", error=type(exc).__name__)
            found = []
        from .rerun import calls_as_stored  # only a re-run whose calls ran again gets here

        for earlier in calls_as_stored(found, tools, elements, MAX_RERUN_TRIES):
            build = build_with(self.tool_entities(keys, earlier))
            try:
                stored, payload = yield from self.store_phase(build(run), build, run, keys, phase)
            except IdempotencyMismatchError:
                continue
            return stored, payload, earlier
        raise refused

    def close(self, ending: Ending, run: RunFields) -> Machine[CloseOutcome]:
        """The closing store of ``ending`` and what it wrote: a completed turn's reply, its
        edges and the record ``completed``; or the record ``abandoned``, the partial reply
        the user saw and what the turn produced and called, but never over a completed
        turn."""
        opened = ending.opened
        if ending.status == "abandoned" and opened.prior_status == "completed":
            # This turn id was completed by an earlier run; a failed re-run must not overwrite
            # the stored reply with a partial one or flip the record back to abandoned.
            # Nothing is lost: the stored completed turn stays as it was.
            logger.info(
                "turn.abandon_skipped",
                reason="turn already completed",
                error_class=ending.error_class,
            )
            return CloseOutcome("completed", None, opened.turn_record_id, replayed=True)
        stored, payload, retimed = yield from self.close_store(ending, run)
        return closed(ending.status, stored, payload, ending.produced, retimed)

    def close_store(self, ending: Ending, run: RunFields) -> Machine[Closing]:
        """:meth:`close`'s store: the store's answer, the payload that got it, and the calls
        with the readings an earlier run stored (``None``: as given). An abandonment goes
        under the phase's key, or, when an earlier run of the turn was abandoned
        differently, under its content key."""
        keys, tools, conversation = ending.keys, ending.tools, self.conversation
        phase = ending.phase

        def keyed(key: str | None) -> BuildWith:
            def build_with(elements: Sequence[Mapping[str, Any]]) -> ClosingBuild:
                build = closing_builder(conversation, ending, elements)
                return lambda fields: build(fields, key)

            return build_with

        try:
            return (yield from self.closing(keys, phase, run, tools, keyed(None)))
        except IdempotencyMismatchError:
            if ending.status == "completed":
                raise
            # An earlier run of this turn id was abandoned differently (another error or
            # partial reply). Both happened: record this one under a key derived from its
            # own content (the run fields left out), which still collapses an identical retry.
            elements = self.tool_entities(keys, tools)
            key = content_key(keys, closing_builder(conversation, ending, elements))
            return (yield from self.closing(keys, phase, run, tools, keyed(key)))

    def find(self, key: str, entity_type: str) -> Machine[str | None]:
        """The id of the ``entity_type`` whose schema-rule name is ``{entity_type}:{key}``.

        Without an entity_type the server matches the raw key as a substring of canonical
        names (with one it would strip the key's punctuation first); keep the exact name.
        """
        found: Sequence[tuple[str, str | None]] = yield Lookup(key, 100)
        for entity_id, canonical_name in found:
            if named(canonical_name, key, entity_type):
                return entity_id
        return None


def _earlier_runs(
    keys: TurnKeys, build: ClosingBuild, run: RunFields, tenant: str | None
) -> Machine[list[RunFields]]:
    # The run fields of the observations this phase's earlier runs left on the turn
    # record: those equal to what this run sends but for them.
    record_id = turn_record_entity_id(keys.conversation_id, keys.turn_id, tenant)
    try:
        observations: Sequence[Mapping[str, Any]] = yield Observations(record_id)
    except Exception as exc:  # the mismatch is what the caller will see
        # The caller gets the mismatch error; logging it at WARNING too would say it twice.
        logger.info("turn.rerun_read_failed", error=type(exc).__name__)
        return []
    return matching_runs(observations, build, run)


# ------------------------------------------------------------------ what a store wrote


def entry_id(result: StoreResult, index: int | None, entity_type: str) -> str | None:
    """The id of request element ``index`` in the store's answer (``None``: not there)."""
    if index is None:
        return None
    try:
        return result.entity_id(index)
    except IndexError:
        # A replay the transport could not align: each type occurs once per payload.
        matches = [e.entity_id for e in result.entities if e.entity_type == entity_type]
        return matches[0] if len(matches) == 1 else None


def created(stored: StoreResult, index: int | None) -> bool:
    """Whether the store created the entity of request element ``index`` (a replay:
    unknown, so no)."""
    if index is None or stored.replayed:
        return False
    return any(e.observation_index == index and e.action == "created" for e in stored.entities)


def assistant_id(stored: StoreResult, payload: StorePayload) -> str | None:
    """The assistant message's id in the store's answer (``None``: the payload has none)."""
    if payload.assistant_index is None:
        return None
    if payload.user_index is None:
        return entry_id(stored, payload.assistant_index, "conversation_message")
    # Two messages in one payload: only the index (or the aligned replay) tells them apart.
    try:
        return stored.entity_id(payload.assistant_index)
    except IndexError:
        return None


def closed(
    status: str,
    stored: StoreResult,
    payload: StorePayload,
    produced: Sequence[Produced],
    retimed: Sequence[ToolCall] | None = None,
) -> CloseOutcome:
    """What a closing store wrote, read off its answer (or the ids a queued one will get)."""
    produced_ids = _produced_ids(stored, payload, produced)
    return CloseOutcome(
        stored_status=status,
        assistant_message_id=assistant_id(stored, payload),
        turn_record_id=entry_id(stored, payload.turn_record_index, "conversation_turn"),
        replayed=stored.replayed,
        produced_ids=produced_ids,
        queued=stored.queued,
        tool_ids=tool_ids(stored, payload),
        created_ids=tuple(
            entity_id
            for entity_id, index in zip(produced_ids, payload.produced_indexes, strict=True)
            if created(stored, index)
        ),
        stored_tools=None if retimed is None else tuple(retimed),
    )


def _produced_ids(
    stored: StoreResult, payload: StorePayload, produced: Sequence[Produced]
) -> tuple[str, ...]:
    # The store's word where it aligned the answer; else the id computed when produced.
    ids = []
    for index, item in zip(payload.produced_indexes, produced, strict=True):
        try:
            ids.append(stored.entity_id(index))
        except IndexError:
            ids.append(item.entity_id)
    return tuple(ids)


def tool_ids(stored: StoreResult, payload: StorePayload) -> tuple[str, ...]:
    """The ids of the payload's tool calls: the store's word where it aligned the answer;
    else (a replay) the id the identity rules give (turn key, tool name and invoked_at: a
    schema rule, so exact)."""
    ids = []
    for index in payload.tool_indexes:
        try:
            ids.append(stored.entity_id(index))
        except IndexError:
            from ..transport._results import expected_entity  # a replay not aligned

            expected = expected_entity(payload.entities[index], index)
            if expected is not None:
                ids.append(expected.entity_id)
    return tuple(ids)


# ------------------------------------------------------------------ the enter


def may_have_written(error: BaseException) -> bool:
    """Whether a store that ended in ``error`` may still have been applied.

    A refusal (4xx, 429) wrote nothing; a lost answer, a timeout, a 5xx or a cancellation of
    the caller may come after the store committed.
    """
    return not isinstance(error, APIError) or isinstance(error, ServerError)


def _entry_snapshot(result: StoreResult, index: int, entity_type: str) -> Mapping[str, Any]:
    for e in result.entities:
        if e.observation_index == index or (
            e.observation_index is None and e.entity_type == entity_type
        ):
            return e.snapshot or {}
    return {}


def opened_from(
    keys: TurnKeys, turn_number: int | None, stored: StoreResult, request: StorePayload
) -> Opened:
    """What the user store ``request`` wrote, read off the store's answer ``stored``."""
    record_index = request.turn_record_index
    prior = _entry_snapshot(stored, record_index, "conversation_turn").get("status")
    started = request.entities[record_index].get("started_at")
    return Opened(
        keys=keys,
        turn_number=turn_number,
        user_message_id=entry_id(stored, request.user_index, "conversation_message") or "",
        conversation_entity_id=entry_id(stored, request.conversation_index, "conversation") or "",
        turn_record_id=entry_id(stored, record_index, "conversation_turn"),
        replayed=stored.replayed,
        prior_status=prior if stored.replayed and isinstance(prior, str) else None,
        started_at=started if isinstance(started, str) else None,
        started_conversation=created(stored, request.conversation_index),
    )


class EnterState(enum.Enum):
    """Where an enter's user store is::

        NEW ──store()──► ISSUED ──answer──► STORED ──open()──► (the turn is open)
                            │                  │
                            └──── reopen() ◄───┘  (a failure: what to abandon)

    From ``ISSUED`` on, the store may have been written whatever happens next.
    """

    #: not sent yet: retrieval's ids may still ride on it, a failure wrote nothing
    NEW = "new"
    #: sent; its answer may never come (a lost answer, a cancellation)
    ISSUED = "issued"
    #: answered: :attr:`Entering.stored` holds the answer
    STORED = "stored"


class Entering:
    """One turn's enter: what it decides and what it learns (see the module).

    The driver sets :attr:`retrieved` (through :meth:`found`) and :attr:`history` as its
    reads answer, and runs :meth:`store`, :meth:`open` and, on a failure after the store
    was issued (:meth:`must_abandon`), :meth:`reopen`. Its :attr:`state` says where the
    user store is (:class:`EnterState`); a step taken out of turn raises ``RuntimeError``.
    """

    __slots__ = (
        "_machine",
        "_run",
        "history",
        "keys",
        "prompt",
        "request",
        "retrieved",
        "sequential",
        "state",
        "stored",
        "turn_number",
    )

    def __init__(
        self, machine: TurnMachine, prompt: Prompt, *, run: RunFields, retrieved: Retrieved
    ) -> None:
        self._machine = machine
        self._run = run
        #: what the turn opens with
        self.prompt = prompt
        self.keys = prompt.keys
        self.turn_number = prompt.turn_number
        #: the user store's payload: REFERS_TO nothing until retrieval says otherwise, and
        #: an earlier run's when the store replayed one
        self.request = self._payload((), run)
        #: what retrieval found (empty until it answers, or if it never does)
        self.retrieved = retrieved
        #: the history read's turns (none until it answers)
        self.history: tuple[HistoryTurn, ...] = ()
        #: retrieval runs before the store, not beside it (see :meth:`plan`)
        self.sequential = False
        self.state = EnterState.NEW
        #: the store's answer, once it came
        self.stored: StoreResult | None = None

    def _payload(self, refers_to: Sequence[str], fields: RunFields) -> StorePayload:
        # The user store's payload, given the ids it REFERS_TO and the run fields.
        prompt = self.prompt
        return user_payload(
            self._machine.conversation,
            prompt.keys,
            prompt.user_message,
            turn_number=prompt.turn_number,
            user_extra=prompt.user_extra,
            refers_to=refers_to,
            model=prompt.model,
            run=fields,
        )

    def plan(
        self,
        identifiers: Sequence[str],
        *,
        recency: bool,
        retriever: bool,
        loose: bool,
        refers_to_on_enter: bool,
    ) -> None:
        """Decide whether retrieval runs before the store: when the user message's
        REFERS_TO edges ride on it (``refers_to_on_enter``, one more round trip), or when
        retrieval has nothing to do, so that it answers at once: no ``identifiers``, no
        ``recency`` (the history read's entities), no application ``retriever``, and
        (``loose``: the default extractor's) no other word to look up."""
        idle = not identifiers and not recency and not retriever
        if idle and loose:
            from .._recall.loose import loose_words  # here: a closing step never plans

            words = loose_words(self.prompt.user_message, identifiers)
            idle = not words.lookups and not words.people
        self.sequential = refers_to_on_enter or idle

    def found(self, retrieved: Retrieved) -> None:
        """Retrieval answered: before the store (sequential), its ids ride on it."""
        self.retrieved = retrieved
        if self.sequential and self.state is EnterState.NEW and retrieved.ids:
            self.request = self._payload(retrieved.ids, self._run)

    def store(self) -> Machine[StoreResult]:
        """The user store (``NEW`` → ``ISSUED`` → ``STORED``); a re-run whose only
        difference is its run fields replays."""
        self._expect(EnterState.NEW, "send the user store")
        self.state = EnterState.ISSUED
        refers_to = self.retrieved.ids if self.sequential else ()
        payload = self._payload
        stored, self.request = yield from self._machine.store_phase(
            self.request, lambda fields: payload(refers_to, fields), self._run, self.keys, "user"
        )
        self.stored, self.state = stored, EnterState.STORED
        return stored

    def open(self) -> Machine[Opened]:
        """What the user store wrote (``STORED`` only); ids the answer could not be aligned
        to are asked of the store by name."""
        self._expect(EnterState.STORED, "open the turn")
        assert self.stored is not None
        opened = opened_from(self.keys, self.turn_number, self.stored, self.request)
        if not opened.user_message_id or not opened.conversation_entity_id:
            find = self._machine.find
            opened = opened._replace(
                user_message_id=opened.user_message_id
                or (yield from find(self.keys.user_turn_key, "conversation_message"))
                or "",
                conversation_entity_id=opened.conversation_entity_id
                or (yield from find(self.keys.conversation_id, "conversation"))
                or "",
            )
        return opened

    def must_abandon(self, error: BaseException) -> bool:
        """Whether an enter that failed with ``error`` may have written the user message,
        so that the turn is closed as abandoned before the error goes on."""
        return self.state is not EnterState.NEW and may_have_written(error)

    def reopen(self) -> Machine[Opened]:
        """What the user store wrote, for the abandoned store of a failed enter.

        Without the store's answer the user store is sent again under its own key first: a
        replay if it had committed (no second observation), else it writes the message now,
        and either way the abandoned record cannot be overtaken by a late original.
        """
        if self.state is EnterState.NEW:
            raise RuntimeError("cannot reopen an enter whose user store was never sent")
        stored = self.stored
        if stored is None:
            stored = yield from self._machine.store(self.request, self.keys, "user")
        return opened_from(self.keys, self.turn_number, stored, self.request)

    def _expect(self, state: EnterState, action: str) -> None:
        if self.state is not state:
            raise RuntimeError(f"cannot {action}: the enter's user store is {self.state.value}")
