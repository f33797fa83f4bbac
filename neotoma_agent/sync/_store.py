"""``SyncStore``: a transport and the event loop that drives it, for synchronous code."""

from __future__ import annotations

import atexit
import contextlib
import enum
import logging
import math
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..exceptions import error_label
from ._loop import Job, LoopThread

if TYPE_CHECKING:
    from neotoma_agent import Transport

__all__ = ["GRACE_S", "SyncStore"]

T = TypeVar("T")

#: how long past a phase's own deadline a blocked caller still waits for it: the async core
#: bounds its closing store by ``close_timeout``; this only guards against a wedged loop
GRACE_S = 2.0

# The wing's one event of its own (a store left unclosed), under the library's logger name:
# WARNING shows by default and ``logging`` configuration controls it, like the core's events.
_logger = logging.getLogger("neotoma_agent.sync")


class _State(enum.Enum):
    OPEN = "open"
    #: close() has begun: no new work is taken
    CLOSING = "closing"
    CLOSED = "closed"


def _check_timeout(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value > 0
        or math.isinf(value)
    ):
        raise ValueError(f"close_timeout must be a positive, finite number of seconds: {value!r}")
    return float(value)


class SyncStore:
    """A store for synchronous code: a :class:`~neotoma_agent.Transport` and the event
    loop that drives it, in a thread of its own.

    Open one per process (or per store file / server) and share it between threads::

        with SyncStore.open("memory.db") as store:              # the embedded store
            memory = SyncMemory(store, conversation_id="chat-42")
            ...
        with SyncStore.connect("http://127.0.0.1:3080") as store:   # a Neotoma server
            ...

    ``SyncStore(transport)`` wraps any transport not yet used on another event loop (an
    :class:`~neotoma_agent.OutboxTransport` over an ``HttpTransport``, a
    :class:`~neotoma_agent.testing.FaultyTransport`, ...); the store owns it from then on.

    The loop starts here and stops at :meth:`close` (or the end of the ``with`` block),
    which first records turns still open in other threads as abandoned (as ``asyncio.run``
    cancels the tasks left at its end), then closes the transport, all within
    ``close_timeout`` seconds. A store never closed is closed at interpreter exit, with a
    WARNING on the ``neotoma_agent.sync`` logger. Every method may be called from any
    thread, including one whose own event loop is running (a notebook, an async app calling
    sync code); calling them from the store's own loop raises ``RuntimeError``, and so does
    using a store in a process forked after it was opened (open one per worker process).
    """

    def __init__(self, transport: Transport, *, close_timeout: float = 10.0) -> None:
        """Start the store's loop and open ``transport`` on it (see :class:`SyncStore`)."""
        self._close_timeout = _check_timeout(close_timeout)
        self._transport = transport
        self._lock = threading.Lock()
        self._turns: set[Job[Any]] = set()
        self._state = _State.OPEN
        # A forked child (gunicorn --preload, multiprocessing's fork) has no loop thread.
        self._pid = os.getpid()
        self._loop = LoopThread(name=f"neotoma-sync:{type(transport).__name__}")
        enter = getattr(transport, "__aenter__", None)
        if enter is not None:
            try:
                self._loop.run(enter, grace=self._close_timeout)
            except BaseException:
                self._state = _State.CLOSED
                with contextlib.suppress(Exception):  # the enter's error is the one to see
                    self._loop.run(transport.aclose, grace=self._close_timeout)
                self._loop.stop(GRACE_S)
                raise
        _register(self)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: str = "NORMAL",
        read_only: bool = False,
        close_timeout: float = 10.0,
    ) -> SyncStore:
        """The embedded store at ``path`` (created if needed); see
        :class:`~neotoma_agent.EmbeddedStore` for ``synchronous`` and ``read_only``."""
        from neotoma_agent import EmbeddedStore  # imported on use, as the package does

        store = EmbeddedStore.open(path, synchronous=synchronous, read_only=read_only)
        return cls(store, close_timeout=close_timeout)

    @classmethod
    def connect(
        cls,
        base_url: str = "http://127.0.0.1:3080",
        token: str | None = None,
        *,
        close_timeout: float = 10.0,
        **options: Any,
    ) -> SyncStore:
        """A Neotoma server at ``base_url``; ``options`` are
        :class:`~neotoma_agent.HttpTransport`'s keyword arguments (``timeout``, ``retry``,
        ...); for an outbox, ``SyncStore(OutboxTransport(HttpTransport(url), path))``."""
        from neotoma_agent import HttpTransport  # aiohttp only for those who use it

        return cls(HttpTransport(base_url, token, **options), close_timeout=close_timeout)

    def __repr__(self) -> str:
        return f"<SyncStore {self._transport!r} {self._state.value}>"

    @property
    def transport(self) -> Transport:
        """The transport this store drives (use it only on the store's loop: :meth:`call`)."""
        return self._transport

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._state is not _State.OPEN

    @property
    def close_timeout(self) -> float:
        """How long :meth:`close` may take, in seconds."""
        return self._close_timeout

    @property
    def loop_thread(self) -> threading.Thread:
        """The thread running the store's event loop (alive until :meth:`close`)."""
        return self._loop.thread

    def call(self, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        """Run ``await fn(*args, **kwargs)`` on the store's loop and return its result.

        For any part of the async API this module does not wrap, e.g.
        ``store.call(neotoma_agent.qa.audit, store.transport)``. Ctrl-C while it runs cancels
        it (as ``Task.cancel()`` would), waits for it to end, then propagates.
        """

        async def run() -> T:
            return await fn(*args, **kwargs)

        return self._run(run, grace=self._close_timeout)

    def _run(self, make: Callable[[], Coroutine[Any, Any, T]], *, grace: float) -> T:
        """Run ``make()`` on the loop, blocking; ``grace``: how long an interrupted call may
        take to end."""
        self._require_open()
        return self._loop.run(make, grace=grace)

    def _start_turn(self, make: Callable[[], Coroutine[Any, Any, None]]) -> Job[None]:
        """Start a turn's driver on the loop; :meth:`close` abandons it if still running."""
        with self._lock:
            self._require_open()
            job = self._loop.submit(make, on_done=self._end_turn)
            self._turns.add(job)
        return job

    def _end_turn(self, job: Job[Any]) -> None:
        # On the loop, as a driver ends.
        with self._lock:
            self._turns.discard(job)

    def _call_soon(self, fn: Callable[..., object], /, *args: Any) -> None:
        """Schedule ``fn(*args)`` on the loop and return at once."""
        self._loop.loop.call_soon_threadsafe(fn, *args)

    def _finish(self, job: Job[Any], timeout: float, *, raise_held: bool = True) -> bool:
        """Wait for ``job`` holding interrupts back; see ``LoopThread.finish``."""
        return self._loop.finish(job, timeout, raise_held=raise_held)

    def _require_open(self) -> None:
        if self._state is not _State.OPEN:
            raise RuntimeError("this SyncStore is closed")
        if os.getpid() != self._pid:
            # Its loop thread stayed in the parent: waiting on it here would hang forever.
            raise RuntimeError(
                "this SyncStore was opened in another process (before a fork); open one in "
                "each process (with gunicorn --preload: in a post_fork hook)"
            )

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> SyncStore:
        self._require_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Abandon turns still open, close the transport and stop the loop; idempotent.

        Bounded by ``close_timeout``; a Ctrl-C meanwhile is held until it ends, then raised.
        """
        if self._loop.in_loop_thread():
            raise RuntimeError("a SyncStore cannot be closed from its own event loop")
        if os.getpid() != self._pid:
            return  # a forked child's copy: the parent owns the loop and the transport
        with self._lock:
            if self._state is not _State.OPEN:
                return
            self._state = _State.CLOSING
            drivers = list(self._turns)
        _unregister(self)

        async def shut_down() -> None:
            with anyio.move_on_after(self._close_timeout):
                tasks = [job.task for job in drivers if job.task is not None]
                for task in tasks:
                    # The driver records its turn as abandoned, with the partial reply.
                    task.cancel()
                for task in tasks:
                    # Each turn logged its own outcome; what it raised is its caller's.
                    with contextlib.suppress(BaseException):
                        await task
                await self._transport.aclose()

        try:
            job = self._loop.submit(shut_down)
            self._loop.finish(job, self._close_timeout + GRACE_S)
        finally:
            stopped = self._loop.stop(GRACE_S)
            self._state = _State.CLOSED
            if not stopped:  # pragma: no cover - a loop wedged by blocking code
                _logger.warning(
                    "sync.loop_not_stopped store=%r: its thread is left to end with the process",
                    self,
                )


# Stores still open, closed at interpreter exit. Strong references: a store keeps its loop
# thread (a daemon) until closed, so forgetting one must not let it drift unclosed.
_open_stores: dict[int, SyncStore] = {}
_registry_lock = threading.Lock()


def _register(store: SyncStore) -> None:
    with _registry_lock:
        _open_stores[id(store)] = store


def _unregister(store: SyncStore) -> None:
    with _registry_lock:
        _open_stores.pop(id(store), None)


def _close_left_open() -> None:
    with _registry_lock:
        # A forked child's copies belong to the parent, which closes them.
        stores = [s for s in _open_stores.values() if s._pid == os.getpid()]
    for store in stores:
        # A log record, not a ResourceWarning: Python hides ResourceWarning by default, and
        # `-W error` would turn it into an exception that skips the close it announces.
        _logger.warning(
            "sync.store_left_open store=%r: closing it at interpreter exit "
            "(use `with SyncStore...:` or call close())",
            store,
        )
        try:
            store.close()
        except Exception as exc:  # pragma: no cover - reported, the next store still closes
            _logger.warning("sync.store_close_failed store=%r error=%s", store, error_label(exc))


atexit.register(_close_left_open)
