"""``Turn``: one user message and one reply, stored so that both halves survive.

A turn is an explicit state machine::

    new ──enter──► opening ──► open ──exit──► closing ──► completed   (reply stored)
                      │            │             ├──────► abandoned   (body raised/cancelled)
                      ├──► abandoned             └──────► failed      (closing store failed)
                      └──► failed  └──exit after suspend()──► suspended (nothing stored; the
                                                              turn record stays ``open``)

``opening`` runs bounded retrieval and the user store concurrently; ``open`` is the body;
``closing`` is one shielded store under a deadline (``close_timeout``), so that neither a
cancellation nor a hung store can skip it or hang the caller. A turn is entered once.

From ``opening``, once the user store may have been issued, any way out but success (a
cancellation, a lost answer, a timeout, a 5xx) closes the turn as ``abandoned`` (the user store
is replayed under its key first, then the abandoned record is written, shielded and bounded by
``close_timeout``), and the cancellation or error then propagates unchanged; ``t.result`` says
what was stored. ``failed`` from ``opening``: the user store was refused (4xx, nothing
written; its error propagates, the body never ran), or the abandoned record could not be
written either. Shielded means from every cancellation: anyio cancel scopes, and on asyncio
also ``Task.cancel()``, ``asyncio.timeout``, ``wait_for`` and a failing ``TaskGroup``, which
the closing store absorbs, re-raising the cancellation once it has finished.
``failed`` from ``closing``: the closing store failed or hit
``close_timeout``; after a normal body that raises :class:`TurnCloseError` (or
:class:`IdempotencyMismatchError`), after a failed body the body's error propagates and the
failure is logged at ERROR. ``t.result.close_error`` holds the cause.
"""

from __future__ import annotations

import contextvars
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from contextlib import AbstractContextManager
from typing import Any

from ._engine.phase_records import Ending, EnterAttempt, Opened, Prompt
from ._phases import Phases
from ._recall.context import render_context
from ._recall.history import HistoryTurn
from ._recall.retrieval import EMPTY_RETRIEVAL, RetrievalStats, Retrieved, RetrievedEntity
from ._records.keys import validate_entity_id
from ._records.payloads import Produced, merge_produced, produced_entity
from ._records.text import split_pending
from ._records.tools import ToolLog
from ._records.user_id import tenant_for
from ._turn_result import TurnResult, TurnState, close_failure, finish, finish_attempt
from ._turn_tools import TurnTools
from ._util.exits import ExitWith
from ._util.log import bound_context, get_logger
from ._util.otel import TurnTrace, start_turn
from ._util.shield import raise_deferred
from .exceptions import TurnStateError, ValidationError, error_class_name
from .transport._base import Entity

__all__ = ["Turn"]

logger = get_logger()

#: The turn whose ``async with`` body runs in this context (``current_turn()`` reads it).
#: It lives beside the one thing that sets it, so ``_current`` imports this module, not back.
CURRENT_TURN: contextvars.ContextVar[Turn | None] = contextvars.ContextVar(
    "neotoma_agent_current_turn", default=None
)


def _cite_id(value: str | Entity) -> str:
    return validate_entity_id(value.id if isinstance(value, Entity) else value)


