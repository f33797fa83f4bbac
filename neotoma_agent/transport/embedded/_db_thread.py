"""One thread that owns a SQLite connection and commits queued work in groups.

SQLite serialises writers, so many tasks writing through many connections spend their time
retrying on "database is locked". Here exactly one thread touches the connection: callers
queue jobs and await them. The thread drains whatever is queued, runs each job inside its own
SAVEPOINT (a failing job rolls back alone) and commits the group once, so one fsync pays for
many stores. A job's caller is woken only after the commit that made its writes durable.

Waking a task from a foreign thread is backend specific: asyncio's ``call_soon_threadsafe``
resolves a future the task awaits, trio's ``run_sync_soon`` reschedules the task it parked.
A trip costs each thread a wake-up (docs/performance.md, "The pages a commit writes", says
what one caller's two trips a turn cost and what was measured to cut them).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..._util.log import get_logger
from ...exceptions import error_label

__all__ = ["DBThread", "Job"]

T = TypeVar("T")
_log = get_logger()
_MAX_GROUP = 512
_TRIO: Any = None


class Job(Generic[T]):
    """A unit of work for the DB thread, and the means to await its outcome."""

    __slots__ = ("_call_soon", "_future", "_task", "_woken", "error", "fn", "result", "writes")

    def __init__(self, fn: Callable[[sqlite3.Connection], T], *, writes: bool = True) -> None:
        self.fn = fn
        #: a job that only reads needs no savepoint: it has nothing to undo
        self.writes = writes
        self.result: T | None = None
        self.error: BaseException | None = None
        # Waking a task from a foreign thread is backend specific. On asyncio the caller
        # awaits a bare future (what an anyio Event wraps, without its backend lookup and
        # its asyncio.Event); on trio its task is parked and rescheduled (what a trio
        # Event does, without its set of waiting tasks and anyio's wrapper around it).
        self._future: asyncio.Future[None] | None = None
        #: trio: the task parked in ``wait``, None once it is woken or gave up
        self._task: Any = None
        #: trio: ``_wake`` ran (the job is done) before ``wait`` parked its task
        self._woken = False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            trio = _trio_lowlevel()  # the only other anyio backend
            self._call_soon: Callable[[Callable[[], object]], object] = (
                trio.current_trio_token().run_sync_soon
            )
        else:
            self._future = loop.create_future()
            self._call_soon = loop.call_soon_threadsafe

    async def wait(self) -> T:
        if self._future is not None:
            # A cancellation of the caller cancels the future; the wake-up then skips it.
            await self._future
        else:
            await self._park()
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]

    async def _park(self) -> None:
        # trio: the task sleeps until ``_wake`` reschedules it; a cancellation aborts the
        # sleep (and the wake-up then skips it), as it does a trio Event's wait.
        trio = _trio_lowlevel()
        if self._woken:
            await trio.checkpoint()
            return
        self._task = trio.current_task()

        def abort(_: object) -> Any:
            self._task = None
            return trio.Abort.SUCCEEDED

        await trio.wait_task_rescheduled(abort)

    def _wake(self) -> None:
        # On the caller's event loop: mark the job done unless its waiter gave up.
        future = self._future
        if future is None:
            self._woken = True
            task, self._task = self._task, None
            if task is not None:
                _trio_lowlevel().reschedule(task)
        elif not future.done():
            future.set_result(None)


def _trio_lowlevel() -> Any:
    """``trio.lowlevel``, imported on a trio job's first use (asyncio never imports it)."""
    global _TRIO
    if _TRIO is None:
        import trio.lowlevel

        _TRIO = trio.lowlevel
    return _TRIO


def _wake(jobs: list[Job[Any]]) -> None:
    """Wake the tasks awaiting ``jobs``: one thread-safe call per event loop, not per job.

    Each call writes to the loop's wake-up pipe and contends for the GIL; a group of stores
    costs one such call for all of them.
    """
    if len(jobs) == 1:  # one caller's job: its own wake-up, no group to build
        _call(jobs[0]._call_soon, jobs[0]._wake)
        return
    by_loop: dict[Callable[[Callable[[], object]], object], list[Job[Any]]] = {}
    for job in jobs:
        by_loop.setdefault(job._call_soon, []).append(job)
    for call_soon, waiting in by_loop.items():

        def wake_all(waiting: list[Job[Any]] = waiting) -> None:
            for job in waiting:
                job._wake()

        _call(call_soon, wake_all)


