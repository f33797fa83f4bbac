"""The event loop a :class:`~neotoma_agent.sync.SyncStore` owns, and waiting on it from a thread.

One asyncio loop runs in one daemon thread per store. Calling code (any thread, any number
of threads, a thread whose own loop is running) hands it work as a :class:`Job` and blocks
on a :class:`threading.Event` until the work ends. Nothing here knows about turns.

Two ways to wait:

- :meth:`LoopThread.run`: interruptible. A ``KeyboardInterrupt`` or ``SystemExit`` that
  lands while waiting cancels the work (a ``Task.cancel()``, which the turn protocol's
  shielded phases absorb until their store is done), waits for the work to end (bounded),
  then propagates unchanged.
- :meth:`LoopThread.finish`: for work that must finish (a closing store). Interrupts that
  land meanwhile are held back until it ends (bounded), then the first is raised. In the
  main thread, while Python's default SIGINT handler is installed, Ctrl-C is held by a
  handler of our own for that time, so that not even a second Ctrl-C can land between two
  statements of the wait.

Waiting from the loop's own thread would deadlock; it raises ``RuntimeError`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Generic, TypeVar

import structlog

__all__ = ["INTERRUPTS", "Job", "LoopThread", "hold_interrupts", "wait_event"]

T = TypeVar("T")

#: what a signal handler raises in the waiting thread: Ctrl-C, and ``sys.exit()`` from a
#: handler (a SIGTERM handler, a notebook's kernel shutdown)
INTERRUPTS = (KeyboardInterrupt, SystemExit)

# Windows cannot interrupt a blocking lock acquire with Ctrl-C: wait in slices there.
_SLICE_S: float | None = 0.1 if sys.platform == "win32" else None


def wait_event(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)``, interruptible by Ctrl-C on every platform."""
    if _SLICE_S is None or (timeout is not None and timeout <= _SLICE_S):
        return event.wait(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not event.wait(_SLICE_S):
        if deadline is not None and time.monotonic() >= deadline:
            return False
    return True


class Job(Generic[T]):
    """One coroutine running as a task on the store's loop, awaited from another thread."""

    __slots__ = ("_cancel_requested", "_done", "_error", "_loop", "_on_done", "_task", "_value")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[Job[T]], object] | None = None,
    ) -> None:
        self._loop = loop
        self._on_done = on_done
        self._done = threading.Event()
        self._task: asyncio.Task[T] | None = None
        self._value: T | None = None
        self._error: BaseException | None = None
        self._cancel_requested = False

    def _start(self, make: Callable[[], Coroutine[Any, Any, T]]) -> None:
        if self._cancel_requested:
            self._end(asyncio.CancelledError())
            return
        try:
            self._task = self._loop.create_task(make())
        except BaseException as exc:  # a coroutine factory that raises at once
            self._end(exc)
            return
        self._task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[T]) -> None:
        if task.cancelled():
            self._end(asyncio.CancelledError())
            return
        error = task.exception()
        if error is None:
            self._value = task.result()
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        self._error = error
        if self._on_done is not None:
            self._on_done(self)
        self._done.set()

    @property
    def done(self) -> bool:
        """True once the work has ended (returned, raised or been cancelled)."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Cancel the work's task (as ``Task.cancel()``), from any thread."""
        self._cancel_requested = True
        # RuntimeError: the loop is closed, and the work ended with it.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._cancel_on_loop)

    def _cancel_on_loop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    @property
    def task(self) -> asyncio.Task[T] | None:
        """The work's task, once started (read it on the loop only)."""
        return self._task

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the work ends or ``timeout`` passes; True if it ended. Interruptible."""
        return wait_event(self._done, timeout)

    def result(self) -> T:
        """What the work returned, or raise what it raised (only once it has ended)."""
        assert self._done.is_set()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


@contextmanager
def hold_interrupts() -> Iterator[list[int]]:
    """Hold Ctrl-C back in the main thread while the block runs; the list says if one came.

    Only when Python's own handler (``signal.default_int_handler``) is installed: an
    application's handler is left alone, and other threads never receive signals.
    """
    held: list[int] = []
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield held
        return

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)


class LoopThread:
    """An asyncio event loop running in a daemon thread of its own, until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop (use it only through :meth:`submit`)."""
        return self._loop

    @property
    def thread(self) -> threading.Thread:
        """The thread running the loop."""
        return self._thread

    def _main(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                # Tasks still pending here were abandoned by their callers: end them.
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            except RuntimeError:  # pragma: no cover - at interpreter shutdown (no new threads)
                pass
            finally:
                asyncio.set_event_loop(None)
                loop.close()
                self._stopped.set()

    def in_loop_thread(self) -> bool:
        """True when called from the loop's own thread (where waiting would deadlock)."""
        return threading.current_thread() is self._thread

    def submit(
        self,
        make: Callable[[], Coroutine[Any, Any, T]],
        *,
        on_done: Callable[[Job[T]], object] | None = None,
    ) -> Job[T]:
        """Start ``make()`` as a task on the loop; return its :class:`Job` at once.

        ``on_done(job)`` runs on the loop as the work ends, before any waiter wakes.
        """
        if self.in_loop_thread():
            raise RuntimeError(
                "the synchronous API was called from its store's own event loop, where "
                "waiting would deadlock; use the async API there"
            )
        job: Job[T] = Job(self._loop, on_done)
        # A fresh context, not a copy of the caller's: a caller inside trio (or any library
        # keeping state in context variables) would make anyio on this asyncio loop believe
        # it runs under trio. What the caller bound for the log (a request id) comes along.
        context = contextvars.Context()
        bound = structlog.contextvars.get_contextvars()
        if bound:
            context.run(structlog.contextvars.bind_contextvars, **bound)
        # So is the caller's OpenTelemetry context (its current span), so that a turn's span
        # is a child of the application's, as under `async with`. Not imported here: when
        # nothing has imported it, no span can be current.
        otel = sys.modules.get("opentelemetry.context")
        if otel is not None:
            context.run(otel.attach, otel.get_current())
        self._loop.call_soon_threadsafe(job._start, make, context=context)
        return job

    def run(self, make: Callable[[], Coroutine[Any, Any, T]], *, grace: float) -> T:
        """Run ``make()`` on the loop and return its result, blocking this thread.

        An interrupt while waiting cancels the work, waits up to ``grace`` seconds for it to
        end (a shielded closing store ends within its own deadline), then propagates.
        """
        job: Job[T] | None = None
        try:
            job = self.submit(make)
            job.wait()
        except INTERRUPTS:
            if job is not None:
                job.cancel()
                self.finish(job, grace, raise_held=False)
            raise
        return job.result()

    def finish(self, job: Job[Any], timeout: float, *, raise_held: bool = True) -> bool:
        """Wait up to ``timeout`` seconds for ``job`` to end, holding interrupts back.

        True if it ended. An interrupt that arrived meanwhile is raised afterwards (the
        first one; Ctrl-C as ``KeyboardInterrupt``), unless ``raise_held`` is false (one is
        already on its way out).
        """
        deadline = time.monotonic() + timeout
        interrupt: BaseException | None = None
        with hold_interrupts() as held:
            while True:
                try:
                    remaining = deadline - time.monotonic()
                    if job.wait(max(remaining, 0.0)) or remaining <= 0:
                        break
                except INTERRUPTS as exc:  # an application's handler raised it
                    if interrupt is None:
                        interrupt = exc
        if raise_held and interrupt is not None:
            raise interrupt
        if raise_held and held:
            raise KeyboardInterrupt
        return job.done

    def stop(self, timeout: float) -> bool:
        """Stop the loop (pending tasks are cancelled) and join its thread; True if it ended.

        Call it from any thread but the loop's own; idempotent.
        """
        if self.in_loop_thread():
            raise RuntimeError("a SyncStore cannot be closed from its own event loop")
        if not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self._loop.call_soon_threadsafe(self._loop.stop)
        self._stopped.wait(timeout)
        self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()
