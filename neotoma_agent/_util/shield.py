"""Run one piece of cleanup to its end whatever cancels the caller, within a deadline.

A turn's closing store must happen even when the user presses stop. anyio's shielded scope
keeps *anyio* cancellation out (cancel scopes, on asyncio and trio), but on asyncio a native
``Task.cancel()`` (``asyncio.timeout``, ``wait_for``, a failing ``TaskGroup``, a web framework
dropping a request) is thrown into whatever the task awaits, shield or not, and would abort the
store half-way. So on asyncio the work runs in a task of its own, which nobody else holds, and
the caller waits for it, absorbing any number of cancellations; it hands the first one back to
the caller to re-raise once the outcome is recorded. On every backend the work is bounded by
``deadline_s``: a shield without a deadline could hang shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel
import attrs

__all__ = ["Completion", "raise_deferred", "run_to_completion"]

T = TypeVar("T")

# How long past its own deadline we wait for the work's task to finish being cancelled.
_GRACE_S = 1.0


@attrs.frozen
class Completion(Generic[T]):
    """How shielded work ended."""

    #: what the work returned (``None`` if it raised or timed out)
    value: T | None
    #: what the work raised (a ``TimeoutError`` when it hit the deadline)
    error: Exception | None
    #: a native asyncio cancellation of the caller that arrived meanwhile: re-raise it
    #: (``raise_deferred``) once the outcome is recorded
    cancelled: BaseException | None = None


def _on_asyncio() -> bool:
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no running asyncio loop: trio
        return False


def _timed_out(timeout: float) -> TimeoutError:
    return TimeoutError(f"the closing store did not finish within close_timeout={timeout}s")


async def run_to_completion(fn: Callable[[], Awaitable[T]], deadline_s: float) -> Completion[T]:
    """Await ``fn()`` to its end, or to ``deadline_s`` seconds, shielded from every cancellation.

    Never raises for what ``fn`` does (it is in :attr:`Completion.error`); the caller decides
    what a failure means. Only a programming error (``BaseException`` other than a
    cancellation) escapes.
    """
    if _on_asyncio():
        return await _run_in_own_task(fn, deadline_s)
    value: T | None = None
    error: Exception | None = None
    finished = False
    with anyio.move_on_after(deadline_s, shield=True):
        try:
            value = await fn()
            finished = True
        except Exception as exc:
            error = exc
            finished = True
    if not finished:
        error = _timed_out(deadline_s)
    return Completion(value, error)


async def _run_in_own_task(fn: Callable[[], Awaitable[T]], deadline_s: float) -> Completion[T]:
    loop = asyncio.get_running_loop()
    # The caller waits on a future of its own, never on the task itself: a cancellation of
    # the caller cancels that future (a new one is made for the next wait), not the work.
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    async def bounded() -> tuple[bool, T | None]:
        # (finished, value): a TimeoutError that fn raises itself stays its own error.
        try:
            with anyio.move_on_after(deadline_s):
                return True, await fn()
            return False, None
        finally:
            # The work's last step wakes the caller, which runs after it, once the task is
            # done (its done callback would wake it one loop iteration later).
            wake()

    # A task of its own: a cancellation of the caller cannot reach into it. It copies the
    # caller's context, so log context (conversation_id, turn_id) carries over.
    work = loop.create_task(bounded())
    # A task cancelled before it ever ran runs no ``finally``: its end wakes the caller.
    work.add_done_callback(wake)
    # The work bounds itself; this only stops work that ignores its own deadline.
    guard = loop.call_later(deadline_s + _GRACE_S, work.cancel)
    cancelled: BaseException | None = None
    # The shield keeps anyio from re-delivering its own cancellation on every loop iteration
    # while we wait; native cancellations still arrive, once per cancel(), and are absorbed.
    with anyio.CancelScope(shield=True):
        while not work.done():
            try:
                await waiter
            except asyncio.CancelledError as exc:
                if cancelled is None:
                    cancelled = exc
            if not work.done() and waiter.done():
                waiter = loop.create_future()  # for the next wait (woken, but not done)
    guard.cancel()
    if work.cancelled():
        return Completion(None, _timed_out(deadline_s), cancelled)
    error = work.exception()
    if error is None:
        finished, value = work.result()
        if not finished:
            return Completion(None, _timed_out(deadline_s), cancelled)
        return Completion(value, None, cancelled)
    if not isinstance(error, Exception):
        raise error
    return Completion(None, error, cancelled)


async def raise_deferred(completion: Completion[Any], pending: BaseException | None) -> None:
    """Re-raise a cancellation that arrived while shielded work ran.

    ``pending`` is the exception already on its way out (the body's), if any: when it is
    itself a cancellation it carries the news, so nothing more is raised. Otherwise the
    cancellation wins, so that ``asyncio.timeout``, task groups and cancel scopes see it.
    """
    if pending is not None and isinstance(pending, anyio.get_cancelled_exc_class()):
        return
    if completion.cancelled is not None:
        raise completion.cancelled
    # An anyio scope (or trio) cancelled us meanwhile: raise its cancellation now, not at
    # the caller's next checkpoint.
    await anyio.lowlevel.checkpoint_if_cancelled()
