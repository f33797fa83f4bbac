"""Warming requests: keep-alive connections opened (or refreshed) before a turn needs them.

A server closes a keep-alive connection left idle for a while (Node's default is 5 s), so a
turn that starts after the user paused pays a TCP handshake (and over TLS a TLS one) before
each of its first requests. :meth:`HttpTransport.warm` sends ``n`` concurrent
``GET /health`` in the background: each takes a connection of its own from the pool,
opening one if none is idle, and leaves it idle and fresh for the turn that follows.

Calling it often is cheap: while a batch of at least as many connections started less than
a second ago (or is still running), another call sends nothing, so a UI may call it on
every keystroke.

What a warming request may never do: delay or fail anything else (it runs in a task of its
own, at most half the pool, and every failure is swallowed), outlive the transport
(:meth:`Warmer.aclose` cancels and awaits what is still running) or print anything (a
failure is a DEBUG event).
"""

from __future__ import annotations

import asyncio

import aiohttp

from .._records.checks import check_positive_int
from .._util.log import get_logger
from ._limits import read_capped

__all__ = ["Warmer"]

_log = get_logger()

#: a call within this many seconds of a batch at least as large sends nothing
_COALESCE_S = 1.0
#: a warming request that has not been answered by then is given up
_TIMEOUT_S = 30.0
# A health answer is a few hundred bytes: a warming request reads no more than this.
_MAX_ANSWER = 1024 * 1024


class Warmer:
    """The warming requests of one transport, in flight."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._last: tuple[float, int] = (-_COALESCE_S, 0)  # (loop time, connections)

    @property
    def in_flight(self) -> int:
        """Warming batches still running."""
        return len(self._tasks)

    @staticmethod
    def size(connections: object, max_connections: int) -> int:
        """How many to warm: ``connections`` (an int >= 1), at most half the pool."""
        connections = check_positive_int(connections, "connections")
        # The other half stays free: a turn never waits behind a slow warming request.
        return min(connections, max(1, max_connections // 2))

    def start(self, session: aiohttp.ClientSession, url: str, connections: int) -> None:
        """Send ``connections`` concurrent ``GET url`` in a background task (returns at once)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        started, size = self._last
        if size >= connections and (now - started < _COALESCE_S or self._tasks):
            return
        self._last = (now, connections)
        task = loop.create_task(self._warm(session, url, connections))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _warm(self, session: aiohttp.ClientSession, url: str, connections: int) -> None:
        # Each request gives up after _TIMEOUT_S; aclose cancels what is left before that.
        limit = aiohttp.ClientTimeout(total=_TIMEOUT_S)

        async def one() -> None:
            try:
                async with session.get(url, timeout=limit, allow_redirects=False) as resp:
                    await read_capped(resp, _MAX_ANSWER, "warm")
            except Exception as exc:  # a warming request never fails anything
                _log.debug("transport.warm_failed", error=type(exc).__name__)

        await asyncio.gather(*(one() for _ in range(connections)))

    async def aclose(self) -> None:
        """Cancel the warming requests still in flight and wait until they have ended."""
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
