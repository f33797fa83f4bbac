"""A turn after an outage sees the turn the outbox delivered: the history read waits for it.

The close a server could not take is queued; the next turn of the conversation delivers it
(its user store sends the lane's queue first). Its history read, which runs beside that
store, must read after the delivery: otherwise the turn the user already saw answered shows
``open`` with no reply, and the model never sees it. Against real parts: a dev server on
127.0.0.1 stopped during a turn's body and started again on its port, real outbox files.
When nothing is queued the read costs nothing more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from outbox_support import FAST, Server, outbox_over_http, running_server
from server_support import TOKEN

from neotoma_agent import (
    HttpTransport,
    NeotomaMemory,
    OutboxTransport,
    Transport,
    TurnState,
)
from neotoma_agent.testing import RecordingTransport

pytestmark = pytest.mark.anyio

REPLY = "The reply the user already saw."

#: the ways an application puts an outbox under its memory (no background delivery: the
#: next turn delivers, as when the outage outlasts the poll)
Build = Callable[[str, Path], Transport]
BUILDS: dict[str, Build] = {
    "OutboxTransport": outbox_over_http,
    "wrapped": lambda url, box: RecordingTransport(outbox_over_http(url, box)),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # aiohttp


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with running_server() as srv:
        yield srv


@pytest.mark.parametrize("build", list(BUILDS))
async def test_the_turn_after_an_outage_sees_the_delivered_reply(
    server: Server, tmp_path: Path, build: str
) -> None:
    async with BUILDS[build](server.url, tmp_path / "outbox.db") as transport:
        memory = NeotomaMemory(transport, conversation_id="chat-1")
        async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
            await server.stop()  # the server goes away while the body runs
            t.reply = REPLY
        assert t.result.queued

        await server.start()  # back, on the same port: the next turn delivers the close
        async with memory.turn("And their address?", turn_id="t2") as t:
            [seen] = t.history
            t.reply = "On Main Street."
        assert not t.result.queued
    assert (seen.turn_id, seen.status, seen.reply) == ("t1", TurnState.COMPLETED, REPLY)


async def test_memory_history_after_an_outage_delivers_first(
    server: Server, tmp_path: Path
) -> None:
    async with BUILDS["OutboxTransport"](server.url, tmp_path / "outbox.db") as transport:
        memory = NeotomaMemory(transport, conversation_id="chat-1")
        async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
            await server.stop()
            t.reply = REPLY
        await server.start()
        [seen] = await memory.history()
    assert (seen.status, seen.reply) == (TurnState.COMPLETED, REPLY)


async def test_with_nothing_queued_a_turn_makes_the_calls_it_makes_without_an_outbox(
    server: Server, tmp_path: Path
) -> None:
    async def calls(outbox: bool) -> list[str]:
        recorded = RecordingTransport(HttpTransport(server.url, token=TOKEN, retry=FAST))
        transport: Transport = (
            OutboxTransport(recorded, tmp_path / "outbox.db", background=False)
            if outbox
            else recorded
        )
        async with transport:
            memory = NeotomaMemory(transport, conversation_id=f"chat-{outbox}")
            for n in range(2):
                async with memory.turn(f"question {n}", turn_id=f"t{n}") as t:
                    t.reply = f"answer {n}"
        return sorted(c.method for c in recorded.calls)

    assert await calls(outbox=True) == await calls(outbox=False)