def _call(call_soon: Callable[[Callable[[], object]], object], fn: Callable[[], object]) -> None:
    # A plain try, not contextlib.suppress: this runs once per trip to the thread.
    try:  # noqa: SIM105
        call_soon(fn)
    except Exception:  # the caller's event loop is gone: nobody waits for the job any more
        pass


class DBThread:
    """Runs jobs against one connection, in submission order, committing them in groups."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], name: str) -> None:
        self._queue: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._connect = connect
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def submit(self, job: Job[Any]) -> None:
        self._queue.put(job)

    def stop(self) -> None:
        """Finish queued jobs, close the connection and join the thread (blocking)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _main(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._startup_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                group: list[Job[Any]] = [first]
                nxt: Job[Any] | None = None
                stopping = False
                # This thread alone takes from the queue: not empty, a job is there to take
                # (a lone caller's group ends here without an exception raised and caught).
                while len(group) < _MAX_GROUP and not self._queue.empty():
                    nxt = self._queue.get_nowait()
                    if nxt is None:
                        stopping = True
                        break
                    group.append(nxt)
                self._run_group(conn, group)
                # Let go of the group before waiting for the next: its jobs hold their
                # results (a history read's rows), which would otherwise stay alive, and be
                # walked by the collector, for as long as the store is idle.
                first = nxt = None
                group = []
                if stopping:
                    return
        finally:
            conn.close()

    def _run_group(self, conn: sqlite3.Connection, group: list[Job[Any]]) -> None:
        try:
            self._commit_group(conn, group)
        except BaseException as exc:  # the thread must outlive any one group
            _log.error("embedded.group_failed", error=error_label(exc), jobs=len(group))
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            for job in group:
                if job.error is None:
                    job.result = None
                    job.error = exc
        _wake(group)

    def _commit_group(self, conn: sqlite3.Connection, group: list[Job[Any]]) -> None:
        if not self._commit_fast(conn, group):
            self._commit_careful(conn, group)

    def _commit_fast(self, conn: sqlite3.Connection, group: list[Job[Any]]) -> bool:
        """Run the group without savepoints; False (rolled back) if it needs the careful path.

        A store validates everything before its first write, so jobs nearly always either
        succeed or fail before writing; neither needs a savepoint. Only a job that fails
        after writing (SQLite's change counter moved) forces the group to be rerun with one
        savepoint per job. Jobs are functions of the database alone, so a rerun is safe.
        """
        conn.execute("BEGIN IMMEDIATE" if any(job.writes for job in group) else "BEGIN")
        for job in group:
            before = conn.total_changes
            try:
                job.result = job.fn(conn)
            except BaseException as exc:  # delivered to the awaiting task
                job.error = exc
                if conn.total_changes != before or not conn.in_transaction:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    for each in group:
                        each.result, each.error = None, None
                    return False
        conn.execute("COMMIT")
        return True

    def _commit_careful(self, conn: sqlite3.Connection, group: list[Job[Any]]) -> None:
        begin = "BEGIN IMMEDIATE" if any(job.writes for job in group) else "BEGIN"
        conn.execute(begin)
        done: list[Job[Any]] = []  # jobs whose writes wait for this group's commit
        for job in group:
            if job.writes:
                conn.execute("SAVEPOINT job")
            try:
                job.result = job.fn(conn)
            except BaseException as exc:  # delivered to the awaiting task
                job.error = exc
                if job.writes and conn.in_transaction:
                    conn.execute("ROLLBACK TO job")
            if not conn.in_transaction:
                # SQLite rolled the whole transaction back (disk full, I/O error): the jobs
                # before this one lost their writes too, so they fail with the same cause.
                cause = job.error or sqlite3.OperationalError("transaction rolled back")
                for earlier in done:
                    earlier.result, earlier.error = None, cause
                done.clear()
                conn.execute(begin)
                continue
            if job.writes:
                conn.execute("RELEASE job")
            if job.error is None:
                done.append(job)
        conn.execute("COMMIT")
