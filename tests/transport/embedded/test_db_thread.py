"""The owning DB thread: one savepoint per job, one commit per group, and no lost failures."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from neotoma_agent.transport.embedded._db_thread import DBThread, Job

pytestmark = pytest.mark.anyio


def _connect(path: Path) -> Callable[[], sqlite3.Connection]:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("CREATE TABLE IF NOT EXISTS t (v TEXT PRIMARY KEY)")
        return conn

    return connect


def _insert(value: str) -> Callable[[sqlite3.Connection], str]:
    def fn(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO t (v) VALUES (?)", (value,))
        return value

    return fn


def _rows(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT v FROM t")}


async def _run_as_one_group(
    thread: DBThread, fns: list[Callable[[sqlite3.Connection], Any]]
) -> list[Job[Any]]:
    """Queue ``fns`` while the thread is held by a blocking job, so they form one group."""
    release = threading.Event()
    held = threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        held.set()
        release.wait(5)

    blocker: Job[None] = Job(hold)
    thread.submit(blocker)
    await anyio.to_thread.run_sync(held.wait, 5)
    jobs = [Job(fn) for fn in fns]
    for job in jobs:
        thread.submit(job)
    release.set()
    await blocker.wait()
    for job in jobs:
        # Outcomes are inspected through job.error by the tests.
        with contextlib.suppress(Exception):
            await job.wait()
    return jobs


async def test_a_failing_job_rolls_back_alone(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    thread = DBThread(_connect(path), "test")
    try:

        def fail(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t (v) VALUES ('half-written')")
            raise ValueError("boom")

        jobs = await _run_as_one_group(thread, [_insert("a"), fail, _insert("b")])
        assert [j.error is None for j in jobs] == [True, False, True]
        assert isinstance(jobs[1].error, ValueError)
        assert _rows(path) == {"a", "b"}
    finally:
        thread.stop()


async def test_a_vanished_transaction_fails_the_jobs_it_took_with_it(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    thread = DBThread(_connect(path), "test")
    try:

        def lose_transaction(conn: sqlite3.Connection) -> None:
            # What SQLite does on some I/O errors: the whole transaction is rolled back.
            conn.execute("ROLLBACK")
            raise sqlite3.OperationalError("disk I/O error")

        jobs = await _run_as_one_group(thread, [_insert("a"), lose_transaction, _insert("b")])
        # "a" was in the rolled-back transaction: its caller must not be told it is stored.
        assert isinstance(jobs[0].error, sqlite3.OperationalError)
        assert isinstance(jobs[1].error, sqlite3.OperationalError)
        assert jobs[2].error is None
        assert _rows(path) == {"b"}
    finally:
        thread.stop()


async def test_the_thread_survives_failures_and_serves_many_callers(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    thread = DBThread(_connect(path), "test")
    try:
        failed = Job(lambda conn: conn.execute("INSERT INTO nope VALUES (1)"))
        thread.submit(failed)
        with pytest.raises(sqlite3.OperationalError):
            await failed.wait()

        async def caller(i: int) -> None:
            job = Job(_insert(f"v{i}"))
            thread.submit(job)
            assert await job.wait() == f"v{i}"

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(caller, i)
        assert len(_rows(path)) == 200
    finally:
        thread.stop()


async def test_a_cancelled_waiter_leaves_its_job_to_finish_and_its_group_woken(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    thread = DBThread(_connect(path), "test")
    release = threading.Event()
    held = threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        held.set()
        release.wait(5)

    try:
        blocker: Job[None] = Job(hold)
        thread.submit(blocker)
        await anyio.to_thread.run_sync(held.wait, 5)
        # Queued behind the blocker, so the two run and are woken as one group.
        left, stayed = Job(_insert("left")), Job(_insert("stayed"))
        with anyio.move_on_after(0.05):
            thread.submit(left)
            await left.wait()  # its waiter gives up before the job runs
        thread.submit(stayed)
        release.set()
        with anyio.fail_after(10):
            assert await stayed.wait() == "stayed"
        # The job whose waiter left still ran and committed with its group.
        assert _rows(path) == {"left", "stayed"}
    finally:
        release.set()
        thread.stop()


async def test_a_connect_failure_is_raised_to_the_opener(tmp_path: Path) -> None:
    def connect() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        DBThread(connect, "test")


async def test_a_read_only_job_takes_no_savepoint(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    statements: list[str] = []

    def connect() -> sqlite3.Connection:
        conn = _connect(path)()
        conn.set_trace_callback(statements.append)
        return conn

    thread = DBThread(connect, "test")
    try:
        job = Job(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0], writes=False)
        thread.submit(job)
        assert await job.wait() == 0
        assert not any(s.startswith("SAVEPOINT") for s in statements)
        assert "BEGIN" in statements  # a read-only group takes no write lock
    finally:
        thread.stop()


async def test_jobs_that_fail_before_writing_need_no_savepoints(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    statements: list[str] = []

    def connect() -> sqlite3.Connection:
        conn = _connect(path)()
        conn.set_trace_callback(statements.append)
        return conn

    thread = DBThread(connect, "test")
    try:

        def refuse(conn: sqlite3.Connection) -> None:
            raise ValueError("bad input, refused before any write")

        jobs = await _run_as_one_group(thread, [_insert("a"), refuse, _insert("b")])
        assert [j.error is None for j in jobs] == [True, False, True]
        assert _rows(path) == {"a", "b"}
        assert not any(s.startswith("SAVEPOINT") for s in statements)
    finally:
        thread.stop()


async def test_a_job_that_fails_after_writing_reruns_the_group_carefully(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    runs: list[str] = []

    def counted(value: str) -> Callable[[sqlite3.Connection], str]:
        def fn(conn: sqlite3.Connection) -> str:
            runs.append(value)
            return _insert(value)(conn)

        return fn

    thread = DBThread(_connect(path), "test")
    try:

        def half_write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t (v) VALUES ('half')")
            raise ValueError("failed after a write")

        jobs = await _run_as_one_group(thread, [counted("a"), half_write, counted("b")])
        assert [j.error is None for j in jobs] == [True, False, True]
        assert _rows(path) == {"a", "b"}  # the half write is gone, the others are stored once
        assert runs == ["a", "a", "b"]  # "a" ran again in the careful pass
    finally:
        thread.stop()


async def test_an_idle_thread_holds_no_result_of_its_last_group(tmp_path: Path) -> None:
    # A result (a history page's rows) must not stay alive while the store is idle: the
    # caller's turn runs for seconds, and the collector would walk it all that time.
    class Rows:
        pass

    thread = DBThread(_connect(tmp_path / "t.db"), "test")
    try:
        freed = threading.Event()  # set where the last reference goes: the DB thread
        job: Job[Rows] = Job(lambda conn: Rows(), writes=False)
        thread.submit(job)
        result = weakref.ref(await job.wait(), lambda _: freed.set())
        del job
        # The thread lets go once it has woken the group; before the fix it never did.
        assert await anyio.to_thread.run_sync(freed.wait, 5)
        assert result() is None
    finally:
        thread.stop()


async def test_a_job_awaited_after_it_is_done_answers_at_once(tmp_path: Path) -> None:
    # Its wake-up ran before anything waited: the waiter must not sleep for a second one.
    thread = DBThread(_connect(tmp_path / "t.db"), "test")
    try:
        job = Job(_insert("early"))
        thread.submit(job)
        await anyio.sleep(0.2)  # the job runs, commits and is woken meanwhile
        with anyio.fail_after(5):
            assert await job.wait() == "early"
    finally:
        thread.stop()


async def test_a_lone_job_whose_waiter_gave_up_still_commits(tmp_path: Path) -> None:
    # One caller's job is woken alone (no group): its waiter, cancelled while the job
    # runs, is not woken again, the job still commits, and the next caller is served.
    path = tmp_path / "t.db"
    thread = DBThread(_connect(path), "test")
    release = threading.Event()
    started = threading.Event()

    def slow(conn: sqlite3.Connection) -> str:
        started.set()
        release.wait(5)
        return _insert("lone")(conn)

    async def give_up(job: Job[str]) -> None:
        thread.submit(job)
        await job.wait()  # cancelled while the job runs

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(give_up, Job(slow))
            assert await anyio.to_thread.run_sync(started.wait, 5)
            tg.cancel_scope.cancel()
        release.set()
        after = Job(_insert("after"))
        thread.submit(after)
        with anyio.fail_after(10):
            assert await after.wait() == "after"
        assert _rows(path) == {"lone", "after"}
    finally:
        release.set()
        thread.stop()
