"""``SyncTurn``: ``with memory.turn(...) as t:`` over the async :class:`~neotoma_agent.Turn`.

One task on the store's loop (the *driver*) holds the whole ``async with turn:``: it enters
the turn, waits for the calling thread's body to end, then exits the turn with the body's
exception. So the async turn runs in one task and one context, as it would under
``async with`` (its log context and cancel scopes stay in the task that made them), and
the guarantee is the async core's own: the closing store is shielded and bounded by
``close_timeout``, the body's exception (an error, ``KeyboardInterrupt``, ``SystemExit``)
is recorded as abandoned with the partial reply, and then propagates unchanged.

What the body does to the turn (``t.reply += chunk``, ``t.remember``, ``t.cite``,
``t.context()``) are plain method calls on the turn object: no loop, no waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import sys
import threading
from collections.abc import Callable, Generator, Iterable
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from neotoma_agent import (
    ActiveToolCall,
    Entity,
    HistoryTurn,
    RetrievalStats,
    ToolCall,
    Turn,
    TurnCloseError,
    TurnResult,
    TurnState,
    TurnStateError,
)

from ._forward import forward
from ._loop import INTERRUPTS, Job, hold_interrupts, wait_event
from ._store import GRACE_S, SyncStore

__all__ = ["SyncTurn", "current_turn"]

P = ParamSpec("P")
T = TypeVar("T")

_CURRENT: contextvars.ContextVar[SyncTurn | None] = contextvars.ContextVar(
    "neotoma_agent_sync_current_turn", default=None
)


def current_turn() -> SyncTurn | None:
    """The :class:`SyncTurn` whose ``with`` body runs in this thread (context), else None.

    The sync twin of :func:`neotoma_agent.current_turn`, for a framework hook that gets only
    a tool's name and arguments: set when the body starts, reset when the block exits.
    Threads the body starts see it only if started in its context
    (``contextvars.copy_context().run``)::

        t = current_turn()
        if t is not None:
            t.record_tool("search", args=args, result=result)
    """
    return _CURRENT.get()


def _on_turn(method: Callable[Concatenate[Turn, P], T]) -> Callable[Concatenate[SyncTurn, P], T]:
    """A method with the signature and docstring of ``Turn.method``, called on the turn."""

    @functools.wraps(method)
    def call(self: SyncTurn, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return method(self._turn, *args, **kwargs)

    return call


class SyncTurn:
    """One turn, as a (synchronous) context manager: ``with memory.turn(msg) as t:``.

    The same turn as :class:`~neotoma_agent.Turn`, with the same guarantee: on enter the
    user message is stored (and the entities it names retrieved, the conversation's last
    turns read); in the body, write the reply (``t.reply += chunk``, ``t.append(chunk)``,
    or ``for chunk in t.stream(chunks): ...``), read ``t.retrieved``, ``t.history``,
    ``t.context()``, record what the reply produces (``t.remember(...)``) and cite
    entities (``t.cite(...)``); on exit the exact reply is stored, or, if the body raised
    (``KeyboardInterrupt`` and ``SystemExit`` included), the turn is recorded as abandoned
    with the partial reply and the exception propagates unchanged. A Ctrl-C that lands
    while the closing store runs is held until it ends (within ``close_timeout``), then
    raised. A turn belongs to the thread that entered it (other threads run their own
    turns at the same time). After the block, ``t.result`` says what was stored::

        with memory.turn("What do we know about Acme Corp?") as t:
            for chunk in t.stream(llm(f"{t.context()}\\n\\nUser: {t.user_message}")):
                print(chunk, end="", flush=True)
        print(t.result.stored_status)
    """

    __slots__ = (
        "_close_timeout",
        "_current",
        "_enter_error",
        "_entered",
        "_job",
        "_otel_context",
        "_otel_token",
        "_resume",
        "_store",
        "_turn",
    )

    _store: SyncStore
    _turn: Turn
    _close_timeout: float
    _job: Job[None] | None
    _entered: threading.Event
    _enter_error: BaseException | None
    _resume: asyncio.Future[BaseException | None] | None
    _current: contextvars.Token[SyncTurn | None] | None
    #: the driver's OpenTelemetry context once entered (the turn's span current), and the
    #: token of attaching it in the body's thread
    _otel_context: Any
    _otel_token: Any

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Not for direct use: a turn comes from :meth:`SyncMemory.turn`."""
        raise TypeError("SyncTurn objects come from SyncMemory.turn()")

    @classmethod
    def _create(cls, store: SyncStore, turn: Turn, close_timeout: float) -> SyncTurn:
        self = cls.__new__(cls)
        self._store = store
        self._turn = turn
        self._close_timeout = close_timeout
        self._job = None
        self._entered = threading.Event()
        self._enter_error = None
        self._resume = None
        self._current = None
        self._otel_context = None
        self._otel_token = None
        return self

    def __repr__(self) -> str:
        return f"<SyncTurn {self._turn.turn_key!r} {self._turn.state.value}>"

    # ------------------------------------------------------------------ the driver

    async def _drive(self) -> None:
        # On the store's loop: the whole `async with turn:`, in this one task.
        turn = self._turn
        resume: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self._resume = resume
        try:
            await turn.__aenter__()
            otel = sys.modules.get("opentelemetry.context")
            if otel is not None:  # the turn's span, current here, for the body's thread
                self._otel_context = otel.get_current()
        except BaseException as failure:
            self._enter_error = failure
            raise
        finally:
            self._entered.set()
        try:
            exc = await resume
        except asyncio.CancelledError as cancelled:
            # The store is closing while the body still runs (or was never exited):
            # abandoned with the reply so far, as asyncio.run's end would cancel it.
            await turn.__aexit__(type(cancelled), cancelled, cancelled.__traceback__)
            raise
        if exc is None:
            await turn.__aexit__(None, None, None)
        else:
            await turn.__aexit__(type(exc), exc, exc.__traceback__)

    def __enter__(self) -> SyncTurn:
        if self._job is not None:
            raise TurnStateError(f"a turn is entered only once (state: {self.state.value})")
        try:
            job = self._job = self._store._start_turn(self._drive)
            wait_event(self._entered)
        except INTERRUPTS:
            # Ctrl-C while entering: cancel the enter (as Task.cancel() would). Once the user
            # store may have been written, the core closes the turn as abandoned; wait for
            # that (bounded), then let the interrupt go on.
            if self._job is not None:
                self._job.cancel()
                self._store._finish(self._job, self._close_timeout + GRACE_S, raise_held=False)
            raise
        if self._enter_error is not None:
            error, self._enter_error = self._enter_error, None
            # The driver has ended (or is ending) with the same error.
            self._store._finish(job, self._close_timeout + GRACE_S, raise_held=False)
            raise error
        self._current = _CURRENT.set(self)
        if self._otel_context is not None:
            # The body's spans (a model call) are children of the turn's, as under
            # `async with`; the caller's context comes back on exit.
            self._otel_token = sys.modules["opentelemetry.context"].attach(self._otel_context)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        job, resume = self._job, self._resume
        if job is None or resume is None:
            raise TurnStateError(f"cannot close a turn that is {self.state.value}")
        interrupted = isinstance(exc, INTERRUPTS)
        # From here to the end of the closing store, Ctrl-C is held (a second one too, or
        # the first after a normal body), so that it cannot land before the driver is told
        # to close; after a body that is itself interrupted, that interrupt carries the news.
        with hold_interrupts() as held:
            self._forget_current()
            if not job.done:
                # RuntimeError: the loop has closed, and its jobs ended before it did.
                with contextlib.suppress(RuntimeError):
                    self._store._call_soon(_resume, resume, exc)
            ended = self._store._finish(
                job, self._close_timeout + GRACE_S, raise_held=not interrupted
            )
        if held and not interrupted:
            raise KeyboardInterrupt
        if not ended:  # pragma: no cover - only a wedged loop gets here
            if exc is None:
                raise TurnCloseError(
                    f"the closing store of turn {self.turn_id!r} did not end within "
                    f"close_timeout={self._close_timeout}s"
                )
            return
        try:
            job.result()
        except asyncio.CancelledError:
            if exc is None:
                raise TurnStateError(
                    "the store closed while this turn was open: it was recorded as abandoned"
                ) from None
        # Returning None lets the body's exception propagate unchanged.

    def _forget_current(self) -> None:
        otel_token, self._otel_token = self._otel_token, None
        self._otel_context = None
        if otel_token is not None:
            # Tracing never fails a turn: a context exited elsewhere is left to its thread.
            with contextlib.suppress(Exception):
                sys.modules["opentelemetry.context"].detach(otel_token)
        token, self._current = self._current, None
        if token is not None:
            try:
                _CURRENT.reset(token)
            except ValueError:  # exited in another context than it was entered in
                if _CURRENT.get() is self:
                    _CURRENT.set(None)

    # ------------------------------------------------------------------ the body

    @property
    def turn(self) -> Turn:
        """The underlying async :class:`~neotoma_agent.Turn` (its sync methods work here)."""
        return self._turn

    state: TurnState = forward("_turn", Turn)
    """The turn's current :class:`~neotoma_agent.TurnState`."""

    conversation_id: str = forward("_turn", Turn)
    """The conversation id this turn belongs to."""

    turn_id: str = forward("_turn", Turn)
    """This turn's id (given, or a fresh time-ordered one)."""

    turn_key: str = forward("_turn", Turn)
    """The user message's ``turn_key`` (``{conversation_id}:{turn_id}``)."""

    user_message: str = forward("_turn", Turn)
    """The exact user text."""

    user_message_id: str = forward("_turn", Turn)
    """The stored user message's entity id (once the turn is open)."""

    conversation_entity_id: str = forward("_turn", Turn)
    """The conversation's entity id (once the turn is open)."""

    retrieved: tuple[Entity, ...] = forward("_turn", Turn)
    """The entities the user message names, best match first (bounded retrieval)."""

    retrieved_ids: tuple[str, ...] = forward("_turn", Turn)
    """The entity ids of :attr:`retrieved`."""

    retrieval: RetrievalStats = forward("_turn", Turn)
    """Counts and timing of this turn's retrieval."""

    history: tuple[HistoryTurn, ...] = forward("_turn", Turn)
    """The conversation's last ``history_turns`` turns before this one, oldest first
    (see :attr:`neotoma_agent.Turn.history`)."""

    cited_ids: tuple[str, ...] = forward("_turn", Turn)
    """Entity ids cited so far with :meth:`cite`."""

    produced_ids: tuple[str, ...] = forward("_turn", Turn)
    """Ids of the entities :meth:`remember` recorded so far."""

    result: TurnResult = forward("_turn", Turn)
    """What the turn stored (after the ``with`` block); see
    :class:`~neotoma_agent.TurnResult`."""

    @property
    def reply(self) -> str:
        """The reply so far; assign or ``+=`` to it while the turn is open."""
        return self._turn.reply

    @reply.setter
    def reply(self, value: str) -> None:
        self._turn.reply = value

    def append(self, chunk: str) -> None:
        """Append one chunk to the reply (cheaper than ``+=`` for many small chunks)."""
        self._turn.append(chunk)

    def stream(self, source: Iterable[str]) -> Generator[str, None, None]:
        """Re-yield every chunk of ``source`` after appending it to the reply.

        A chunk is in the reply before it is handed on, so whatever the user was shown is
        kept if the turn is interrupted a moment later. Closing this generator early (or
        leaving a ``for`` loop over it with ``break`` and letting it be collected) closes
        ``source`` too, if it has a ``close()``.
        """
        iterator = iter(source)
        try:
            for chunk in iterator:
                self._turn.append(chunk)
                yield chunk
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def cite(self, *entities: str | Entity) -> None:
        """Add REFERS_TO edges from the reply to these entities (ids or entities)."""
        self._turn.cite(*entities)

    def remember(self, entity_type: str, /, **fields: Any) -> str:
        """Record an entity the reply produces and return its id at once; it is written in
        the closing store (see :meth:`neotoma_agent.Turn.remember`)."""
        return self._turn.remember(entity_type, **fields)

    tools: tuple[ToolCall, ...] = forward("_turn", Turn)
    """The tool calls recorded so far, ordered by ``invoked_at``."""

    def tool(self, name: str, args: Any = None, *, call_id: str | None = None) -> ActiveToolCall:
        """Time and record one tool call: ``with t.tool(name, args) as call:``.

        Set ``call.result`` in the body; the call ends ``ok``, ``error`` (an exception: its
        class is kept) or ``cancelled`` (``KeyboardInterrupt``), the body's exception
        propagates unchanged, and the call is written in the turn's closing store
        (completed or abandoned). See :meth:`neotoma_agent.Turn.tool`::

            with t.tool("search_flights", {"to": "LIS"}) as call:
                call.result = search_flights(to="LIS")
        """
        return self._turn.tool(name, args, call_id=call_id)

    record_tool = _on_turn(Turn.record_tool)

    context = _on_turn(Turn.context)
    """The retrieved entities and the history as one budgeted text block for a prompt
    (see :meth:`neotoma_agent.Turn.context`: the same arguments)."""


def _resume(resume: asyncio.Future[BaseException | None], exc: BaseException | None) -> None:
    # On the loop: hand the body's outcome to the driver (unless it was cancelled meanwhile).
    if not resume.done():
        resume.set_result(exc)
