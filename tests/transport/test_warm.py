"""HttpTransport.warm: connections opened ahead of a turn, never in a turn's way.

A real dev server on 127.0.0.1 that records which TCP connection carried each request.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web
from cli_support import clean_env
from server_support import TOKEN

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport

pytestmark = pytest.mark.anyio

ASYNCIO = pytest.mark.parametrize("anyio_backend", ["asyncio"])


class Server:
    """Which connection each request came on; ``/health`` can be made to hang."""

    def __init__(self) -> None:
        self.connections: list[object] = []  # kept alive, so identities stay unique
        self.hang_health = False
        self.hanging = 0
        self.health_requests = 0
        self.release = asyncio.Event()

    def seen(self, request: web.Request) -> None:
        if not any(c is request.transport for c in self.connections):
            self.connections.append(request.transport)

    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.seen(request)
        self.health_requests += request.path == "/health"
        if request.path == "/health" and self.hang_health:
            self.hanging += 1
            await self.release.wait()
        response: web.StreamResponse = await handler(request)
        return response


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, Server]]:
    server = Server()
    async with EmbeddedStore.open(tmp_path / "s.db") as store:
        app = create_app(store, token=TOKEN, middlewares=[server.middleware])
        async with serving(app) as url:
            yield url, server
            server.release.set()


async def _until(condition: Any) -> None:
    # Polls state that other tasks change (the server's, the warmer's): no event to await.
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


@ASYNCIO
async def test_warm_opens_the_connections_the_next_requests_reuse(
    served: tuple[str, Server],
) -> None:
    url, server = served
    async with HttpTransport(url, token=TOKEN) as transport:
        transport.warm(3)
        await _until(lambda: len(server.connections) == 3 and not transport._warmer.in_flight)
        async with anyio.create_task_group() as tg:
            for name in ("Acme", "Globex", "Initech"):
                tg.start_soon(transport.retrieve_entity_by_identifier, name)
        assert len(server.connections) == 3  # no handshake for any of them


@ASYNCIO
async def test_hanging_warming_requests_never_delay_a_turn_and_end_with_the_transport(
    served: tuple[str, Server],
) -> None:
    url, server = served
    server.hang_health = True
    # A pool of two: warming takes at most one, so the turn always has a connection.
    transport = HttpTransport(url, token=TOKEN, max_connections=2)
    async with transport:
        transport.warm(5)
        await _until(lambda: server.hanging == 1)
        memory = NeotomaMemory(transport, conversation_id="c")
        with anyio.fail_after(20):
            async with memory.turn("hello there", turn_id="t1") as t:
                t.reply = "hi"
        assert t.result.completed
        assert transport._warmer.in_flight == 1
    assert transport._warmer.in_flight == 0
    assert not [task for task in asyncio.all_tasks() if "_warm" in repr(task.get_coro())]


_SILENT_PROGRAM = """
import asyncio, socket, sys
from neotoma_agent.transport.http import HttpTransport

async def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    async with HttpTransport(f"http://127.0.0.1:{port}") as transport:
        transport.warm(2)
        while transport._warmer.in_flight:
            await asyncio.sleep(0.01)
        transport.warm(3)  # still in flight when the transport closes

asyncio.run(main())
"""


def test_warming_an_unreachable_server_prints_nothing(tmp_path: Path) -> None:
    # A program of its own, as the library's users run it (no test has configured logging).
    script = tmp_path / "program.py"
    script.write_text(_SILENT_PROGRAM)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    assert (result.stdout, result.stderr) == ("", "")


@ASYNCIO
async def test_warm_on_a_closed_transport_does_nothing(served: tuple[str, Server]) -> None:
    url, server = served
    transport = HttpTransport(url, token=TOKEN)
    await transport.aclose()
    transport.warm(2)
    assert transport._warmer.in_flight == 0
    await asyncio.sleep(0.05)
    assert server.connections == []


@ASYNCIO
@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
async def test_warm_refuses_a_count_that_is_not_a_positive_int(bad: Any) -> None:
    async with HttpTransport("http://127.0.0.1:9", token=TOKEN) as transport:
        with pytest.raises(ValueError, match="connections must be an int >= 1"):
            transport.warm(bad)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_warm_under_trio_says_the_transport_is_asyncio_only() -> None:
    # HttpTransport is asyncio-only (conftest skips trio x HTTP for that reason): warm says
    # so at once rather than starting anything.
    transport = HttpTransport("http://127.0.0.1:9", token=TOKEN)
    with pytest.raises(RuntimeError, match="asyncio only"):
        transport.warm(1)
    assert transport._warmer.in_flight == 0


@ASYNCIO
async def test_warm_called_on_every_keystroke_sends_one_batch(served: tuple[str, Server]) -> None:
    url, server = served
    async with HttpTransport(url, token=TOKEN) as transport:
        for _ in range(20):
            transport.warm(2)
        await _until(lambda: not transport._warmer.in_flight)
        transport.warm(3)  # a larger batch is not held back by a smaller one
        await _until(lambda: not transport._warmer.in_flight)
        for _ in range(20):
            transport.warm(3)
        await _until(lambda: not transport._warmer.in_flight)
    # 2, then 3 (reusing the first two connections and opening one more), then nothing.
    assert server.health_requests == 5
    assert len(server.connections) == 3
