"""Surviving network faults: HttpTransport against the dev server with injected failures.

Faults are injected by a test-only middleware just around the route handler (so after
authentication, before or after the store runs), or by raw sockets that never answer or
are not there. Every server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any

import attrs
import pytest
import structlog
from aiohttp import web
from server_support import TOKEN

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.exceptions import (
    AuthenticationError,
    ConnectionLost,
    ConnectTimeout,
    IdempotencyMismatchError,
    NotFoundError,
    RateLimitedError,
    ReadTimeout,
    ServerError,
    TransportError,
    ValidationError,
)
from neotoma_agent.server import Handler, create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(attempts=4, backoff=False)

CONVERSATION = {"entity_type": "conversation", "conversation_id": "chat-1", "title": "Faults"}
MESSAGE = {
    "entity_type": "conversation_message",
    "role": "user",
    "sender_kind": "user",
    "content": "Tell me about Acme Corp",
    "turn_key": "chat-1:t1",
}
PART_OF = {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}
KEY = "conversation-chat-1-t1-user-turn"


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp runs on asyncio only."""
    return "asyncio"


Fault = Callable[[web.Request, Handler], Any]


def _rst(request: web.Request) -> None:
    """Drop the connection with a TCP reset (no FIN, no answer)."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def status(code: int, body: object = None, headers: dict[str, str] | None = None) -> Fault:
    """Answer ``code`` without reaching the store."""

    async def fault(request: web.Request, handler: Handler) -> web.StreamResponse:
        if isinstance(body, str):
            return web.Response(status=code, text=body, headers=headers)
        return web.json_response(body or {}, status=code, headers=headers)

    return fault


async def reset_before_store(request: web.Request, handler: Handler) -> web.StreamResponse:
    _rst(request)
    return web.Response(status=599)  # never sent: the connection is gone


async def lost_after_commit(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)  # the store commits
    _rst(request)  # ... and the answer never reaches the client
    return response


@attrs.define
class Faults:
    """A script of faults per path, consumed one per request; counts what got through."""

    script: dict[str, list[Fault]] = attrs.Factory(dict)
    seen: dict[str, int] = attrs.Factory(dict)
    reached_store: dict[str, int] = attrs.Factory(dict)

    def inject(self, path: str, *faults: Fault) -> None:
        self.script.setdefault(path, []).extend(faults)

    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        self.seen[path] = self.seen.get(path, 0) + 1
        queued = self.script.get(path)

        async def counted(req: web.Request) -> web.StreamResponse:
            self.reached_store[path] = self.reached_store.get(path, 0) + 1
            return await handler(req)

        if queued:
            fault = queued.pop(0)
            result: web.StreamResponse = await fault(request, counted)
            return result
        return await counted(request)


@attrs.define
class Rig:
    store: EmbeddedStore
    faults: Faults
    url: str

    def transport(self, **kwargs: Any) -> HttpTransport:
        kwargs.setdefault("retry", FAST)
        return HttpTransport(self.url, token=TOKEN, **kwargs)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    faults = Faults()
    async with EmbeddedStore.open(":memory:") as store:
        app = create_app(store, token=TOKEN, middlewares=[faults.middleware])
        async with serving(app, shutdown_timeout=2.0) as url:
            yield Rig(store, faults, url)


async def _store_turn(transport: HttpTransport) -> Any:
    return await transport.store(
        [CONVERSATION, MESSAGE], idempotency_key=KEY, relationships=[PART_OF]
    )


async def _observation_counts(store: EmbeddedStore, *entity_ids: str) -> list[int]:
    return [len(await store.list_observations(e)) for e in entity_ids]


def _retries(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "transport.retry"]


# --- transient failures are retried ---------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        status(
            503,
            {
                "error": {
                    "code": "ERR_STORE_POLICY_UNAVAILABLE",
                    "message": "policy service unavailable",
                    "retryable": True,
                }
            },
        ),
        status(502, "<html>Bad Gateway</html>", {"Content-Type": "text/html"}),
        status(504, "Gateway Timeout", {"Content-Type": "text/plain"}),
        status(429, "Write rate limit exceeded, please slow down", {"Retry-After": "60"}),
        reset_before_store,
    ],
    ids=["503-retryable", "502", "504", "429", "reset-before-store"],
)
async def test_transient_failure_is_retried_and_writes_once(rig: Rig, fault: Fault) -> None:
    rig.faults.inject("/store", fault, fault)
    with structlog.testing.capture_logs() as logs:
        async with rig.transport() as transport:
            result = await _store_turn(transport)
    assert not result.replayed
    assert rig.faults.seen["/store"] == 3
    assert rig.faults.reached_store["/store"] == 1
    assert [e["attempt"] for e in _retries(logs)] == [1, 2]
    counts = await _observation_counts(rig.store, result.entity_id(0), result.entity_id(1))
    assert counts == [1, 1]


async def test_response_lost_after_commit_replays_without_writing_twice(rig: Rig) -> None:
    rig.faults.inject("/store", lost_after_commit)
    with structlog.testing.capture_logs() as logs:
        async with rig.transport() as transport:
            result = await _store_turn(transport)
    # The first attempt committed; the retry under the same key is a replay, aligned by
    # identity (the replay lists the message first) and writing nothing.
    assert rig.faults.reached_store["/store"] == 2
    assert result.replayed
    assert [e.entity_type for e in result.entities] == ["conversation", "conversation_message"]
    assert result.entities[1].snapshot is not None
    assert result.entities[1].snapshot["content"] == MESSAGE["content"]
    assert len(_retries(logs)) == 1
    assert _retries(logs)[0]["error"] == "ConnectionLost"
    counts = await _observation_counts(rig.store, result.entity_id(0), result.entity_id(1))
    assert counts == [1, 1]


async def test_retry_after_is_waited_for(rig: Rig) -> None:
    rig.faults.inject("/store", status(429, "slow down", {"Retry-After": "1"}))
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        async with rig.transport(retry=RetryPolicy(wait_initial=0.0)) as transport:
            await _store_turn(transport)
    assert time.monotonic() - started >= 1.0
    assert _retries(logs)[0]["wait_s"] == 1.0
    assert _retries(logs)[0]["status"] == 429


async def test_retries_are_bounded_by_attempts(rig: Rig) -> None:
    unavailable = status(
        503, {"error_code": "X", "message": "down", "details": {"retryable": True}}
    )
    rig.faults.inject("/store", *[unavailable] * 10)
    async with rig.transport(retry=RetryPolicy(attempts=3, backoff=False)) as transport:
        with pytest.raises(ServerError) as info:
            await _store_turn(transport)
    assert info.value.status == 503
    assert info.value.retryable
    assert rig.faults.seen["/store"] == 3
    assert "/store" not in rig.faults.reached_store


# --- what is never retried ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "body", "error"),
    [
        (400, {"error_code": "VALIDATION_ERROR", "message": "bad"}, ValidationError),
        (401, {"error_code": "AUTH_INVALID", "message": "no"}, AuthenticationError),
        (404, "<pre>Cannot POST /store</pre>", NotFoundError),
        (500, {"error_code": "DB_QUERY_FAILED", "message": "boom"}, ServerError),
    ],
)
async def test_client_errors_are_not_retried(
    rig: Rig, code: int, body: object, error: type[Exception]
) -> None:
    headers = {"Content-Type": "text/html"} if isinstance(body, str) else None
    rig.faults.inject("/store", status(code, body, headers))
    with structlog.testing.capture_logs() as logs:
        async with rig.transport() as transport:
            with pytest.raises(error):
                await _store_turn(transport)
    assert rig.faults.seen["/store"] == 1
    assert not _retries(logs)


async def test_retryable_flag_on_a_4xx_is_not_trusted(rig: Rig) -> None:
    rig.faults.inject(
        "/store",
        status(400, {"error": {"code": "ERR_X", "message": "no", "retryable": True}}),
    )
    async with rig.transport() as transport:
        with pytest.raises(ValidationError):
            await _store_turn(transport)
    assert rig.faults.seen["/store"] == 1


async def test_real_refusals_from_the_store_are_not_retried(rig: Rig) -> None:
    async with rig.transport() as transport:
        await _store_turn(transport)
        changed = dict(MESSAGE, content="something else")
        with pytest.raises(IdempotencyMismatchError) as info:
            await transport.store(
                [CONVERSATION, changed], idempotency_key=KEY, relationships=[PART_OF]
            )
    assert info.value.code == "ERR_IDEMPOTENCY_MISMATCH"
    assert rig.faults.seen["/store"] == 2


# --- servers that never answer, or are not there -------------------------------------------


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """Accepts connections and reads requests, but never answers."""
    writers: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_server_that_never_answers_times_out_within_the_bound(silent_server: str) -> None:
    started = time.monotonic()
    policy = RetryPolicy(attempts=2, backoff=False)
    async with HttpTransport(silent_server, token=TOKEN, timeout=0.3, retry=policy) as transport:
        with pytest.raises(ReadTimeout):
            await transport.get_entity_snapshot("ent_x")
    elapsed = time.monotonic() - started
    assert 0.6 <= elapsed < 2.0  # two attempts of 0.3 s each


async def test_total_time_bound_cuts_a_long_attempt(silent_server: str) -> None:
    started = time.monotonic()
    policy = RetryPolicy(attempts=10, timeout=0.5, backoff=False)
    async with HttpTransport(silent_server, token=TOKEN, timeout=30.0, retry=policy) as transport:
        with pytest.raises(ReadTimeout):
            await transport.get_entity_snapshot("ent_x")
    assert time.monotonic() - started < 1.5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_server_down_is_a_transport_error_after_bounded_retries() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with structlog.testing.capture_logs() as logs:
        async with HttpTransport(
            url, token=TOKEN, retry=RetryPolicy(attempts=3, backoff=False)
        ) as transport:
            with pytest.raises(ConnectionLost, match="cannot connect"):
                await _store_turn(transport)
    assert len(_retries(logs)) == 2


async def test_connect_timeout_is_its_own_error() -> None:
    # A listening socket whose accept queue is full: Linux drops further SYNs, so the
    # connect hangs on loopback without touching any other address.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        policy = RetryPolicy.no_retries()
        async with HttpTransport(
            url, token=TOKEN, connect_timeout=0.2, timeout=5.0, retry=policy
        ) as t:
            started = time.monotonic()
            with pytest.raises(ConnectTimeout):
                await t.get_entity_snapshot("ent_x")
            assert time.monotonic() - started < 2.0
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_every_transport_error_is_a_transport_error() -> None:
    for cls in (ConnectTimeout, ReadTimeout, ConnectionLost):
        assert issubclass(cls, TransportError)
    assert not issubclass(RateLimitedError, TransportError)


async def test_nothing_is_written_when_the_server_is_down_for_the_whole_call() -> None:
    port = _free_port()
    async with HttpTransport(f"http://127.0.0.1:{port}", token=TOKEN, retry=FAST) as transport:
        with pytest.raises(TransportError):
            await _store_turn(transport)
    # The same store, served afterwards on that port, holds nothing from the failed call.
    async with (
        EmbeddedStore.open(":memory:") as store,
        serving(create_app(store, token=TOKEN), port=port) as url,
        HttpTransport(url, token=TOKEN, retry=FAST) as transport,
    ):
        found = await transport.query_entities()
    assert found.total == 0
    assert json.dumps(found.raw["entities"]) == "[]"


# --- whole turns over a faulty network ---------------------------------------------------------


async def passthrough(request: web.Request, handler: Handler) -> web.StreamResponse:
    return await handler(request)


def _memory(transport: HttpTransport) -> NeotomaMemory:
    return NeotomaMemory(
        transport,
        conversation_id="chat-faults",
        platform="tests",
        retrieval_timeout=5.0,
        close_timeout=10.0,
    )


async def _seed_acme(rig: Rig) -> str:
    seeded = await rig.store.store(
        [{"entity_type": "company", "name": "Acme Corp"}], idempotency_key="seed-acme"
    )
    return seeded.entity_id(0)


@pytest.mark.parametrize(
    "script",
    [
        [lost_after_commit, passthrough, lost_after_commit],
        [reset_before_store, passthrough, reset_before_store],
        [status(503, {"error": {"code": "X", "message": "busy", "retryable": True}})] * 2,
        [passthrough, lost_after_commit, lost_after_commit],
    ],
    ids=["lost-on-enter-and-exit", "reset-on-enter-and-exit", "503-on-enter", "lost-twice-on-exit"],
)
async def test_turn_completes_and_every_message_is_stored_once(
    rig: Rig, script: list[Fault]
) -> None:
    acme = await _seed_acme(rig)
    rig.faults.inject("/store", *script)
    async with rig.transport() as transport:
        async with _memory(transport).turn("Tell me about Acme Corp", turn_id="t1") as turn:
            assert turn.retrieved_ids == (acme,)
            turn.reply += "Acme Corp makes anvils."
        result = turn.result
    assert result.completed
    assert result.user_message_id is not None
    assert result.assistant_message_id is not None
    user, assistant = result.user_message_id, result.assistant_message_id
    assert await _observation_counts(rig.store, user, assistant) == [1, 1]
    reply = await rig.store.get_entity_snapshot(assistant)
    assert reply.snapshot["content"] == "Acme Corp makes anvils."
    for message in (user, assistant):
        related = await rig.store.retrieve_related_entities(
            message, relationship_types=["REFERS_TO"], direction="outbound"
        )
        assert [r.target_entity_id for r in related.relationships] == [acme]
        assert related.relationships[0].observation_count == 1


async def test_server_down_for_the_whole_turn_does_not_open_it() -> None:
    body_ran = False
    url = f"http://127.0.0.1:{_free_port()}"
    async with HttpTransport(url, token=TOKEN, retry=FAST) as transport:
        with pytest.raises(TransportError):
            async with _memory(transport).turn("Tell me about Acme Corp", turn_id="t1"):
                body_ran = True
    assert not body_ran


async def test_store_unreachable_for_the_whole_turn_writes_nothing(rig: Rig) -> None:
    await _seed_acme(rig)
    rig.faults.inject("/store", *[reset_before_store] * 20)
    body_ran = False
    async with rig.transport() as transport:
        with pytest.raises(ConnectionLost):
            async with _memory(transport).turn("Tell me about Acme Corp", turn_id="t1"):
                body_ran = True
    assert not body_ran
    # The user store, then its replay: a lost connection may follow a commit, so the enter
    # tries to close the turn as abandoned (replay first) before the error goes on.
    assert rig.faults.seen["/store"] == 2 * FAST.attempts
    for entity_type in ("conversation", "conversation_message", "conversation_turn"):
        assert (await rig.store.query_entities(entity_type=entity_type)).total == 0