class Turn(TurnTools, ExitWith):
    """One turn of a conversation, as an async context manager (``memory.turn(...)``).

    In the body, read what memory holds (``t.retrieved``: the entities the user message
    names; ``t.history``: the conversation's earlier turns; ``t.context()``: both as one
    budgeted text block for a prompt), write the reply (``t.reply += chunk``,
    ``t.append(chunk)`` or ``async for chunk in t.stream(source)``), record the entities the
    reply produces (``t.remember(...)``, stored with the reply) and cite others
    (``t.cite(...)``). After the block, ``t.result`` says what was stored::

        async with memory.turn("What do we know about Acme Corp?") as t:
            prompt = f"{t.context()}\\n\\nUser: {t.user_message}"
            async for chunk in t.stream(llm(prompt)):
                print(chunk, end="")
            task = t.remember("task", title="Call Acme Corp", status="open")
            t.reply += f" (follow-up: {task})"
        print(t.result.status, t.result.produced_ids)
    """

    __slots__ = (
        "_body_started",
        "_chunks",
        "_cited",
        "_context_chars",
        "_context_token",
        "_entered_at",
        "_history",
        "_keys",
        "_log_binding",
        "_model",
        "_open_ms",
        "_opened",
        "_pending",
        "_phases",
        "_produced",
        "_prompt",
        "_reply_cache",
        "_result",
        "_retrieved",
        "_state",
        "_suspended",
        "_tools",
        "_tools_kept",
        "_trace",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Not for direct use: a turn comes from :meth:`NeotomaMemory.turn`."""
        raise TypeError("Turn objects come from NeotomaMemory.turn(); it validates the ids")

    @classmethod
    def _create(cls, phases: Phases, prompt: Prompt) -> Turn:
        """The private constructor: NeotomaMemory.turn() calls it once it has checked the
        ids (the public one refuses, and help(Turn) shows no private type)."""
        turn = object.__new__(cls)
        turn._init(phases, prompt)
        return turn

    def _init(self, phases: Phases, prompt: Prompt) -> None:
        keys = prompt.keys
        self._phases = phases
        self._prompt = prompt
        self._keys = keys
        self._model = prompt.model
        self._state = TurnState.NEW
        self._suspended = False
        self._tools_kept = False
        self._chunks: list[str] = []
        self._reply_cache: str | None = ""
        # The first half of a surrogate pair a chunk ended with, waiting for its second half.
        self._pending = ""
        self._produced: dict[str, Produced] = {}
        self._cited: list[str] = []
        self._tools = ToolLog(keys.user_turn_key)
        self._context_token: contextvars.Token[Turn | None] | None = None
        self._context_chars: int | None = None
        self._opened: Opened | None = None
        self._retrieved: Retrieved = EMPTY_RETRIEVAL
        self._history: tuple[HistoryTurn, ...] = ()
        self._result: TurnResult | None = None
        self._log_binding: AbstractContextManager[Any] | None = None
        self._entered_at = 0.0
        self._body_started = 0.0
        self._open_ms = 0.0
        self._trace: TurnTrace | None = None

    def __repr__(self) -> str:
        return f"<Turn {self._keys.user_turn_key!r} {self._state.value}>"

    # ------------------------------------------------------------------ read-only state

    @property
    def state(self) -> TurnState:
        """The turn's current :class:`TurnState`."""
        return self._state

    @property
    def conversation_id(self) -> str:
        """The conversation id this turn belongs to."""
        return self._keys.conversation_id

    @property
    def turn_id(self) -> str:
        """This turn's id (given, or a fresh time-ordered one)."""
        return self._keys.turn_id

    @property
    def turn_key(self) -> str:
        """The user message's ``turn_key`` (``{conversation_id}:{turn_id}``)."""
        return self._keys.user_turn_key

    @property
    def user_message(self) -> str:
        """The exact user text."""
        return self._prompt.user_message

    @property
    def retrieved(self) -> tuple[Entity, ...]:
        """The entities retrieval found, best match first: the bounded set, then the last
        turns' entities this message does not name.

        Each is a :class:`~neotoma_agent.RetrievedEntity`: ``reason`` (``exact``, ``field``,
        ``partial``, ``recent``, ``plugin``) and ``score``. Those scoring at least the
        memory's ``link_threshold`` (:attr:`retrieved_ids`), and only those, get REFERS_TO
        edges; the last turns' entities below it (reason ``recent``) are there so the agent
        knows who "him" is, and are not linked.
        """
        return self._retrieved.shown

    @property
    def linked(self) -> tuple[Entity, ...]:
        """The entities of :attr:`retrieved` the message names or plainly refers to: those
        scoring at least ``link_threshold``, which get REFERS_TO edges (ids:
        :attr:`retrieved_ids`)."""
        return self._retrieved.entities

    @property
    def candidates(self) -> tuple[RetrievedEntity, ...]:
        """What retrieval found but scored below ``link_threshold``, best first: neither in
        :attr:`retrieved` nor linked (a first name shared by several people, an entity
        the last turns named that this message does not)."""
        return self._retrieved.candidates

    @property
    def retrieved_ids(self) -> tuple[str, ...]:
        """The ids of the entities of :attr:`retrieved` that are linked (REFERS_TO): those
        scoring at least ``link_threshold``."""
        return self._retrieved.ids

    @property
    def history(self) -> tuple[HistoryTurn, ...]:
        """The conversation's last ``history_turns`` turns before this one, oldest first.

        Read on enter, concurrently with retrieval and the user store (no extra round trip);
        empty when ``history_turns=0``, on the first turn, or when the read failed (logged
        at WARNING: history is best-effort, the turn goes on). Each
        :class:`~neotoma_agent.HistoryTurn` has the exact ``user`` and ``reply`` (``None``
        if none was stored; partial for an abandoned turn), ``status``, ``turn_id``,
        ``turn_number`` and the ids each message REFERS_TO. :meth:`context` includes them;
        for a chat API's message list (abandoned and open turns left out, no empty
        message: see :func:`~neotoma_agent.chat_messages`)::

            messages = chat_messages(t.history, user=t.user_message)
        """
        return self._history

    @property
    def retrieval(self) -> RetrievalStats:
        """Counts and timing of this turn's retrieval."""
        return self._retrieved.stats

    @property
    def user_message_id(self) -> str:
        """The stored user message's entity id (available once the turn is open)."""
        return self._require_opened().user_message_id

    @property
    def conversation_entity_id(self) -> str:
        """The conversation's entity id (available once the turn is open)."""
        return self._require_opened().conversation_entity_id

    @property
    def cited_ids(self) -> tuple[str, ...]:
        """Entity ids cited so far with :meth:`cite`."""
        return tuple(self._cited)

    @property
    def result(self) -> TurnResult:
        """What the turn stored; available after the ``async with`` block."""
        if self._result is None:
            raise TurnStateError(f"the turn has no result yet (state: {self._state.value})")
        return self._result

    def _require_opened(self) -> Opened:
        if self._opened is None:
            raise TurnStateError(f"the turn is not open yet (state: {self._state.value})")
        return self._opened

    def _require_open(self, action: str) -> None:
        if self._state is not TurnState.OPEN:
            raise TurnStateError(f"cannot {action}: the turn is {self._state.value}")

    # ------------------------------------------------------------------ the reply

    @property
    def reply(self) -> str:
        """The reply so far. Assign or ``+=`` to it while the turn is open.

        Text must be storable: a lone UTF-16 surrogate raises
        :class:`~neotoma_agent.ValidationError` (the reply keeps what it had, so a body that
        lets the error out ends the turn abandoned with that valid partial reply). A chunk
        may end with the first half of a surrogate pair; the next chunk completes it.
        """
        return self._stored_text() + self._pending

    @reply.setter
    def reply(self, value: str) -> None:
        self._require_open("set the reply")
        if not isinstance(value, str):
            raise TypeError(f"the reply must be a str, not {type(value).__name__}")
        text, self._pending = split_pending("the reply", value)
        self._chunks = [text]
        self._reply_cache = text

    def append(self, chunk: str) -> None:
        """Append one chunk to the reply (O(1): chunks are joined once, when read)."""
        self._require_open("append to the reply")
        if not isinstance(chunk, str):
            raise TypeError(f"a reply chunk must be a str, not {type(chunk).__name__}")
        if not chunk:
            return
        text, pending = split_pending("a reply chunk", self._pending + chunk)
        self._pending = pending
        if text:
            self._chunks.append(text)
            self._reply_cache = None

    def _stored_text(self) -> str:
        # The reply as it can be stored: every chunk so far, without a pending half pair.
        if self._reply_cache is None:
            self._reply_cache = "".join(self._chunks)
            self._chunks = [self._reply_cache]
        return self._reply_cache

    async def stream(self, source: AsyncIterable[str]) -> AsyncGenerator[str, None]:
        """Re-yield every chunk of ``source`` after appending it to the reply.

        A chunk is appended before it is handed on, so whatever the user was shown is in the
        reply if the turn is cancelled a moment later. Closing this stream early (wrap it in
        ``contextlib.aclosing`` when you may leave the loop) closes ``source`` too.
        """
        iterator = aiter(source)
        try:
            async for chunk in iterator:
                self.append(chunk)
                yield chunk
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()

    def cite(self, *entities: str | Entity) -> None:
        """Add REFERS_TO edges from the reply to these entities (ids or :class:`Entity`).

        Ids are checked now: one malformed id would make the store refuse the whole
        closing store, reply included.
        """
        self._require_open("cite")
        ids = [_cite_id(e) for e in entities]
        for entity_id in ids:
            if entity_id not in self._cited:
                self._cited.append(entity_id)

    def remember(self, entity_type: str, /, **fields: Any) -> str:
        """Record an entity the reply produces; return its id at once, to cite in the reply.

        The entity is written in the closing store (no extra round trip), and the assistant
        message REFERS_TO it. Its id is computed here exactly as the server computes it, so
        an entity retrieval found (same type and name) is extended with a new observation,
        never duplicated. Remembering the same id twice merges the fields (later wins). An
        abandoned turn still stores what it produced (it happened), REFERS_TO from the
        partial reply, or from the turn record. Bad input (a ``conversation*`` type, fields
        that are not plain JSON or name nothing) raises before any I/O (``TypeError``,
        ``ValueError``, :class:`~neotoma_agent.ValidationError`). Only while the turn is
        open (:class:`~neotoma_agent.TurnStateError` otherwise)::

            booking = t.remember("booking", name="Table for two", party=2)
            t.reply += f" Booked ({booking})."
        """
        self._require_open("remember an entity")
        tenant = tenant_for(self._phases.config.transport)
        item = produced_entity(entity_type, fields, extends=self.retrieved_ids, tenant=tenant)
        merged = merge_produced((*self._produced.values(), item))
        self._produced = {p.entity_id: p for p in merged}
        return item.entity_id

    def suspend(self, *, tools_kept: bool = False) -> None:
        """Leave the turn open when the body ends normally: nothing is stored on exit.

        For a run that stops to wait for something outside it (a person approving a tool
        call, a human-in-the-loop interrupt) and goes on later, perhaps in another process.
        The user message and the ``open`` turn record are already stored; after a normal
        exit ``t.state`` and ``t.result.status`` are ``SUSPENDED`` and ``stored_status`` is
        ``"open"``. Finish the turn later under the same turn id: a new
        ``memory.turn(t.user_message, turn_id=t.turn_id)`` (its enter replays the stored
        user message, so the resumed body gets a whole turn again), or
        ``memory.close_turn`` / ``abandon_turn``. A turn never finished stays ``open``,
        which is what ``audit`` reports.

        The reply so far, the entities :meth:`remember` recorded, the citations and the tool
        calls are not stored by a suspended exit (a WARNING ``turn.suspended`` counts them):
        record them in the turn that finishes it (the tool calls are on ``t.result.tools``,
        to pass on with ``record_tool`` or ``tools=``). ``tools_kept=True`` says the caller
        keeps them itself (say, as :meth:`ToolCall.to_json` records in a checkpoint), so they
        are not counted as dropped. If the body raises or is cancelled after ``suspend()``,
        the turn is abandoned as usual. Only while the turn is open
        (:class:`~neotoma_agent.TurnStateError` otherwise)::

            async with memory.turn("Send the report to Bob") as t:
                if not await approved():
                    t.suspend()          # asked a person; resumed in a later turn
        """
        self._require_open("suspend the turn")
        self._suspended = True
        self._tools_kept = tools_kept

    def context(
        self,
        *,
        max_chars: int = 4000,
        history: bool = True,
        max_tokens: int | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> str:
        """A compact, deterministic text block of what this turn knows, for any prompt.

        The retrieved entities (type, name, id, their telling fields) in rank order, then
        :attr:`history`, within ``max_chars`` characters by the rules documented in
        ``neotoma_agent._recall.context`` (entities in rank order; newest history kept first, shown
        oldest first; long values cut with a ``…[+N chars]`` marker; lines that do not fit
        left out and counted). Only stored content, never a token. An empty string when
        there is nothing to show. For example::

            Known entities (best match first):
            - company "Acme Corp" [ent_af939bedafbd1838b259772a]: website=acme.com
            Earlier in this conversation (oldest first):
            [turn 1 · completed] user: What do we know about Acme Corp?
            [turn 1 · completed] assistant: Acme Corp is a customer.

        A turn is tagged ``turn N`` when it was given a ``turn_number``, else with a short
        tag stable for that turn (``#`` and 6 hex digits). When the budget runs out inside
        the history, the oldest turn kept is cut to fit (its messages end ``…[+N chars]``)
        instead of being left out. ``max_tokens`` adds a token budget beside the character
        one, counted by ``count_tokens`` (the caller's tokenizer, e.g.
        ``lambda s: len(enc.encode(s))``; the library ships none and requires it with
        ``max_tokens``): the block then fits both. ``history=False`` leaves the history out
        (for an agent that already sends the conversation's earlier messages itself, so
        they are not fed twice). ``ValueError`` for a ``max_chars`` or ``max_tokens`` that
        is not an int >= 0, or ``max_tokens`` without ``count_tokens``.
        """
        text = render_context(
            self.retrieved,
            self._history if history else (),
            max_chars=max_chars,
            max_tokens=max_tokens,
            count_tokens=count_tokens,
        )
        # Stored as the turn record's injected_context_chars: the last block rendered.
        self._context_chars = len(text)
        return text

    @property
    def produced_ids(self) -> tuple[str, ...]:
        """Ids of the entities :meth:`remember` recorded so far."""
        return tuple(self._produced)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Turn:
        if self._state is not TurnState.NEW:
            raise TurnStateError(f"a turn is entered only once (state: {self._state.value})")
        self._state = TurnState.OPENING
        self._entered_at = time.perf_counter()
        self._log_binding = bound_context(
            conversation_id=self._keys.conversation_id, turn_id=self._keys.turn_id
        )
        self._log_binding.__enter__()
        attempt = EnterAttempt()
        phases = self._phases
        prompt = self._prompt
        trace = self._trace = start_turn(phases.config.transport, prompt)
        if trace is not None:
            trace.attach()
        try:
            self._opened, self._retrieved, self._history = await phases.enter(prompt, attempt)
        except BaseException:
            self._state = TurnState.FAILED
            if attempt.closed:
                # The user store may have been written, so the turn was closed as abandoned.
                self._result = finish_attempt(
                    attempt, (time.perf_counter() - self._entered_at) * 1000
                )
                self._state = self._result.status
            self._end_trace(sys.exc_info()[1])
            self._unbind()
            raise
        self._state = TurnState.OPEN
        self._context_token = CURRENT_TURN.set(self)
        self._body_started = time.perf_counter()
        self._open_ms = (self._body_started - self._entered_at) * 1000
        return self

    async def _exit(self, exc: BaseException | None) -> None:
        try:
            await self._close(exc)
        finally:
            self._end_trace(exc)
            self._reset_current()
            self._unbind()
        # Returning None lets the body's exception (or cancellation) propagate unchanged.

    def _reset_current(self) -> None:
        token, self._context_token = self._context_token, None
        if token is None:
            return
        try:
            CURRENT_TURN.reset(token)
        except ValueError:
            # Exited in another context than it was entered in (``__aexit__`` called by hand
            # from another task): clear it there rather than fail the turn's exit.
            if CURRENT_TURN.get() is self:
                CURRENT_TURN.set(None)

    def _end_trace(self, error: BaseException | None) -> None:
        trace, self._trace = self._trace, None
        if trace is not None:
            trace.detach()
            trace.end(self._result, error, self._stored_text() if trace.capture else None)

    def _unbind(self) -> None:
        binding, self._log_binding = self._log_binding, None
        if binding is not None:
            binding.__exit__(None, None, None)

    async def _close(self, exc: BaseException | None) -> None:
        if self._state is not TurnState.OPEN:
            raise TurnStateError(f"cannot close a turn that is {self._state.value}")
        opened = self._require_opened()
        if exc is None and self._suspended:
            self._leave_open(opened)
            return
        self._state = TurnState.CLOSING
        closing_started = time.perf_counter()
        body_ms = (closing_started - self._body_started) * 1000
        reply = self._stored_text()
        unstorable: ValidationError | None = None
        if exc is None and self._pending:
            # The reply ends with half a character: what the user saw up to it is stored,
            # and the turn is abandoned, not completed with a reply that was never whole.
            unstorable = ValidationError(
                "the reply ends with the first half of a UTF-16 surrogate pair; the turn is "
                "abandoned with the reply up to it",
                status=400,
                code="INVALID_TEXT",
            )
        failure = exc if exc is not None else unstorable
        error_class = None if failure is None else error_class_name(failure)
        phases = self._phases
        # Shielded so a cancelled body still gets its closing store, however it is cancelled;
        # bounded so a hung store cannot hang the caller's shutdown.
        ending = Ending(
            opened,
            "completed" if error_class is None else "abandoned",
            reply,
            self.retrieved_ids,
            tuple(self._cited),
            tuple(self._produced.values()),
            self._tools.calls,
            error_class,
            # The model rides on the enter's record only (a closing store that named it
            # would no longer replay a turn stored before).
            context_chars=self._context_chars,
        )
        completion = await phases.shielded(lambda: phases.close(ending))
        close_ms = (time.perf_counter() - closing_started) * 1000
        self._result = finish(
            ending,
            self._retrieved,
            completion.value,
            close_error=completion.error,
            open_ms=self._open_ms,
            body_ms=body_ms,
            close_ms=close_ms,
        )
        self._state = self._result.status
        close_error = completion.error
        # A cancellation that arrived during the close goes on now that the outcome is known.
        await raise_deferred(completion, exc)
        if exc is None and close_error is not None:
            raise close_failure(self._keys, close_error)
        if unstorable is not None:
            raise unstorable

    def _leave_open(self, opened: Opened) -> None:
        # A suspended exit stores nothing: the enter's `open` turn record is what stays.
        body_ms = (time.perf_counter() - self._body_started) * 1000
        dropped = {
            "reply_chars": len(self.reply),
            "produced": len(self._produced),
            "cited": len(self._cited),
            "tools": 0 if self._tools_kept else len(self._tools),
        }
        if any(dropped.values()):
            logger.warning("turn.suspended", **dropped)
        else:
            logger.info("turn.suspended")
        keys = opened.keys
        self._result = TurnResult(
            conversation_id=keys.conversation_id,
            turn_id=keys.turn_id,
            turn_key=keys.user_turn_key,
            status=TurnState.SUSPENDED,
            stored_status="open",
            conversation_entity_id=opened.conversation_entity_id or None,
            user_message_id=opened.user_message_id or None,
            assistant_message_id=None,
            turn_record_id=opened.turn_record_id or None,
            retrieved_ids=self._retrieved.ids,
            retrieved=self._retrieved.entities,
            cited_ids=(),
            retrieval=self._retrieved.stats,
            reply_chars=0,
            open_ms=self._open_ms,
            body_ms=body_ms,
            tools=self._tools.calls,
        )
        self._state = TurnState.SUSPENDED
