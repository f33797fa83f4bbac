"""The outbox keeps the reply whatever wraps it: it is a transport, and the hints it reads
(the lane, whether a store may wait) travel in the Transport protocol itself.

Issue 24 §1: the engine used to find the outbox by duck typing, so any wrapper (ours, a
user's metrics layer) hid it and a reply the outbox exists to keep was lost with
``TurnCloseError``. Against real parts: a dev server on 127.0.0.1 that goes away during the
body, real outbox files, an embedded store on both anyio backends.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_support import cli, ok
from outbox_support import FAST, Server, outbox_over_http, running_server
from server_support import TOKEN

import neotoma_agent
import neotoma_agent.testing
from neotoma_agent import (
    ConnectionLost,
    EmbeddedStore,
    HttpTransport,
    NeotomaMemory,
    OutboxTransport,
    Transport,
    TurnState,
    outbox_status,
)
from neotoma_agent.testing import FaultyTransport, RecordingTransport, key_phase
from neotoma_agent.transport._forward import Forwarding

pytestmark = pytest.mark.anyio

REPLY = "The reply the user already saw."

Wrap = Callable[[Transport], Transport]

#: every wrapper the package ships (but the outbox itself), and a stack of all of them
WRAPPERS: dict[str, Wrap] = {
    "RecordingTransport": RecordingTransport,
    "FaultyTransport": FaultyTransport,
    "stacked": lambda t: RecordingTransport(FaultyTransport(RecordingTransport(t))),
}


def shipped_wrappers() -> set[str]:
    """The Forwarding subclasses the package's public modules define."""
    found: set[str] = set()
    for module in (neotoma_agent, neotoma_agent.testing):
        for name in getattr(module, "__all__", dir(module)):
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, Forwarding) and obj is not Forwarding:
                found.add(name)
    return found


def test_the_matrix_covers_every_shipped_wrapper() -> None:
    # A new wrapper (the OpenTelemetry layer to come) must join WRAPPERS, so that this file
    # proves the outbox survives it too.
    assert shipped_wrappers() == {*WRAPPERS} - {"stacked"} | {"OutboxTransport"}


@pytest.fixture
def anyio_backend() -> str:
    """A fixture of this module's own: the HTTP tests run on asyncio (aiohttp)."""
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with running_server() as srv:
        yield srv


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
async def test_a_wrapped_outbox_keeps_the_reply_when_the_server_goes_away(
    server: Server, tmp_path: Path, wrapper: str
) -> None:
    box = tmp_path / "outbox.db"
    outbox = outbox_over_http(server.url, box)
    flush = outbox.flush
    transport = WRAPPERS[wrapper](outbox)
    async with transport:
        memory = NeotomaMemory(transport, conversation_id="chat-1", platform="wrapped")
        async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
            await server.stop()
            t.reply = REPLY
        assert t.result.queued
        assert t.result.status is TurnState.COMPLETED
        assert outbox_status(box).queued == 1
        await server.start()
        assert (await flush()).delivered == 1
    assert t.result.assistant_message_id is not None
    snapshot = await server.store.get_entity_snapshot(t.result.assistant_message_id)
    assert snapshot.snapshot["content"] == REPLY
    assert len(await server.store.list_observations(t.result.assistant_message_id)) == 1
    assert outbox_status(box).queued == 0


async def abandon_while_the_server_stops(server: Server, turn: Any) -> None:
    async with turn as t:
        t.reply = "half a rep"
        await server.stop()
        raise KeyError("boom")


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
async def test_a_wrapped_outbox_queues_the_abandoned_record(
    server: Server, tmp_path: Path, wrapper: str
) -> None:
    box = tmp_path / "outbox.db"
    outbox = outbox_over_http(server.url, box)
    async with WRAPPERS[wrapper](outbox) as transport:
        memory = NeotomaMemory(transport, conversation_id="chat-1", platform="wrapped")
        t = memory.turn("Tell me about Acme Corp", turn_id="t1")
        with pytest.raises(KeyError):
            await abandon_while_the_server_stops(server, t)
        assert t.result.queued
        assert t.result.status is TurnState.ABANDONED
        await server.start()
        assert (await outbox.flush()).delivered == 1
    assert t.result.turn_record_id is not None
    record = await server.store.get_entity_snapshot(t.result.turn_record_id)
    assert record.snapshot["status"] == "abandoned"


