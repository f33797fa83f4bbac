"""The three store phases of a turn, driven over a transport: the turn machine's async driver.

Every way of recording a turn goes through the same phases, so they leave the same graph in
the store:

- enter: bounded retrieval, the history read and one user store (conversation, user
  message, turn record ``open``, PART_OF), concurrently; or, on a store that runs it as
  one job (the embedded store's ``_enter_records``), the user store and then the reads in
  one job on its thread, within the retrieval's deadline; a failed enter that may have
  written closes the turn as abandoned (:meth:`Phases.enter`);
- close, as the turn's :class:`~neotoma_agent._engine.phase_records.Ending` says: one closing
  store, completed (assistant message, PART_OF, REFERS_TO, turn record ``completed``) or
  abandoned (turn record ``abandoned``, the user message's edges, and the partial reply if
  the user saw one) (:meth:`Phases.close`);

and :meth:`Phases.shielded` runs a closing phase to its end whatever cancels the caller,
within ``close_timeout``. What each store holds, when a re-run replays and how a failed
enter is closed is decided by the turn machine (``_engine``, no I/O);
:meth:`Phases.drive` answers its requests with transport calls, and the rest here is what
needs an event loop: the enter's task group and deadlines, retrieval, the history read,
the shield, the clock and OpenTelemetry's spans. :class:`~neotoma_agent.Turn` and
:class:`~neotoma_agent.NeotomaMemory` both drive these; neither knows the other's insides.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import attrs

from ._engine.closing import closing_run, started_at
from ._engine.machine import Entering, TurnMachine, assistant_id, opened_from
from ._engine.phase_records import CloseOutcome, Ending, EnterAttempt, Opened, Prompt, unopened
from ._engine.requests import Lookup, Machine, Observations, Request, Store, ToolObservations
from ._recall.history import HistoryTurn, PagesRead, read_already, read_history
from ._recall.retrieval import (
    EMPTY_RETRIEVAL,
    Found,
    Ranking,
    RecentSource,
    Retrieved,
    extract,
    lookup_bodies,
    ranked_step,
    recent_entities,
    retrieval,
    retrieve,
)
from ._recall.retrieval import Lookup as PlannedLookup
from ._records.keys import TurnKeys
from ._records.payloads import ConversationSettings, RunFields, StorePayload
from ._records.tool_payload import ToolPayloads
from ._records.tools import ToolCall
from ._records.user_id import tenant_for
from ._settings import MemorySettings
from ._util.log import get_logger
from ._util.otel import ACTIVE
from ._util.shield import Completion, raise_deferred, run_to_completion
from .exceptions import error_class_name
from .transport._base import Entity, StoreResult
from .transport._records import (
    Entered,
    EnterJob,
    RecordsStore,
    TimedOut,
    enter_job,
    records_store,
)

__all__ = ["Phases"]

logger = get_logger()

T = TypeVar("T")

# Above this many characters, identifier extraction runs in a worker thread.
_INLINE_EXTRACT_CHARS = 8192


@attrs.frozen
class Phases:
    """The store phases of one conversation's turns: the turn machine driven over
    ``config.transport``."""

    config: MemorySettings
    #: what every payload of the conversation shares (built once, from ``config``)
    conversation: ConversationSettings = attrs.field(init=False)
    #: what a stored tool call keeps (built, and so checked, once)
    tool_payloads: ToolPayloads = attrs.field(init=False)
    #: how retrieval looks up and ranks (from ``config``, once)
    ranking: Ranking = attrs.field(init=False)
    _machine: TurnMachine | None = attrs.field(init=False, default=None)
    #: the transport's ``_store_records``, if it takes a turn's records directly
    _records_store: RecordsStore | None = attrs.field(init=False, default=None)
    #: the transport's ``_enter_records``, if it runs a turn's enter as one job
    _enter_job: EnterJob | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        config = self.config
        conversation = ConversationSettings(
            platform=config.platform, title=config.conversation_title
        )
        payloads = ToolPayloads(config.tool_payloads, config.tool_payload_chars, config.redact_tool)
        object.__setattr__(self, "conversation", conversation)
        object.__setattr__(self, "tool_payloads", payloads)
        ranking = Ranking(
            limit=config.retrieval_limit,
            lookup_limit=config.lookup_limit,
            include_bookkeeping=config.include_bookkeeping,
            threshold=config.link_threshold,
            loose=config.extractor is None,
        )
        object.__setattr__(self, "ranking", ranking)
        object.__setattr__(self, "_records_store", records_store(config.transport))
        object.__setattr__(self, "_enter_job", enter_job(config.transport))

    @property
    def machine(self) -> TurnMachine:
        """The decisions: built on first use, when the transport's tenant is read (asking
        the transport nothing before a turn's ids are checked)."""
        machine = self._machine
        if machine is None:
            tenant = tenant_for(self.config.transport)
            machine = TurnMachine(self.conversation, self.tool_payloads, tenant)
            object.__setattr__(self, "_machine", machine)
        return machine

    # ------------------------------------------------------------------ the driver

    async def drive(
        self, machine: Machine[T], first: Callable[[Request], Awaitable[Any]] | None = None
    ) -> T:
        """Run a step of the turn machine to its end: answer each request it yields with
        the transport call it names (the first with ``first``, if given), and throw in the
        error a call raises.

        A cancellation (or any ``BaseException``) is not thrown in: it closes the step and
        goes on, as it would through any other await.
        """
        try:
            request = next(machine)
            answer_with = first or self._answer
            while True:
                try:
                    answer = await answer_with(request)
                except Exception as exc:
                    request = machine.throw(exc)
                else:
                    request = machine.send(answer)
                answer_with = self._answer
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            machine.close()

    async def _answer(self, request: Request) -> Any:
        transport = self.config.transport
        if isinstance(request, Store):
            payload = request.payload
            records = self._records_store
            call = (
                transport.store(
                    payload.entities,
                    idempotency_key=payload.idempotency_key,
                    relationships=payload.relationships,
                    lane=request.lane,
                    deferrable=request.deferrable,
                )
                if records is None
                # A store in this process takes the records as they are (transport._records).
                else records(
                    payload.entities,
                    idempotency_key=payload.idempotency_key,
                    relationships=payload.relationships,
                )
            )
            trace = ACTIVE.get()
            if trace is None:
                return await call
            return await trace.upsert(
                call, request.phase, len(payload.entities), payload.turn_record_index
            )
        if isinstance(request, Lookup):
            found = await transport.retrieve_entity_by_identifier(
                request.identifier, limit=request.limit
            )
            return [(e.id, e.canonical_name) for e in found.entities]
        if isinstance(request, Observations):
            listed = await transport.list_observations(request.entity_id)
            return [o.fields for o in listed.observations]
        assert isinstance(request, ToolObservations)
        from ._recall.tool_rerun import stored_tool_fields  # only a re-run with calls gets here

        return await stored_tool_fields(transport, request.record_id)

    # ------------------------------------------------------------------ reads

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
            max_concurrency=config.max_concurrency,
            deadline_s=config.retrieval_timeout,
            text=text,
            recent=recent,
            retriever=config.retriever,
            conversation_id=config.conversation_id,
            **self.ranking,
        )
        return _logged(retrieved)

    async def history(self, before: str, pages: PagesRead | None = None) -> tuple[HistoryTurn, ...]:
        """The last ``history_turns`` turns before turn ``before``, for a turn's enter
        (``pages``: what its pages answered, read already by the enter's job).

        Best-effort, as retrieval is: a failed or slow read (past ``retrieval_timeout``) is
        logged at WARNING and the turn goes on with no history.
        """
        wanted = self.config.history_turns
        if wanted == 0:
            return ()
        started = time.perf_counter()
        config = self.config
        read = read_history(
            config.transport, config.conversation_id, limit=wanted, before=before, pages=pages
        )
        turns: tuple[HistoryTurn, ...] = ()
        failure: str | None = None
        timed_out = isinstance(pages, TimedOut)
        if timed_out:
            read.close()  # the enter's job read past the deadline
        elif read_already(pages):
            # Read already (the enter's job, within the deadline): no deadline to keep.
            try:
                turns = await read
            except Exception as exc:
                failure = type(exc).__name__
        else:
            deadline = config.retrieval_timeout
            with anyio.move_on_after(math.inf if deadline is None else deadline) as scope:
                try:
                    turns = await read
                except Exception as exc:
                    failure = type(exc).__name__
            timed_out = scope.cancelled_caught
        if failure is not None or timed_out:
            # Best-effort read (INFO, as a failed retrieval): the turn goes on without it.
            ms = round((time.perf_counter() - started) * 1000, 3)
            logger.info("history.failed", error=failure or "timeout", ms=ms, wanted=wanted)
            return ()
        if logger.enabled():
            ms = round((time.perf_counter() - started) * 1000, 3)
            logger.info("history.done", turns=len(turns), wanted=wanted, ms=ms)
        return turns

    # ------------------------------------------------------------------ stores

    async def store(self, payload: StorePayload, keys: TurnKeys, phase: str) -> StoreResult:
        """One store, with the hints a queueing transport (an outbox) reads (the
        conversation as its lane, whether the phase may wait): ``TurnMachine.store``."""
        return await self.drive(self.machine.store(payload, keys, phase))

    async def enter(
        self, prompt: Prompt, attempt: EnterAttempt
    ) -> tuple[Opened, Retrieved, tuple[HistoryTurn, ...]]:
        """Retrieval, the history read and the user store, concurrently; the turn is open
        when all are done.

        Once the user store may have been issued, every way out of here but success (a
        cancellation of any kind, a lost answer, a timeout, a 5xx) closes the turn as
        abandoned before the error goes on unchanged: the store may have committed, and an
        open turn record would be an orphan. ``attempt`` then says what was stored.
        """
        started = time.perf_counter()
        config = self.config
        keys, user_message = prompt.keys, prompt.user_message
        entering = Entering(
            self.machine,
            prompt,
            run=RunFields(started_at=started_at(keys)),
            retrieved=EMPTY_RETRIEVAL,
        )
        identifiers = await self.identifiers(user_message)
        recency = config.history_turns > 0
        entering.plan(
            identifiers,
            recency=recency,
            retriever=config.retriever is not None,
            loose=self.ranking["loose"],
            refers_to_on_enter=config.refers_to_on_enter,
        )
        joint = self._enter_job
        if entering.sequential or config.retriever is not None or ACTIVE.get() is not None:
            # Retrieval before the store, an application's retriever beside it, or a span
            # for each part: the store and the reads are calls of their own.
            joint = None
        try:
            if joint is not None:
                await self._enter_as_one(entering, joint, identifiers, recency)
            else:
                await self._enter_apart(entering, identifiers, recency)
            opened = await self.drive(entering.open())
        except BaseException as exc:
            if entering.must_abandon(exc):
                completion = await self._abandon_entered(entering, exc, attempt)
                await raise_deferred(completion, exc)
            raise
        if logger.enabled():
            logger.info(
                "turn.opened",
                user_message_id=opened.user_message_id,
                conversation_entity_id=opened.conversation_entity_id,
                replayed=opened.replayed,
                retrieved=len(entering.retrieved.entities),
                history=len(entering.history),
                ms=round((time.perf_counter() - started) * 1000, 3),
            )
        return opened, entering.retrieved, entering.history

    async def _enter_apart(self, entering: Entering, identifiers: list[str], recency: bool) -> None:
        """The enter as a store and two reads: retrieval, the history read and the user
        store, concurrently (retrieval first when ``entering.sequential``)."""
        keys, user_message = entering.keys, entering.prompt.user_message
        history_read = anyio.Event()

        async def recent() -> Sequence[Entity]:
            # The entities the last turns referred to, from the history read beside it.
            await history_read.wait()
            return recent_entities(entering.history)

        async def run_retrieval() -> None:
            call, trace = (
                self.retrieve(user_message, identifiers, recent if recency else None),
                ACTIVE.get(),
            )
            entering.found(await (call if trace is None else trace.search(call)))

        async def run_history() -> None:
            try:
                call, trace = self.history(keys.turn_id), ACTIVE.get()
                entering.history = await (call if trace is None else trace.history(call))
            finally:
                history_read.set()

        if entering.sequential and not recency:
            # Nothing to overlap (or the edges must ride on this store): no task group.
            await run_retrieval()
            await self.drive(entering.store())
            return
        store_error: Exception | None = None
        async with anyio.create_task_group() as tg:
            if recency:
                tg.start_soon(run_history)
            if entering.sequential:
                await run_retrieval()
            else:
                tg.start_soon(run_retrieval)
            try:
                await self.drive(entering.store())
            except Exception as exc:
                # Raised after the group, unwrapped: a task group would turn it into an
                # ExceptionGroup. Retrieval is pointless now.
                store_error = exc
                tg.cancel_scope.cancel()
        if store_error is not None:
            raise store_error

    async def _enter_as_one(
        self, entering: Entering, joint: EnterJob, identifiers: list[str], recency: bool
    ) -> None:
        """The enter on a store that runs it as one job (``_enter_records``): the user
        store, then the history read's pages and the retrieval's lookups, on the
        store's thread within the retrieval's deadline; then the history and the ranking
        made of what they answered. A failed store (a re-run's mismatch, which then
        replays) leaves the reads to be made apart, after it."""
        config = self.config
        keys, text = entering.keys, entering.prompt.user_message
        timeout = config.retrieval_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        step = retrieval(
            identifiers, text, others=recency, started=time.perf_counter(), **self.ranking
        )
        plan: Sequence[PlannedLookup] | None = None
        try:
            plan = next(step).plan
        except StopIteration as nothing:
            entering.found(_logged(nothing.value))
        history = None
        if recency:
            history = {
                "conversation_id": config.conversation_id,
                "limit": config.history_turns,
                "before": keys.turn_id,
                "tenant": self.machine.tenant,
            }
        lookups = lookup_bodies(plan, config.lookup_limit) if plan else None
        answered: list[Entered] = []

        async def together(request: Request) -> StoreResult:
            assert isinstance(request, Store)
            payload = request.payload
            entered = await joint(
                payload.entities,
                idempotency_key=payload.idempotency_key,
                relationships=payload.relationships,
                history=history,
                lookups=lookups,
                deadline=deadline,
            )
            answered.append(entered)
            return entered.stored

        await self.drive(entering.store(), together)
        if not answered:
            # The job's store failed and a replay stored it: the reads, apart.
            step.close()
            if recency:
                entering.history = await self.history(keys.turn_id)
            if plan is not None:

                async def recent() -> Sequence[Entity]:
                    return recent_entities(entering.history)

                entering.found(await self.retrieve(text, identifiers, recent if recency else None))
            return
        entered = answered[0]
        if recency:
            entering.history = await self.history(keys.turn_id, entered.history)
        if plan is not None:
            found = Found(plan)
            if recency:
                found.recent = recent_entities(entering.history)
            found.fill(entered.lookups or ())
            cut = found.unfinished or isinstance(entered.history, TimedOut)
            entering.found(_logged(ranked_step(step, found, timeout if cut else None)))

    async def _abandon_entered(
        self, entering: Entering, error: BaseException, attempt: EnterAttempt
    ) -> Completion[tuple[Opened, CloseOutcome]]:
        """Close an enter that may have written the user message as abandoned
        (``Entering.reopen``, then the abandoned store), shielded."""
        error_class = error_class_name(error)
        retrieved = entering.retrieved

        async def close() -> tuple[Opened, CloseOutcome]:
            opened = await self.drive(entering.reopen())
            ending = Ending(opened, "abandoned", "", retrieved.ids, error_class=error_class)
            return opened, await self.close(ending)

        completion = await run_to_completion(close, self.config.close_timeout)
        attempt.closed = True
        attempt.retrieved = retrieved
        attempt.error_class = error_class
        attempt.close_error = completion.error
        if completion.value is not None:
            attempt.opened, attempt.outcome = completion.value
        else:
            attempt.opened = unopened(keys=entering.keys, turn_number=entering.turn_number)
        return completion

    def opened(
        self, keys: TurnKeys, turn_number: int | None, stored: StoreResult, request: StorePayload
    ) -> Opened:
        return opened_from(keys, turn_number, stored, request)

    def assistant_id(self, stored: StoreResult, payload: StorePayload) -> str | None:
        return assistant_id(stored, payload)

    async def close(self, ending: Ending) -> CloseOutcome:
        """The closing store of ``ending`` (``TurnMachine.close``), its run fields read now."""
        return await self.drive(self.machine.close(ending, closing_run(ending)))

    def tool_entities(self, keys: TurnKeys, tools: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """The ``tool_invocation`` request elements of a turn's calls (capped, redacted)."""
        return self.machine.tool_entities(keys, tools)

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
        """The id of the ``entity_type`` named ``{entity_type}:{key}`` (``TurnMachine.find``)."""
        return await self.drive(self.machine.find(key, entity_type))


def _logged(retrieved: Retrieved) -> Retrieved:
    if logger.enabled():
        s = retrieved.stats
        logger.info("retrieval.done", **{**attrs.asdict(s), "ms": round(s.ms, 3)})
    return retrieved
