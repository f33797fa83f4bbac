"""Many threads at once on one SyncStore (a threaded WSGI server), and no leaked threads."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from cli_support import free_port
from server_support import TOKEN
from sync_support import dev_server, loop_threads, new_transport, sync_memory, sync_store

from neotoma_agent import (
    HttpTransport,
    OutboxTransport,
    RetryPolicy,
    Transport,
    TurnStateError,
    outbox_status,
)
from neotoma_agent.sync import SyncStore, SyncTurn
from neotoma_agent.testing import FaultyTransport

__all__ = ["new_transport", "sync_store"]  # fixtures

THREADS = 32
TURNS = 3


def test_32_threads_run_their_turns_at_once_on_one_store(sync_store: SyncStore) -> None:
    # Every thread is inside a turn body at the same moment (the barrier): turns do not
    # serialise on the store's loop, each runs in its own thread.
    together = threading.Barrier(THREADS, timeout=30)
    errors: list[BaseException] = []
    results: dict[str, list[str]] = {}

    def worker(n: int) -> None:
        try:
            memory = sync_memory(sync_store, f"conv-{n}")
            statuses = []
            for i in range(TURNS):
                with memory.turn(f"question {i} from {n}", turn_id=f"t{i}") as t:
                    if i == 0:
                        together.wait()
                    for chunk in t.stream([f"answer {i} ", f"to {n}"]):
                        assert chunk
                statuses.append(t.result.stored_status or "")
            assert [h.reply for h in memory.history(limit=None)] == [
                f"answer {i} to {n}" for i in range(TURNS)
            ]
            results[f"conv-{n}"] = statuses
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    assert len(results) == THREADS
    assert all(statuses == ["completed"] * TURNS for statuses in results.values())


def test_many_threads_share_one_conversation(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store, "shared")
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with memory.turn(f"q{n}", turn_id=f"t{n:02d}", turn_number=n) as t:
                t.reply = f"a{n}"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    history = memory.history(limit=None)
    assert sorted((h.user, h.reply, h.status) for h in history) == sorted(
        (f"q{n}", f"a{n}", "completed") for n in range(THREADS)
    )


def test_closing_the_store_stops_its_loop_and_the_transport_threads(
    new_transport: Callable[[], Transport],
) -> None:
    before = {t.ident for t in threading.enumerate()}
    with SyncStore(new_transport()) as store:
        with sync_memory(store).turn("hi") as t:
            t.reply = "ok"
        assert store.loop_thread.is_alive()
        assert store.loop_thread in loop_threads()
    assert not store.loop_thread.is_alive()
    assert store.closed
    left = [t for t in threading.enumerate() if t.ident not in before]
    # The loop's shutdown tells anyio's worker threads to stop without joining them: give
    # them a moment (a thread nothing stopped would idle for anyio's 10 s first).
    for thread in left:
        thread.join(timeout=5)
    assert [t for t in left if t.is_alive()] == []
    store.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        sync_memory(store).remember("company", name="Acme")


def test_closing_the_store_abandons_a_turn_still_open_in_another_thread(
    sync_store: SyncStore,
) -> None:
    memory = sync_memory(sync_store)
    in_body, closed = threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []
    turns: list[SyncTurn] = []

    def worker() -> None:
        try:
            with memory.turn("hi", turn_id="t1") as t:
                turns.append(t)
                t.reply = "Partial"
                in_body.set()
                closed.wait(10)
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=worker)
    thread.start()
    assert in_body.wait(10)
    # What asyncio.run does to the tasks left at its end: the turn is recorded abandoned
    # with the reply so far (read back after close, from the same file or server).
    sync_store.close()
    closed.set()
    thread.join(10)
    (error,) = outcome
    assert isinstance(error, TurnStateError)
    assert "closed" in str(error)
    (t,) = turns
    assert t.result.stored_status == "abandoned"
    assert t.result.error_class == "asyncio.exceptions.CancelledError"
    assert t.result.reply_chars == len("Partial")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_store_used_in_a_forked_child_raises_instead_of_hanging(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # the child: its copy of the store has no loop thread
        code = 3
        try:
            memory.history()
        except RuntimeError as exc:
            code = 0 if "another process" in str(exc) else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert memory.history() == ()  # the parent's store is untouched


class _HangingClose(FaultyTransport):
    """Releases what it holds, then never returns from aclose."""

    async def aclose(self) -> None:
        await self.inner.aclose()
        await anyio.sleep_forever()


def test_closing_the_store_is_bounded_by_its_close_timeout(
    new_transport: Callable[[], Transport],
) -> None:
    store = SyncStore(_HangingClose(new_transport()), close_timeout=0.3)
    with sync_memory(store).turn("hi") as t:
        t.reply = "ok"
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 3
    assert not store.loop_thread.is_alive()


def test_an_outbox_delivers_from_the_stores_loop(tmp_path: Path) -> None:
    """HttpTransport's background delivery runs on the store's loop: a reply queued while
    the server was down reaches it once the server is back, while the script goes on."""
    db, outbox, port = tmp_path / "server.db", tmp_path / "outbox.db", free_port()
    url = f"http://127.0.0.1:{port}"
    retry = RetryPolicy(attempts=1, backoff=False)
    http = HttpTransport(url, TOKEN, retry=retry)
    with SyncStore(OutboxTransport(http, outbox, poll=0.05)) as store:
        memory = sync_memory(store)
        server = contextlib.ExitStack()
        server.enter_context(dev_server(db, port=port))
        with memory.turn("hi", turn_id="t1") as t:
            t.reply = "Queued, then delivered."
            server.close()  # the server goes down before the closing store
        assert t.result.queued
        assert outbox_status(outbox).queued == 1
        with dev_server(db, port=port):
            deadline = time.monotonic() + 15
            while outbox_status(outbox).queued and time.monotonic() < deadline:
                time.sleep(0.05)
            assert outbox_status(outbox).queued == 0
            assert [h.reply for h in memory.history()] == ["Queued, then delivered."]
