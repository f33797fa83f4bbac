"""``NeotomaMemory``: one conversation's settings and the store phases of its turns.

Every way of recording a turn goes through the same three phases, so they leave the same
graph in the store:

- enter: bounded retrieval and one user store (conversation, user message, turn record
  ``open``, PART_OF), concurrently;
- complete: one closing store (assistant message, PART_OF, REFERS_TO, turn record
  ``completed``);
- abandon: one closing store (turn record ``abandoned``, the user message's edges, and the
  partial reply if the user saw one).

``turn()`` wraps them in a context manager (:class:`~neotoma_agent.Turn`);
``open_turn`` / ``close_turn`` / ``abandon_turn`` expose them one call each, and
``record_turn`` writes a finished turn in a single store.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
import attrs
import structlog

from ._keys import (
    TurnKeys,
    new_turn_id,
    turn_keys,
    validate_conversation_id,
    validate_entity_id,
)
from ._log import get_logger
from ._payloads import (
    ConversationSettings,
    StorePayload,
    abandoned_payload,
    closing_payload,
    recorded_payload,
    user_payload,
    validate_user_extra,
)
from ._retrieval import EMPTY_RETRIEVAL, Extractor, RetrievalStats, Retrieved, extract, retrieve
from ._shield import Completion, raise_deferred, run_to_completion
from ._text import check_text
from ._turn import (
    Turn,
    TurnResult,
    TurnState,
    _CloseOutcome,
    _EnterAttempt,
    close_failure,
    error_class_name,
)
from .exceptions import APIError, IdempotencyMismatchError, ServerError
from .transport._base import Entity, StoreResult, Transport

__all__ = ["NeotomaMemory", "OpenTurn"]

logger = get_logger()

# Above this many characters, identifier extraction runs in a worker thread.
_INLINE_EXTRACT_CHARS = 8192


@attrs.frozen
class _Opened:
    """What the enter store wrote (internal; :class:`OpenTurn` is the public view)."""

    keys: TurnKeys
    turn_number: int | None
    user_message_id: str
    conversation_entity_id: str
    turn_record_id: str | None
    #: the enter store replayed: this turn id was entered before
    replayed: bool
    #: the turn record's status before this run (known on a replay), e.g. ``completed``
    prior_status: str | None


@attrs.frozen
class OpenTurn:
    """A turn opened with :meth:`NeotomaMemory.open_turn`, waiting for ``close_turn``."""

    conversation_id: str
    turn_id: str
    turn_key: str
    user_message: str
    user_message_id: str
    conversation_entity_id: str
    #: the bounded set retrieval found, best match first
    retrieved: tuple[Entity, ...]
    retrieval: RetrievalStats
    revision: int | None
    turn_number: int | None
    #: the enter store replayed (this turn id was opened before)
    replayed: bool
    _opened: _Opened = attrs.field(repr=False, eq=False)

    @property
    def retrieved_ids(self) -> tuple[str, ...]:
        """The entity ids of :attr:`retrieved`."""
        return tuple(e.id for e in self.retrieved)


def _positive(name: str) -> Any:
    def check(_: Any, __: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    return check


def _timeout(name: str, *, optional: bool) -> Any:
    def check(_: Any, __: Any, value: Any) -> None:
        if value is None and optional:
            return
        # `not value > 0` also refuses NaN.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not optional and math.isinf(value):
            # The closing store runs shielded; without a deadline it could hang shutdown.
            raise ValueError(f"{name} must be finite")

    return check


def _check_conversation_id(_: Any, __: Any, value: Any) -> None:
    validate_conversation_id(value)


def _check_turn_number(turn_number: object) -> int | None:
    if turn_number is None:
        return None
    if isinstance(turn_number, bool) or not isinstance(turn_number, int) or turn_number < 0:
        raise ValueError(f"turn_number must be an int >= 0, got {turn_number!r}")
    return turn_number


def _may_have_written(error: BaseException) -> bool:
    """Whether a store that ended in ``error`` may still have been applied.

    A refusal (4xx, 429) wrote nothing; a lost answer, a timeout, a 5xx or a cancellation of
    the caller may come after the store committed.
    """
    return not isinstance(error, APIError) or isinstance(error, ServerError)


def _entry_id(result: StoreResult, index: int | None, entity_type: str) -> str | None:
    if index is None:
        return None
    try:
        return result.entity_id(index)
    except IndexError:
        # A replay the transport could not align: each type occurs once per payload.
        matches = [e.entity_id for e in result.entities if e.entity_type == entity_type]
        return matches[0] if len(matches) == 1 else None


def _entry_snapshot(result: StoreResult, index: int, entity_type: str) -> Mapping[str, Any]:
    for e in result.entities:
        if e.observation_index == index or (
            e.observation_index is None and e.entity_type == entity_type
        ):
            return e.snapshot or {}
    return {}


@attrs.frozen
class NeotomaMemory:
    """Turn-protocol memory for one conversation, over any :class:`Transport`.

    ``async with memory.turn(user_message) as t:`` stores the user message before the body
    runs and the exact reply after it, wired to the entities the user named (bounded
    retrieval), exactly once per ``turn_id``, whatever the body does.

    Settings: ``retrieval_limit`` entities at most per turn, from at most
    ``max_identifiers`` identifiers (``extractor``, default
    :func:`~neotoma_agent.default_extractor`), looked up ``max_concurrency`` at a time
    within ``retrieval_timeout`` seconds, each lookup asking for up to ``lookup_limit``
    candidates. ``close_timeout`` bounds the closing store. ``refers_to_on_enter`` writes the
    user message's REFERS_TO edges with the message (after retrieval, one more round trip)
    instead of with the reply. ``include_bookkeeping`` lets retrieval return conversations,
    messages and turn records.
    """

    transport: Transport
    conversation_id: str = attrs.field(kw_only=True, validator=_check_conversation_id)
    platform: str | None = attrs.field(default=None, kw_only=True)
    conversation_title: str | None = attrs.field(default=None, kw_only=True)
    retrieval_limit: int = attrs.field(
        default=8, kw_only=True, validator=_positive("retrieval_limit")
    )
    max_identifiers: int = attrs.field(
        default=16, kw_only=True, validator=_positive("max_identifiers")
    )
    # As many as identifiers by default: over a network, all lookups then share one round
    # trip with the user store (the 2-round-trip turn); lower it to spare a busy server.
    max_concurrency: int = attrs.field(
        default=16, kw_only=True, validator=_positive("max_concurrency")
    )
    retrieval_timeout: float | None = attrs.field(
        default=3.0, kw_only=True, validator=_timeout("retrieval_timeout", optional=True)
    )
    lookup_limit: int = attrs.field(default=25, kw_only=True, validator=_positive("lookup_limit"))
    close_timeout: float = attrs.field(
        default=10.0, kw_only=True, validator=_timeout("close_timeout", optional=False)
    )
    extractor: Extractor | None = attrs.field(default=None, kw_only=True)
    refers_to_on_enter: bool = attrs.field(default=False, kw_only=True)
    include_bookkeeping: bool = attrs.field(default=False, kw_only=True)
    _open_turns: dict[str, OpenTurn] = attrs.field(init=False, factory=dict, repr=False)

    @property
    def settings(self) -> ConversationSettings:
        """What every payload of this conversation shares."""
        return ConversationSettings(self.conversation_id, self.platform, self.conversation_title)

    # ------------------------------------------------------------------ public API

    def turn(
        self,
        user_message: str,
        *,
        turn_id: str | None = None,
        turn_number: int | None = None,
        user_extra: Mapping[str, Any] | None = None,
        revision: int | None = None,
    ) -> Turn:
        """A new turn for ``user_message``; use it as ``async with memory.turn(...) as t:``.

        ``turn_id`` defaults to a fresh time-ordered id; pass a stable one (a harness message
        id) to make a retried turn replay instead of being stored twice. ``revision=2, 3, …``
        records a regenerated reply for a turn id already stored. Bad ids raise
        ``ValueError`` here, before any I/O.
        """
        keys, text, turn_number, extra = self._prepare(
            user_message, turn_id, turn_number, user_extra, revision
        )
        return Turn(self, keys, text, turn_number=turn_number, user_extra=extra)

    async def retrieve(self, text: str) -> Retrieved:
        """Bounded retrieval for ``text`` alone (what a turn's enter phase runs)."""
        return await self._retrieve(check_text("text", text))

    async def open_turn(
        self,
        user_message: str,
        *,
        turn_id: str | None = None,
        turn_number: int | None = None,
        user_extra: Mapping[str, Any] | None = None,
        revision: int | None = None,
    ) -> OpenTurn:
        """The enter phase alone: retrieval and the user store.

        Finish the turn with ``close_turn`` (or ``abandon_turn``): until then this memory keeps
        the :class:`OpenTurn` so that the closing store can write the user message's edges.
        """
        keys, user_message, turn_number, extra = self._prepare(
            user_message, turn_id, turn_number, user_extra, revision
        )
        with structlog.contextvars.bound_contextvars(
            conversation_id=self.conversation_id, turn_id=keys.turn_id
        ):
            opened, retrieved = await self._enter(
                keys, user_message, turn_number=turn_number, user_extra=extra
            )
        handle = OpenTurn(
            conversation_id=self.conversation_id,
            turn_id=keys.turn_id,
            turn_key=keys.user_turn_key,
            user_message=user_message,
            user_message_id=opened.user_message_id,
            conversation_entity_id=opened.conversation_entity_id,
            retrieved=retrieved.entities,
            retrieval=retrieved.stats,
            revision=keys.revision,
            turn_number=turn_number,
            replayed=opened.replayed,
            opened=opened,
        )
        self._open_turns[keys.turn_id] = handle
        return handle

    async def close_turn(
        self,
        turn_id: str | OpenTurn,
        assistant_message: str,
        *,
        refers_to: Sequence[str | Entity] = (),
        user_message_id: str | None = None,
        retrieved_ids: Sequence[str] | None = None,
        revision: int | None = None,
        turn_number: int | None = None,
    ) -> TurnResult:
        """The closing phase of an open turn: store the exact reply (one store call).

        ``turn_id`` is the id (or the :class:`OpenTurn`) from ``open_turn``. The reply
        REFERS_TO the retrieved entities and ``refers_to``. A turn opened by another process
        is closed too: pass ``retrieved_ids`` (and ``user_message_id`` if known) so the user
        message's edges are written. Raises :class:`TurnCloseError` if the store fails.
        """
        cited = tuple(validate_entity_id(e.id if isinstance(e, Entity) else e) for e in refers_to)
        reply = check_text("assistant_message", assistant_message)
        opened, retrieved, handle = await self._resume(
            turn_id, user_message_id, retrieved_ids, revision, turn_number
        )
        return await self._finish_explicit(
            opened,
            retrieved,
            handle,
            lambda: self._complete(opened, reply, retrieved.ids, cited),
            TurnState.CLOSED,
            reply,
            cited,
        )

    async def abandon_turn(
        self,
        turn_id: str | OpenTurn,
        *,
        error: BaseException | str,
        partial_reply: str = "",
        refers_to: Sequence[str | Entity] = (),
        user_message_id: str | None = None,
        retrieved_ids: Sequence[str] | None = None,
        revision: int | None = None,
        turn_number: int | None = None,
    ) -> TurnResult:
        """Record an open turn as abandoned (what ``turn()`` does when the body fails).

        ``error`` is the exception (or its class name); ``partial_reply`` is whatever the
        user was already shown, stored exactly as the assistant message when non-empty.
        """
        cited = tuple(validate_entity_id(e.id if isinstance(e, Entity) else e) for e in refers_to)
        partial = check_text("partial_reply", partial_reply)
        error_class = error if isinstance(error, str) else error_class_name(error)
        opened, retrieved, handle = await self._resume(
            turn_id, user_message_id, retrieved_ids, revision, turn_number
        )
        return await self._finish_explicit(
            opened,
            retrieved,
            handle,
            lambda: self._abandon(opened, partial, error_class, retrieved.ids, cited),
            TurnState.ABANDONED,
            partial,
            cited,
            error_class=error_class,
        )

    async def _finish_explicit(
        self,
        opened: _Opened,
        retrieved: Retrieved,
        handle: OpenTurn | None,
        phase: Callable[[], Awaitable[_CloseOutcome]],
        state: TurnState,
        text: str,
        cited: tuple[str, ...],
        *,
        error_class: str | None = None,
    ) -> TurnResult:
        """The closing phase of ``close_turn`` / ``abandon_turn``: one shielded store."""
        started = time.perf_counter()
        with structlog.contextvars.bound_contextvars(
            conversation_id=self.conversation_id, turn_id=opened.keys.turn_id
        ):
            completion = await self._shielded(phase)
            outcome, close_error = completion.value, completion.error
            result = self._result(
                opened,
                retrieved,
                outcome,
                state,
                text,
                cited,
                started=started,
                error_class=error_class,
                close_error=close_error,
            )
            self._log_close(result)
        await raise_deferred(completion, None)
        if close_error is not None:
            raise close_failure(opened.keys, close_error)
        if handle is not None:
            self._open_turns.pop(handle.turn_id, None)
        return result

    async def record_turn(
        self,
        user_message: str,
        assistant_message: str,
        *,
        turn_id: str | None = None,
        turn_number: int | None = None,
        user_extra: Mapping[str, Any] | None = None,
        refers_to: Sequence[str | Entity] = (),
        revision: int | None = None,
        retrieve: bool = True,
    ) -> TurnResult:
        """Store a whole finished turn in one store call (transcript import).

        Same graph as ``turn()``: conversation, both messages with their PART_OF and
        REFERS_TO edges (to the entities retrieval finds for the user message, unless
        ``retrieve=False``, and to ``refers_to``), and the turn record ``completed``.
        """
        keys, user_message, turn_number, extra = self._prepare(
            user_message, turn_id, turn_number, user_extra, revision
        )
        reply = check_text("assistant_message", assistant_message)
        cited = tuple(validate_entity_id(e.id if isinstance(e, Entity) else e) for e in refers_to)
        started = time.perf_counter()
        with structlog.contextvars.bound_contextvars(
            conversation_id=self.conversation_id, turn_id=keys.turn_id
        ):
            retrieved = await self._retrieve(user_message) if retrieve else EMPTY_RETRIEVAL
            payload = recorded_payload(
                self.settings,
                keys,
                user_message,
                reply,
                retrieved_ids=retrieved.ids,
                cited_ids=cited,
                turn_number=turn_number,
                user_extra=extra,
            )
            stored = await self._store(payload, keys, "recorded")
            opened = _Opened(
                keys=keys,
                turn_number=turn_number,
                user_message_id=_entry_id(stored, payload.user_index, "conversation_message") or "",
                conversation_entity_id=_entry_id(stored, payload.conversation_index, "conversation")
                or "",
                turn_record_id=_entry_id(stored, payload.turn_record_index, "conversation_turn"),
                replayed=stored.replayed,
                prior_status=None,
            )
            outcome = _CloseOutcome(
                stored_status="completed",
                assistant_message_id=self._assistant_id(stored, payload),
                turn_record_id=opened.turn_record_id,
                replayed=stored.replayed,
            )
            result = self._result(
                opened, retrieved, outcome, TurnState.CLOSED, reply, cited, started=started
            )
            self._log_close(result)
        return result

    # ------------------------------------------------------------------ phases

    def _prepare(
        self,
        user_message: object,
        turn_id: str | None,
        turn_number: object,
        user_extra: Mapping[str, Any] | None,
        revision: int | None,
    ) -> tuple[TurnKeys, str, int | None, Mapping[str, Any] | None]:
        # Everything that can be refused is refused here, before any I/O.
        text = check_text("user_message", user_message)
        keys = turn_keys(
            self.conversation_id,
            new_turn_id() if turn_id is None else turn_id,
            revision,
        )
        return keys, text, _check_turn_number(turn_number), validate_user_extra(user_extra)

    async def _identifiers(self, text: str) -> list[str]:
        if len(text) > _INLINE_EXTRACT_CHARS:
            # Long texts (and whatever a custom extractor does with them) stay off the loop.
            return await anyio.to_thread.run_sync(
                extract, text, self.extractor, self.max_identifiers
            )
        return extract(text, self.extractor, self.max_identifiers)

    async def _retrieve(self, text: str, identifiers: list[str] | None = None) -> Retrieved:
        if identifiers is None:
            identifiers = await self._identifiers(text)
        retrieved = await retrieve(
            self.transport,
            identifiers,
            limit=self.retrieval_limit,
            max_concurrency=self.max_concurrency,
            deadline_s=self.retrieval_timeout,
            lookup_limit=self.lookup_limit,
            include_bookkeeping=self.include_bookkeeping,
        )
        s = retrieved.stats
        logger.info(
            "retrieval.done",
            identifiers=s.identifiers,
            lookups=s.lookups,
            misses=s.misses,
            failures=s.failures,
            timeouts=s.timeouts,
            retrieved=s.retrieved,
            ms=round(s.ms, 3),
        )
        return retrieved

    async def _store(self, payload: StorePayload, keys: TurnKeys, phase: str) -> StoreResult:
        try:
            return await self.transport.store(
                payload.entities,
                idempotency_key=payload.idempotency_key,
                relationships=payload.relationships,
            )
        except IdempotencyMismatchError as exc:
            what = "user message" if phase == "user" else "reply"
            # Keys fold ids as entity ids do, so the earlier turn may have had other ids.
            folded_cid, folded_tid = keys.folded
            raise IdempotencyMismatchError(
                f"turn {keys.turn_id!r} of conversation {keys.conversation_id!r} was already "
                f"stored with a different {what} (idempotency key {payload.idempotency_key!r}); "
                "ids that differ only in letter case or whitespace runs fold together into one "
                f"turn, here turn {folded_tid!r} of conversation {folded_cid!r}",
                status=exc.status,
                code=exc.code,
                body=exc.body,
                hint="pass revision=2 (3, ...) to record a regenerated reply or edited message "
                "under the same turn_id, or use a new turn_id for a new turn",
            ) from exc

    async def _enter(
        self,
        keys: TurnKeys,
        user_message: str,
        *,
        turn_number: int | None,
        user_extra: Mapping[str, Any] | None,
        attempt: _EnterAttempt | None = None,
    ) -> tuple[_Opened, Retrieved]:
        """Retrieval and the user store, concurrently; the turn is open when both are done.

        Once the user store may have been issued, every way out of here but success (a
        cancellation of any kind, a lost answer, a timeout, a 5xx) closes the turn as
        abandoned before the error goes on unchanged: the store may have committed, and an
        open turn record would be an orphan. ``attempt.result`` then says what was stored.
        """
        started = time.perf_counter()
        retrieved = EMPTY_RETRIEVAL
        stored: StoreResult | None = None
        store_error: Exception | None = None
        issued = False

        def payload(refers_to: Sequence[str] = ()) -> StorePayload:
            return user_payload(
                self.settings,
                keys,
                user_message,
                turn_number=turn_number,
                user_extra=user_extra,
                refers_to=refers_to,
            )

        identifiers = await self._identifiers(user_message)

        async def run_retrieval() -> None:
            nonlocal retrieved
            retrieved = await self._retrieve(user_message, identifiers)

        request = payload()
        try:
            if self.refers_to_on_enter or not identifiers:
                # Nothing to overlap (or the edges must ride on this store): no task group.
                await run_retrieval()
                request = payload(retrieved.ids)
                issued = True
                stored = await self._store(request, keys, "user")
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_retrieval)
                    issued = True
                    try:
                        stored = await self._store(request, keys, "user")
                    except Exception as exc:
                        # Raised after the group, unwrapped: a task group would turn it into
                        # an ExceptionGroup. Retrieval is pointless now.
                        store_error = exc
                        tg.cancel_scope.cancel()
            if store_error is not None:
                raise store_error
            assert stored is not None
            opened = self._opened(keys, turn_number, stored, request)
            if not opened.user_message_id or not opened.conversation_entity_id:
                # An answer we could not align to the request: ask the store by name instead.
                opened = attrs.evolve(
                    opened,
                    user_message_id=opened.user_message_id
                    or await self._find(keys.user_turn_key, "conversation_message")
                    or "",
                    conversation_entity_id=opened.conversation_entity_id
                    or await self._find(self.conversation_id, "conversation")
                    or "",
                )
        except BaseException as exc:
            if issued and _may_have_written(exc):
                completion = await self._abandon_entered(
                    keys, turn_number, request, stored, retrieved, exc, started, attempt
                )
                await raise_deferred(completion, exc)
            raise
        logger.info(
            "turn.opened",
            user_message_id=opened.user_message_id,
            conversation_entity_id=opened.conversation_entity_id,
            replayed=opened.replayed,
            retrieved=len(retrieved.entities),
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return opened, retrieved

    async def _abandon_entered(
        self,
        keys: TurnKeys,
        turn_number: int | None,
        request: StorePayload,
        stored: StoreResult | None,
        retrieved: Retrieved,
        error: BaseException,
        started: float,
        attempt: _EnterAttempt | None,
    ) -> Completion[tuple[_Opened, _CloseOutcome]]:
        """Close an enter that may have written the user message as abandoned.

        Without the store's answer the user store is sent again under its own key first: a
        replay if it had committed (no second observation), else it writes the message now,
        and either way the abandoned record cannot be overtaken by a late original.
        """
        error_class = error_class_name(error)

        async def close() -> tuple[_Opened, _CloseOutcome]:
            answer = stored if stored is not None else await self._store(request, keys, "user")
            opened = self._opened(keys, turn_number, answer, request)
            return opened, await self._abandon(opened, "", error_class, retrieved.ids, ())

        completion = await run_to_completion(close, self.close_timeout)
        if completion.value is not None:
            opened, outcome = completion.value
            state = TurnState.ABANDONED
        else:
            opened, outcome = _unopened(keys, turn_number), None
            state = TurnState.FAILED
        result = self._result(
            opened,
            retrieved,
            outcome,
            state,
            "",
            (),
            started=started,
            error_class=error_class,
            close_error=completion.error,
        )
        self._log_close(result)
        if attempt is not None:
            attempt.result = result
        return completion

    def _opened(
        self, keys: TurnKeys, turn_number: int | None, stored: StoreResult, request: StorePayload
    ) -> _Opened:
        record_index = request.turn_record_index
        prior = _entry_snapshot(stored, record_index, "conversation_turn").get("status")
        return _Opened(
            keys=keys,
            turn_number=turn_number,
            user_message_id=_entry_id(stored, request.user_index, "conversation_message") or "",
            conversation_entity_id=_entry_id(stored, request.conversation_index, "conversation")
            or "",
            turn_record_id=_entry_id(stored, record_index, "conversation_turn"),
            replayed=stored.replayed,
            prior_status=prior if stored.replayed and isinstance(prior, str) else None,
        )

    def _assistant_id(self, stored: StoreResult, payload: StorePayload) -> str | None:
        if payload.assistant_index is None:
            return None
        if payload.user_index is None:
            return _entry_id(stored, payload.assistant_index, "conversation_message")
        # Two messages in one payload: only the index (or the aligned replay) tells them apart.
        try:
            return stored.entity_id(payload.assistant_index)
        except IndexError:
            return None

    async def _complete(
        self,
        opened: _Opened,
        reply: str,
        retrieved_ids: Sequence[str],
        cited_ids: Sequence[str],
    ) -> _CloseOutcome:
        payload = closing_payload(
            self.settings,
            opened.keys,
            reply,
            conversation_entity_id=opened.conversation_entity_id or None,
            user_message_id=opened.user_message_id or None,
            retrieved_ids=retrieved_ids,
            cited_ids=cited_ids,
            turn_number=opened.turn_number,
        )
        stored = await self._store(payload, opened.keys, "assistant")
        return _CloseOutcome(
            stored_status="completed",
            assistant_message_id=self._assistant_id(stored, payload),
            turn_record_id=_entry_id(stored, payload.turn_record_index, "conversation_turn"),
            replayed=stored.replayed,
        )

    async def _abandon(
        self,
        opened: _Opened,
        partial_reply: str,
        error_class: str,
        retrieved_ids: Sequence[str],
        cited_ids: Sequence[str],
    ) -> _CloseOutcome:
        if opened.prior_status == "completed":
            # This turn id was completed by an earlier run; a failed re-run must not overwrite
            # the stored reply with a partial one or flip the record back to abandoned.
            logger.warning(
                "turn.abandon_skipped", reason="turn already completed", error_class=error_class
            )
            return _CloseOutcome("completed", None, opened.turn_record_id, replayed=True)

        def build(key: str | None = None) -> StorePayload:
            return abandoned_payload(
                self.settings,
                opened.keys,
                partial_reply,
                error_class,
                conversation_entity_id=opened.conversation_entity_id or None,
                user_message_id=opened.user_message_id or None,
                retrieved_ids=retrieved_ids,
                cited_ids=cited_ids,
                turn_number=opened.turn_number,
                idempotency_key=key,
            )

        payload = build()
        try:
            stored = await self._store(payload, opened.keys, "abandoned")
        except IdempotencyMismatchError:
            # An earlier run of this turn id was abandoned differently (another error or
            # partial reply). Both happened: record this one under a key derived from its
            # own content, which still collapses an identical retry.
            digest = _digest(payload)
            payload = build(f"{payload.idempotency_key}-{digest}")
            stored = await self._store(payload, opened.keys, "abandoned")
        return _CloseOutcome(
            stored_status="abandoned",
            assistant_message_id=self._assistant_id(stored, payload),
            turn_record_id=_entry_id(stored, payload.turn_record_index, "conversation_turn"),
            replayed=stored.replayed,
        )

    async def _shielded(
        self, phase: Callable[[], Awaitable[_CloseOutcome]]
    ) -> Completion[_CloseOutcome]:
        """Run one closing phase to its end whatever cancels the caller, within
        ``close_timeout``.

        Never raises (but for a programming error): the caller decides what a failed close
        means, which depends on whether the body failed too, and re-raises a cancellation
        that arrived meanwhile (``raise_deferred``) once the outcome is recorded.
        """
        return await run_to_completion(phase, self.close_timeout)

    async def _resume(
        self,
        turn: str | OpenTurn,
        user_message_id: str | None,
        retrieved_ids: Sequence[str] | None,
        revision: int | None,
        turn_number: int | None,
    ) -> tuple[_Opened, Retrieved, OpenTurn | None]:
        """The state of a turn opened earlier, here or (with less to go on) elsewhere."""
        handle = turn if isinstance(turn, OpenTurn) else self._open_turns.get(turn)
        if handle is not None:
            opened = handle._opened
            if retrieved_ids is None:
                return opened, Retrieved(handle.retrieved, handle.retrieval), handle
            ids = tuple(validate_entity_id(i) for i in retrieved_ids)
            return opened, Retrieved(tuple(_bare(i) for i in ids), handle.retrieval), handle
        assert isinstance(turn, str)  # an OpenTurn always has a handle
        # Everything that can be refused is refused before the lookups below.
        keys = turn_keys(self.conversation_id, turn, revision)
        ids = tuple(validate_entity_id(i) for i in (retrieved_ids or ()))
        turn_number = _check_turn_number(turn_number)
        if user_message_id is not None:
            validate_entity_id(user_message_id)
        elif ids:
            user_message_id = await self._find(keys.user_turn_key, "conversation_message")
        conversation_entity_id = await self._find(self.conversation_id, "conversation")
        opened = _Opened(
            keys=keys,
            turn_number=turn_number,
            user_message_id=user_message_id or "",
            conversation_entity_id=conversation_entity_id or "",
            turn_record_id=None,
            replayed=False,
            prior_status=None,
        )
        return opened, Retrieved(tuple(_bare(i) for i in ids), EMPTY_RETRIEVAL.stats), None

    async def _find(self, key: str, entity_type: str) -> str | None:
        """The id of the ``entity_type`` whose schema-rule name is ``{entity_type}:{key}``.

        Without an entity_type the server matches the raw key as a substring of canonical
        names (with one it would strip the key's punctuation first); keep the exact name.
        """
        wanted = f"{entity_type}:{key}".casefold()
        found = await self.transport.retrieve_entity_by_identifier(key, limit=100)
        for entity in found.entities:
            if (entity.canonical_name or "").casefold() == wanted:
                return entity.id
        return None

    def _result(
        self,
        opened: _Opened,
        retrieved: Retrieved,
        outcome: _CloseOutcome | None,
        status: TurnState,
        reply: str,
        cited: Sequence[str],
        *,
        started: float,
        error_class: str | None = None,
        close_error: Exception | None = None,
    ) -> TurnResult:
        return TurnResult(
            conversation_id=self.conversation_id,
            turn_id=opened.keys.turn_id,
            turn_key=opened.keys.user_turn_key,
            status=status if outcome is not None else TurnState.FAILED,
            stored_status=None if outcome is None else outcome.stored_status,
            conversation_entity_id=opened.conversation_entity_id or None,
            user_message_id=opened.user_message_id or None,
            assistant_message_id=None if outcome is None else outcome.assistant_message_id,
            turn_record_id=(outcome.turn_record_id if outcome else None) or opened.turn_record_id,
            retrieved_ids=retrieved.ids,
            retrieved=retrieved.entities,
            cited_ids=tuple(cited),
            retrieval=retrieved.stats,
            reply_chars=len(reply),
            error_class=error_class,
            close_error=close_error,
            replayed=False if outcome is None else outcome.replayed,
            close_ms=(time.perf_counter() - started) * 1000,
        )

    def _log_close(self, result: TurnResult) -> None:
        fields = {
            "assistant_message_id": result.assistant_message_id,
            "reply_chars": result.reply_chars,
            "retrieved": len(result.retrieved_ids),
            "cited": len(result.cited_ids),
            "replayed": result.replayed,
            "open_ms": round(result.open_ms, 3),
            "body_ms": round(result.body_ms, 3),
            "close_ms": round(result.close_ms, 3),
        }
        if result.status is TurnState.CLOSED:
            logger.info("turn.closed", **fields)
        elif result.status is TurnState.ABANDONED:
            logger.warning("turn.abandoned", error_class=result.error_class, **fields)
        else:
            logger.error(
                "turn.close_failed",
                error_class=result.error_class,
                close_error_class=type(result.close_error).__name__,
                close_error=str(result.close_error),
                **fields,
            )


def _unopened(keys: TurnKeys, turn_number: int | None) -> _Opened:
    # A turn whose user store answer never arrived: nothing known but its keys.
    return _Opened(
        keys=keys,
        turn_number=turn_number,
        user_message_id="",
        conversation_entity_id="",
        turn_record_id=None,
        replayed=False,
        prior_status=None,
    )


def _bare(entity_id: str) -> Entity:
    # An id handed over without its entity (a turn opened elsewhere).
    return Entity(id=entity_id, entity_type="", canonical_name=None, snapshot={}, raw={})


def _digest(payload: StorePayload) -> str:
    blob = json.dumps(list(payload.entities), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]
