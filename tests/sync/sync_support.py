"""Shared helpers for the synchronous API's tests: real stores on both transports.

``new_transport`` gives a fresh transport on one store file: the EmbeddedStore itself, or
HttpTransport talking to the dev server (aiohttp on 127.0.0.1) serving that file from an
event loop in a thread of its own, so the sync store's loop and the server's are two
different loops, as they would be for a script talking to a local server.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from server_support import TOKEN

from neotoma_agent import EmbeddedStore, HttpTransport, RetryPolicy, Transport
from neotoma_agent.server import create_app, serving
from neotoma_agent.sync import SyncMemory, SyncStore

NewTransport = Callable[[], Transport]


@contextmanager
def dev_server(path: Path, *, port: int = 0) -> Iterator[str]:
    """The dev server over the store file at ``path``, in a thread; yields its URL."""
    with start_blocking_portal("asyncio") as portal:
        embedded = EmbeddedStore.open(path)
        with (
            portal.wrap_async_context_manager(embedded),
            portal.wrap_async_context_manager(
                serving(create_app(embedded, token=TOKEN), port=port)
            ) as url,
        ):
            yield url


@pytest.fixture(params=["embedded", "http"])
def new_transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NewTransport]:
    """A factory of fresh transports on one store, once per transport kind."""
    path = tmp_path / "memory.db"
    if request.param == "embedded":
        yield lambda: EmbeddedStore.open(path)
        return
    with dev_server(path) as url:
        yield lambda: HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False))


@pytest.fixture
def sync_store(new_transport: NewTransport) -> Iterator[SyncStore]:
    """A SyncStore on the test's store, closed after the test."""
    with SyncStore(new_transport()) as store:
        yield store


def sync_memory(store: SyncStore, conversation_id: str = "chat-1", **kw: Any) -> SyncMemory:
    """A memory with short deadlines, so a failing test fails fast."""
    kw.setdefault("retrieval_timeout", 2.0)
    kw.setdefault("close_timeout", 5.0)
    return SyncMemory(store, conversation_id=conversation_id, platform="tests", **kw)


@pytest.fixture
def ctrl_c() -> Iterator[Callable[[float], threading.Timer]]:
    """``ctrl_c(seconds)``: SIGINT this process that many seconds from now (a real signal,
    handled by Python's own handler in the main thread, as a terminal's Ctrl-C is).

    Python's default handler is installed for the test: a runner started as a background
    job ignores SIGINT, and the test would then test nothing.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timers: list[threading.Timer] = []

    def later(seconds: float) -> threading.Timer:
        # kill(getpid()): a process-directed signal, which Linux delivers to the main
        # thread, waking it from a blocking wait (raise_signal here would hit the timer's).
        timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
        timers.append(timer)
        timer.start()
        return timer

    try:
        yield later
    finally:
        # A press that came too late for the test must not reach the next one (or pytest):
        # it is swallowed here, then the runner's own disposition comes back.
        late: list[int] = []
        signal.signal(signal.SIGINT, lambda signum, frame: late.append(signum))
        for timer in timers:
            timer.cancel()
            timer.join()
        time.sleep(0.01)  # a signal already sent is handled by now
        signal.signal(signal.SIGINT, previous)


def loop_threads() -> list[threading.Thread]:
    """The sync stores' loop threads alive now."""
    return [t for t in threading.enumerate() if t.name.startswith("neotoma-sync:")]
