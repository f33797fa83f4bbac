"""The sync API called where an event loop already runs in the calling thread.

A notebook cell runs inside the kernel's asyncio loop; an async app may call a sync
helper. The store's own loop is another loop in another thread, so blocking on it cannot
deadlock the caller's (it only pauses it, as any blocking call does). Each test runs its
scenario in a thread with a deadline, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from neotoma_agent.sync import SyncMemory, SyncStore


def within(seconds: float, scenario: Callable[[], object]) -> object:
    """Run ``scenario`` in a thread; fail if it has not returned within ``seconds``."""
    box: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.append(scenario())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "deadlocked"
    if errors:
        raise errors[0]
    return box[0]


def one_turn(path: Path) -> str | None:
    with SyncStore.open(path) as store:
        memory = SyncMemory(store, conversation_id="nb")
        memory.remember("company", name="Acme Corp")
        with memory.turn("What about Acme Corp?") as t:
            t.reply = f"{len(t.retrieved)} known"
        assert [h.reply for h in memory.history()] == ["1 known"]
        return t.result.stored_status


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_turn_inside_a_running_loop_does_not_deadlock(tmp_path: Path, backend: str) -> None:
    async def cell() -> str | None:
        # What a notebook cell or an async view calling sync code does.
        return one_turn(tmp_path / "m.db")

    assert within(30, lambda: anyio.run(cell, backend=backend)) == "completed"


def test_a_store_opened_in_one_loop_serves_a_thread_without_one(tmp_path: Path) -> None:
    async def open_store() -> SyncStore:
        return SyncStore.open(tmp_path / "m.db")

    store = asyncio.run(open_store())  # that loop is gone now; the store's is not
    try:
        memory = SyncMemory(store, conversation_id="c")
        with memory.turn("hi") as t:
            t.reply = "ok"
        assert t.result.completed
    finally:
        store.close()


def test_calling_the_sync_api_from_the_stores_own_loop_raises_instead_of_deadlocking(
    tmp_path: Path,
) -> None:
    with SyncStore.open(tmp_path / "m.db") as store:
        memory = SyncMemory(store, conversation_id="c")

        async def misuse() -> None:
            memory.history()

        with pytest.raises(RuntimeError, match="own event loop"):
            within(10, lambda: store.call(misuse))
        # The store still works.
        assert memory.history() == ()