async def test_wrappers_below_the_outbox_see_the_hints(server: Server, tmp_path: Path) -> None:
    # The other way round: the outbox over a wrapper. The recording shows what travels down.
    recorded = RecordingTransport(HttpTransport(server.url, token=TOKEN, retry=FAST))
    async with OutboxTransport(recorded, tmp_path / "outbox.db", background=False) as transport:
        memory = NeotomaMemory(transport, conversation_id="Chat-1", platform="wrapped")
        async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
            t.reply = REPLY
    stores = recorded.calls_to("store")
    assert [key_phase(c.kwargs["idempotency_key"]) for c in stores] == ["user", "assistant"]
    # The lane is the conversation folded as keys fold it; below the outbox nothing waits.
    assert {c.kwargs["lane"] for c in stores} == {"chat-1"}
    assert {c.kwargs["deferrable"] for c in stores} == {False}
    assert t.result.completed
    assert not t.result.queued


async def test_a_deferrable_store_needs_a_lane(tmp_path: Path) -> None:
    async with OutboxTransport(EmbeddedStore.open(":memory:"), tmp_path / "o.db") as transport:
        entity = {"entity_type": "company", "name": "Acme Corp"}
        with pytest.raises(ValueError, match="lane"):
            await transport.store([entity], idempotency_key="k", deferrable=True)
        plain = await transport.store([entity], idempotency_key="k")
    assert not plain.queued
    assert plain.entities[0].observation_id is not None


async def test_a_closed_outbox_refuses(tmp_path: Path) -> None:
    transport = OutboxTransport(EmbeddedStore.open(":memory:"), tmp_path / "o.db")
    await transport.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await transport.store([{"entity_type": "company", "name": "X"}], idempotency_key="k")


# --- the embedded store, on both backends ---------------------------------------------------


def down_on_close(store: EmbeddedStore) -> FaultyTransport:
    """The embedded store, unreachable for closing stores (the fault a real file never
    gives: the one mock here)."""
    faulty = FaultyTransport(store)
    faulty.fail(
        "store",
        lambda: ConnectionLost("the store went away"),
        when=lambda m, a, kw: key_phase(kw["idempotency_key"]) == "assistant",
    )
    return faulty


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_an_embedded_outbox_keeps_the_reply_under_every_wrapper(
    tmp_path: Path, wrapper: str, backend: str
) -> None:
    async def main() -> None:
        box = tmp_path / "outbox.db"
        async with EmbeddedStore.open(tmp_path / "store.db") as store:
            faulty = down_on_close(store)
            outbox = OutboxTransport(faulty, box, background=False)
            async with WRAPPERS[wrapper](outbox) as transport:
                memory = NeotomaMemory(transport, conversation_id="chat-1", platform="wrapped")
                async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
                    t.reply = REPLY
                assert t.result.queued
                assert (await outbox.status()).queued == 1
                faulty.clear()
                assert (await outbox.flush()).delivered == 1
            assert t.result.assistant_message_id is not None
            async with EmbeddedStore.open(tmp_path / "store.db") as again:
                snap = await again.get_entity_snapshot(t.result.assistant_message_id)
                assert snap.snapshot["content"] == REPLY

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_background_delivery_runs_on_both_backends(tmp_path: Path, backend: str) -> None:
    async def main() -> None:
        box = tmp_path / "outbox.db"
        async with EmbeddedStore.open(":memory:") as store:
            faulty = down_on_close(store)
            async with OutboxTransport(faulty, box, poll=0.02) as transport:
                memory = NeotomaMemory(transport, conversation_id="chat-1", platform="bg")
                async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
                    t.reply = REPLY
                assert t.result.queued
                faulty.clear()
                for _ in range(500):
                    if not (await transport.status()).queued:
                        break
                    await anyio.sleep(0.02)
                assert (await transport.status()).queued == 0
                assert t.result.assistant_message_id is not None
                snap = await store.get_entity_snapshot(t.result.assistant_message_id)
                assert snap.snapshot["content"] == REPLY

    anyio.run(main, backend=backend)


def test_the_command_line_flushes_an_outbox_into_a_store_file(tmp_path: Path) -> None:
    box, db = tmp_path / "outbox.db", tmp_path / "store.db"

    async def queue() -> str | None:
        async with EmbeddedStore.open(db) as store:
            outbox = OutboxTransport(down_on_close(store), box, background=False)
            async with outbox:
                memory = NeotomaMemory(outbox, conversation_id="chat-1", platform="cli")
                async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
                    t.reply = REPLY
        assert t.result.queued
        return t.result.assistant_message_id

    message_id = anyio.run(queue)
    assert message_id is not None
    nowhere = cli("outbox", "flush", "--outbox", str(box), home=tmp_path)
    assert nowhere.returncode == 1  # nowhere to deliver
    assert "pass --url" in nowhere.stderr
    flushed = ok(cli("outbox", "flush", "--outbox", str(box), "--db", str(db), home=tmp_path))
    assert "delivered 1; 0 still queued; 0 dead" in flushed

    async def read() -> str:
        async with EmbeddedStore.open(db) as store:
            return str((await store.get_entity_snapshot(message_id)).snapshot["content"])

    assert anyio.run(read) == REPLY
