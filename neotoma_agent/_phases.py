"""The three store phases of a turn (the records they return: ``_phase_records``).

Every way of recording a turn goes through the same phases, so they leave the same graph in
the store:

- enter: bounded retrieval and one user store (conversation, user message, turn record
  ``open``, PART_OF), concurrently; a failed enter that may have written closes the turn
  as abandoned (:meth:`Phases.enter`);
- complete: one closing store (assistant message, PART_OF, REFERS_TO, turn record
  ``completed``);
- abandon: one closing store (turn record ``abandoned``, the user message's edges, and the
  partial reply if the user saw one);

and :meth:`Phases.shielded` runs a closing phase to its end whatever cancels the caller,
within ``close_timeout``. :class:`~neotoma_agent.Turn` and
:class:`~neotoma_agent.NeotomaMemory` both drive these; neither knows the other's insides.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
import attrs

from ._closing import (
    MAX_RERUN_TRIES,
    AbandonedBuild,
    ClosingBuild,
    abandoned_builder,
    closing_run,
    completed_builder,
    content_key,
    matching_runs,
    mismatch,
    named,
)
from ._closing import tool_entities as _tool_entities
from ._history import HistoryTurn, read_history
from ._keys import TurnKeys, turn_record_entity_id
from ._log import get_logger
from ._loose import loose_words
from ._opening import created as _created
from ._opening import entry_id as _entry_id
from ._opening import opened_from, started_at, user_builder
from ._otel import ACTIVE
from ._payloads import (
    ConversationSettings,
    Produced,
    RunFields,
    StorePayload,
)
from ._phase_records import CloseOutcome, EnterAttempt, Opened, unopened
from ._retrieval import (
    EMPTY_RETRIEVAL,
    RecentSource,
    Retrieved,
    extract,
    recent_entities,
    retrieve,
)
from ._settings import MemorySettings
from ._shield import Completion, raise_deferred, run_to_completion
from ._tool_payload import ToolPayloads
from ._tools import ToolCall
from ._user_id import tenant_for
from .exceptions import APIError, IdempotencyMismatchError, ServerError, error_class_name
from .transport._base import Entity, StoreResult
from .transport._results import expected_entity

__all__ = ["Phases", "tool_ids"]


def _loose(text: str, identifiers: Sequence[str]) -> bool:
    """True when ``text`` has words to look up beside ``identifiers`` (:mod:`._loose`)."""
    words = loose_words(text, identifiers)
    return bool(words.lookups or words.people)


logger = get_logger()

# The closing phases: a transport with an outbox may queue these on a transient failure.
# The enter stays store-first (never queued), and so does a whole-turn import.
_DEFERRABLE = frozenset({"assistant", "abandoned"})

# Above this many characters, identifier extraction runs in a worker thread.
_INLINE_EXTRACT_CHARS = 8192


def _may_have_written(error: BaseException) -> bool:
    """Whether a store that ended in ``error`` may still have been applied.

    A refusal (4xx, 429) wrote nothing; a lost answer, a timeout, a 5xx or a cancellation of
    the caller may come after the store committed.
    """
    return not isinstance(error, APIError) or isinstance(error, ServerError)


@attrs.frozen
class Phases:
    """The store phases of one conversation's turns, over ``config.transport``."""

    config: MemorySettings
    #: what every payload of the conversation shares (built once, from ``config``)
    conversation: ConversationSettings = attrs.field(init=False)
    #: what a stored tool call keeps (built, and so checked, once)
    tool_payloads: ToolPayloads = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        config = self.config
        conversation = ConversationSettings(
            config.conversation_id, config.platform, config.conversation_title
        )
        payloads = ToolPayloads(config.tool_payloads, config.tool_payload_chars, config.redact_tool)
        object.__setattr__(self, "conversation", conversation)
        object.__setattr__(self, "tool_payloads", payloads)

    async def identifiers(self, text: str) -> list[str]:
        if len(text) > _INLINE_EXTRACT_CHARS:
            # Long texts (and whatever a custom extractor does with them) stay off the loop.
            return await anyio.to_thread.run_sync(
                extract, text, self.config.extractor, self.config.max_identifiers
            )
        return extract(text, self.config.extractor, self.config.max_identifiers)

    async def retrieve(
        self,
        text: str,
        identifiers: list[str] | None = None,
        recent: RecentSource | None = None,
    ) -> Retrieved:
        if identifiers is None:
            identifiers = await self.identifiers(text)
        config = self.config
        retrieved = await retrieve(
            config.transport,
            identifiers,
            limit=config.retrieval_limit,
            max_concurrency=config.max_concurrency,
            deadline_s=config.retrieval_timeout,
            lookup_limit=config.lookup_limit,
            include_bookkeeping=config.include_bookkeeping,
            threshold=config.link_threshold,
            text=text,
            recent=recent,
            retriever=config.retriever,
            conversation_id=config.conversation_id,
            loose=config.extractor is None,
        )
        s = retrieved.stats
        logger.info("retrieval.done", **{**attrs.asdict(s), "ms": round(s.ms, 3)})
        return retrieved

    async def history(self, before: str) -> tuple[HistoryTurn, ...]:
        """The last ``history_turns`` turns before turn ``before``, for a turn's enter.

        Best-effort, as retrieval is: a failed or slow read (past ``retrieval_timeout``) is
        logged at WARNING and the turn goes on with no history.
        """
        wanted = self.config.history_turns
        if wanted == 0:
            return ()
        started = time.perf_counter()
        turns: tuple[HistoryTurn, ...] = ()
        failure: str | None = None
        deadline = self.config.retrieval_timeout
        with anyio.move_on_after(math.inf if deadline is None else deadline) as scope:
            try:
                turns = await read_history(
                    self.config.transport, self.config.conversation_id, limit=wanted, before=before
                )
            except Exception as exc:
                failure = type(exc).__name__
        ms = round((time.perf_counter() - started) * 1000, 3)
        if failure is not None or scope.cancelled_caught:
            # Best-effort read (INFO, as a failed retrieval): the turn goes on without it.
            logger.info("history.failed", error=failure or "timeout", ms=ms, wanted=wanted)
            return ()
        logger.info("history.done", turns=len(turns), wanted=wanted, ms=ms)
        return turns

    async def store(self, payload: StorePayload, keys: TurnKeys, phase: str) -> StoreResult:
        """One store, with the hints a queueing transport (an outbox) reads: the
        conversation (folded, as keys are) as its lane, and whether the phase may wait.

        A queued store's result says so (``queued``) and holds the ids the server will give.
        """
        try:
            call = self.config.transport.store(
                payload.entities,
                idempotency_key=payload.idempotency_key,
                relationships=payload.relationships,
                lane=keys.folded[0],
                deferrable=phase in _DEFERRABLE,
            )
            trace = ACTIVE.get()
            return await (
                call
                if trace is None
                else trace.upsert(call, phase, len(payload.entities), payload.turn_record_index)
            )
        except IdempotencyMismatchError as exc:
            raise mismatch(keys, payload, phase, exc) from exc

    async def store_turn_phase(
        self,
        payload: StorePayload,
        build: Callable[[RunFields], StorePayload],
        run: RunFields,
        keys: TurnKeys,
        phase: str,
    ) -> tuple[StoreResult, StorePayload]:
        """Store ``payload`` (``build(run)``); a re-run whose only difference is ``run``
        replays.

        The run fields (a clock reading, what retrieval found) differ each time a phase
        runs, so a re-run of a phase that landed meets a mismatch. Then the turn record's
        observations are read (one request, only then), the one this phase wrote earlier is
        found (same fields but for the run fields), and the payload is sent again with its
        values: a replay. If none matches, the text really differs and the mismatch stands.
        """
        try:
            return await self.store(payload, keys, phase), payload
        except IdempotencyMismatchError as mismatch:
            # Newest first; more than one when revisions of the turn wrote the same phase.
            for earlier in await self._earlier_runs(keys, build, run):
                again = build(earlier)
                try:
                    return await self.store(again, keys, phase), again
                except IdempotencyMismatchError:
                    continue
            raise mismatch from None

    async def _earlier_runs(
        self,
        keys: TurnKeys,
        build: Callable[[RunFields], StorePayload],
        run: RunFields,
    ) -> list[RunFields]:
        # The run fields of the observations this phase's earlier runs left on the turn
        # record: those equal to what this run sends but for them.
        tenant = tenant_for(self.config.transport)
        record_id = turn_record_entity_id(keys.conversation_id, keys.turn_id, tenant)
        try:
            observations = await self.config.transport.list_observations(record_id)
        except Exception as exc:  # the mismatch is what the caller will see
            # The caller gets the mismatch error; logging it at WARNING too would say it twice.
            logger.info("turn.rerun_read_failed", error=type(exc).__name__)
            return []
        return matching_runs((o.fields for o in observations.observations), build, run)

    async def enter(
        self,
        keys: TurnKeys,
        user_message: str,
        *,
        turn_number: int | None,
        user_extra: Mapping[str, Any] | None,
        attempt: EnterAttempt,
        model: str | None = None,
    ) -> tuple[Opened, Retrieved, tuple[HistoryTurn, ...]]:
        """Retrieval, the history read and the user store, concurrently; the turn is open
        when all are done.

        Once the user store may have been issued, every way out of here but success (a
        cancellation of any kind, a lost answer, a timeout, a 5xx) closes the turn as
        abandoned before the error goes on unchanged: the store may have committed, and an
        open turn record would be an orphan. ``attempt`` then says what was stored.
        """
        started = time.perf_counter()
        retrieved = EMPTY_RETRIEVAL
        stored: StoreResult | None = None
        store_error: Exception | None = None
        issued = False
        run = RunFields(started_at=started_at(keys))

        build = user_builder(
            self.conversation,
            keys,
            user_message,
            turn_number=turn_number,
            user_extra=user_extra,
            model=model,
        )

        def payload(refers_to: Sequence[str] = (), fields: RunFields = run) -> StorePayload:
            return build(refers_to, fields)

        request = payload()

        async def store_user(built: StorePayload, refers_to: Sequence[str]) -> StoreResult:
            nonlocal request
            stored, request = await self.store_turn_phase(
                built, lambda fields: payload(refers_to, fields), run, keys, "user"
            )
            return stored

        identifiers = await self.identifiers(user_message)
        history: tuple[HistoryTurn, ...] = ()
        history_read = anyio.Event()

        async def recent() -> Sequence[Entity]:
            # The entities the last turns referred to, from the history read beside it.
            await history_read.wait()
            return recent_entities(history)

        with_recent = self.config.history_turns > 0

        async def run_retrieval() -> None:
            nonlocal retrieved
            call, trace = (
                self.retrieve(user_message, identifiers, recent if with_recent else None),
                ACTIVE.get(),
            )
            retrieved = await (call if trace is None else trace.search(call))

        async def run_history() -> None:
            nonlocal history
            try:
                call, trace = self.history(keys.turn_id), ACTIVE.get()
                history = await (call if trace is None else trace.history(call))
            finally:
                history_read.set()

        def with_refers_to(built: StorePayload) -> StorePayload:
            # payload(()) is ``built``: most turns name nothing, so build it once.
            ids = retrieved.ids
            return payload(ids) if ids else built

        # With nothing to look up and no recency or retriever, retrieval is instant.
        idle = (
            not identifiers
            and not with_recent
            and self.config.retriever is None
            and (self.config.extractor is not None or not _loose(user_message, identifiers))
        )
        sequential = self.config.refers_to_on_enter or idle
        try:
            if sequential and self.config.history_turns == 0:
                # Nothing to overlap (or the edges must ride on this store): no task group.
                await run_retrieval()
                request = with_refers_to(request)
                issued = True
                stored = await store_user(request, retrieved.ids)
            else:
                async with anyio.create_task_group() as tg:
                    if self.config.history_turns:
                        tg.start_soon(run_history)
                    if sequential:
                        await run_retrieval()
                        request = with_refers_to(request)
                    else:
                        tg.start_soon(run_retrieval)
                    issued = True
                    try:
                        stored = await store_user(request, retrieved.ids if sequential else ())
                    except Exception as exc:
                        # Raised after the group, unwrapped: a task group would turn it into
                        # an ExceptionGroup. Retrieval is pointless now.
                        store_error = exc
                        tg.cancel_scope.cancel()
            if store_error is not None:
                raise store_error
            assert stored is not None
            opened = self.opened(keys, turn_number, stored, request)
            if not opened.user_message_id or not opened.conversation_entity_id:
                # An answer we could not align to the request: ask the store by name instead.
                opened = opened._replace(
                    user_message_id=opened.user_message_id
                    or await self.find(keys.user_turn_key, "conversation_message")
                    or "",
                    conversation_entity_id=opened.conversation_entity_id
                    or await self.find(self.config.conversation_id, "conversation")
                    or "",
                )
        except BaseException as exc:
            if issued and _may_have_written(exc):
                completion = await self._abandon_entered(
                    keys, turn_number, request, stored, retrieved, exc, attempt
                )
                await raise_deferred(completion, exc)
            raise
        logger.info(
            "turn.opened",
            user_message_id=opened.user_message_id,
            conversation_entity_id=opened.conversation_entity_id,
            replayed=opened.replayed,
            retrieved=len(retrieved.entities),
            history=len(history),
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return opened, retrieved, history

    async def _abandon_entered(
        self,
        keys: TurnKeys,
        turn_number: int | None,
        request: StorePayload,
        stored: StoreResult | None,
        retrieved: Retrieved,
        error: BaseException,
        attempt: EnterAttempt,
    ) -> Completion[tuple[Opened, CloseOutcome]]:
        """Close an enter that may have written the user message as abandoned.

        Without the store's answer the user store is sent again under its own key first: a
        replay if it had committed (no second observation), else it writes the message now,
        and either way the abandoned record cannot be overtaken by a late original.
        """
        error_class = error_class_name(error)

        async def close() -> tuple[Opened, CloseOutcome]:
            answer = stored if stored is not None else await self.store(request, keys, "user")
            opened = self.opened(keys, turn_number, answer, request)
            return opened, await self.abandon(opened, "", error_class, retrieved.ids, ())

        completion = await run_to_completion(close, self.config.close_timeout)
        attempt.closed = True
        attempt.retrieved = retrieved
        attempt.error_class = error_class
        attempt.close_error = completion.error
        if completion.value is not None:
            attempt.opened, attempt.outcome = completion.value
        else:
            attempt.opened = unopened(keys, turn_number)
        return completion

    def opened(
        self, keys: TurnKeys, turn_number: int | None, stored: StoreResult, request: StorePayload
    ) -> Opened:
        return opened_from(keys, turn_number, stored, request)

    def assistant_id(self, stored: StoreResult, payload: StorePayload) -> str | None:
        if payload.assistant_index is None:
            return None
        if payload.user_index is None:
            return _entry_id(stored, payload.assistant_index, "conversation_message")
        # Two messages in one payload: only the index (or the aligned replay) tells them apart.
        try:
            return stored.entity_id(payload.assistant_index)
        except IndexError:
            return None

    async def complete(
        self,
        opened: Opened,
        reply: str,
        retrieved_ids: Sequence[str],
        cited_ids: Sequence[str],
        produced: Sequence[Produced] = (),
        tools: Sequence[ToolCall] = (),
        *,
        model: str | None = None,
        context_chars: int | None = None,
    ) -> CloseOutcome:
        run = closing_run(opened, retrieved_ids, context_chars)

        def build_with(elements: Sequence[Mapping[str, Any]]) -> ClosingBuild:
            return completed_builder(
                self.conversation,
                opened,
                reply,
                retrieved_ids,
                cited_ids,
                produced,
                elements,
                model,
            )

        stored, payload, retimed = await self.store_closing(
            opened.keys, "assistant", run, tools, build_with
        )
        return self._closed("completed", stored, payload, produced, retimed)

    async def abandon(
        self,
        opened: Opened,
        partial_reply: str,
        error_class: str,
        retrieved_ids: Sequence[str],
        cited_ids: Sequence[str],
        produced: Sequence[Produced] = (),
        tools: Sequence[ToolCall] = (),
        *,
        model: str | None = None,
        context_chars: int | None = None,
    ) -> CloseOutcome:
        if opened.prior_status == "completed":
            # This turn id was completed by an earlier run; a failed re-run must not overwrite
            # the stored reply with a partial one or flip the record back to abandoned.
            # Nothing is lost: the stored completed turn stays as it was.
            logger.info(
                "turn.abandon_skipped", reason="turn already completed", error_class=error_class
            )
            return CloseOutcome("completed", None, opened.turn_record_id, replayed=True)

        run = closing_run(opened, retrieved_ids, context_chars)
        keys = opened.keys

        def builder(elements: Sequence[Mapping[str, Any]]) -> AbandonedBuild:
            return abandoned_builder(
                self.conversation,
                opened,
                partial_reply,
                error_class,
                retrieved_ids,
                cited_ids,
                produced,
                elements,
                model,
            )

        def keyed(key: str | None) -> Callable[[Sequence[Mapping[str, Any]]], ClosingBuild]:
            def build_with(elements: Sequence[Mapping[str, Any]]) -> ClosingBuild:
                build = builder(elements)
                return lambda fields: build(fields, key)

            return build_with

        try:
            stored, payload, retimed = await self.store_closing(
                keys, "abandoned", run, tools, keyed(None)
            )
        except IdempotencyMismatchError:
            # An earlier run of this turn id was abandoned differently (another error or
            # partial reply). Both happened: record this one under a key derived from its
            # own content (the run fields left out), which still collapses an identical retry.
            key = content_key(keys, builder(self.tool_entities(keys, tools)))
            stored, payload, retimed = await self.store_closing(
                keys, "abandoned", run, tools, keyed(key)
            )
        return self._closed("abandoned", stored, payload, produced, retimed)

    async def store_closing(
        self,
        keys: TurnKeys,
        phase: str,
        run: RunFields,
        tools: Sequence[ToolCall],
        build_with: Callable[[Sequence[Mapping[str, Any]]], ClosingBuild],
    ) -> tuple[StoreResult, StorePayload, list[ToolCall] | None]:
        """:meth:`store_turn_phase` for a closing store, whose calls' clock readings are
        run values too; with the calls as stored when they took an earlier run's readings.

        ``build_with(elements)`` is the phase's builder for the calls' request elements. A
        re-run's calls ran again at other times: on a mismatch, the calls an earlier run
        stored are read (only then), and if they are this run's but for their readings
        (:func:`~neotoma_agent._tool_rerun.calls_as_stored`), their readings are sent.
        """
        elements = self.tool_entities(keys, tools)
        build = build_with(elements)
        try:
            stored, payload = await self.store_turn_phase(build(run), build, run, keys, phase)
            return stored, payload, None
        except IdempotencyMismatchError as mismatch:
            if not tools:
                raise
            refused = mismatch
        for earlier in await self._calls_as_stored(keys, tools, elements):
            build = build_with(self.tool_entities(keys, earlier))
            try:
                stored, payload = await self.store_turn_phase(build(run), build, run, keys, phase)
            except IdempotencyMismatchError:
                continue
            return stored, payload, earlier
        raise refused

    async def _calls_as_stored(
        self, keys: TurnKeys, tools: Sequence[ToolCall], elements: Sequence[Mapping[str, Any]]
    ) -> list[list[ToolCall]]:
        from ._tool_rerun import calls_as_stored  # only a re-run with calls gets here

        tenant = tenant_for(self.config.transport)
        record_id = turn_record_entity_id(keys.conversation_id, keys.turn_id, tenant)
        try:
            return await calls_as_stored(
                self.config.transport, record_id, tools, elements, MAX_RERUN_TRIES
            )
        except Exception as exc:  # the mismatch is what the caller will see
            logger.info("turn.rerun_read_failed", error=type(exc).__name__)
            return []

    def tool_entities(self, keys: TurnKeys, tools: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """The ``tool_invocation`` request elements of a turn's calls (capped, redacted)."""
        return _tool_entities(self.conversation, self.tool_payloads, keys, tools)

    def _closed(
        self,
        status: str,
        stored: StoreResult,
        payload: StorePayload,
        produced: Sequence[Produced],
        retimed: Sequence[ToolCall] | None = None,
    ) -> CloseOutcome:
        # What a closing store wrote, read off its answer (or the ids a queued one will get).
        produced_ids = _produced_ids(stored, payload, produced)
        return CloseOutcome(
            stored_status=status,
            assistant_message_id=self.assistant_id(stored, payload),
            turn_record_id=_entry_id(stored, payload.turn_record_index, "conversation_turn"),
            replayed=stored.replayed,
            produced_ids=produced_ids,
            queued=stored.queued,
            tool_ids=tool_ids(stored, payload),
            created_ids=tuple(
                entity_id
                for entity_id, index in zip(produced_ids, payload.produced_indexes, strict=True)
                if _created(stored, index)
            ),
            stored_tools=None if retimed is None else tuple(retimed),
        )

    async def shielded(
        self, phase: Callable[[], Awaitable[CloseOutcome]]
    ) -> Completion[CloseOutcome]:
        """Run one closing phase to its end whatever cancels the caller, within
        ``close_timeout``.

        Never raises (but for a programming error): the caller decides what a failed close
        means, which depends on whether the body failed too, and re-raises a cancellation
        that arrived meanwhile (``raise_deferred``) once the outcome is recorded.
        """
        return await run_to_completion(phase, self.config.close_timeout)

    async def find(self, key: str, entity_type: str) -> str | None:
        """The id of the ``entity_type`` whose schema-rule name is ``{entity_type}:{key}``.

        Without an entity_type the server matches the raw key as a substring of canonical
        names (with one it would strip the key's punctuation first); keep the exact name.
        """
        found = await self.config.transport.retrieve_entity_by_identifier(key, limit=100)
        for entity in found.entities:
            if named(entity.canonical_name, key, entity_type):
                return entity.id
        return None


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
    # The store's word where it aligned the answer; else (a replay) the id the identity
    # rules give (turn key, tool name and invoked_at: a schema rule, so exact).
    ids = []
    for index in payload.tool_indexes:
        try:
            ids.append(stored.entity_id(index))
        except IndexError:
            expected = expected_entity(payload.entities[index], index)
            if expected is not None:
                ids.append(expected.entity_id)
    return tuple(ids)
