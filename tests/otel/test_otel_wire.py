"""Trace context on the wire: every HTTP request of a traced turn carries the W3C
``traceparent`` of the span it belongs to, and a retried request is an event on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from otel_support import Served, Telemetry
from server_support import TOKEN

from neotoma_agent import NeotomaMemory
from neotoma_agent.reads import identify
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = pytest.mark.anyio


def parse(traceparent: str) -> tuple[int, int]:
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00"
    assert int(flags, 16) & 1  # sampled
    return int(trace_id, 16), int(span_id, 16)


@pytest.mark.parametrize("served", ["http"], indirect=True)
async def test_every_request_carries_its_spans_traceparent(
    served: Served, telemetry: Telemetry
) -> None:
    memory = NeotomaMemory(served.transport, conversation_id="chat-wire", platform="tests")
    await memory.remember("company", name="Acme Corp")
    # The transport asks once whose its token is (GET /me) before it derives ids; asked
    # here, the turn's requests are its stores' and reads' alone.
    await identify(served.transport)
    served.headers.clear()
    async with memory.turn("Acme Corp?") as t:
        t.reply = "A customer."
    spans = {s.context.span_id: s for s in telemetry.finished()}
    turn = telemetry.turn()
    assert served.headers, "the dev server saw the turn's requests"
    for request in served.headers:
        assert "traceparent" in request, request["path"]
        trace_id, span_id = parse(request["traceparent"])
        assert trace_id == turn.context.trace_id
        # Each request belongs to a store span of the turn, named for what it did.
        owner = spans[span_id]
        assert owner.name in {"search_memory", "upsert_memory"}
        assert owner.parent is not None
        assert owner.parent.span_id == turn.context.span_id
    stores = [h for h in served.headers if h["path"] == "/store"]
    assert len(stores) == 2


async def test_no_traceparent_without_a_provider(tmp_path: Path, anyio_backend: str) -> None:
    # No telemetry fixture: the API's defaults, no provider configured.
    if anyio_backend != "asyncio":
        pytest.skip("HttpTransport runs on asyncio only")
    seen: list[str | None] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(request.headers.get("traceparent"))
        return await handler(request)

    async with (
        EmbeddedStore.open(tmp_path / "m.db") as store,
        serving(create_app(store, token=TOKEN, middlewares=[record])) as url,
        HttpTransport(url, token=TOKEN) as http,
        NeotomaMemory(http, conversation_id="c", platform="tests").turn("hi") as t,
    ):
        t.reply = "hello"
    assert seen
    assert set(seen) == {None}


async def test_a_retry_is_an_event_and_counted(
    tmp_path: Path, telemetry: Telemetry, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("HttpTransport runs on asyncio only")
    failures = {"left": 1}

    @web.middleware
    async def flaky(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/store" and failures["left"]:
            failures["left"] -= 1
            return web.json_response({"error": "busy"}, status=503)
        return await handler(request)

    async with (
        EmbeddedStore.open(tmp_path / "m.db") as store,
        serving(create_app(store, token=TOKEN, middlewares=[flaky])) as url,
        HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
        NeotomaMemory(http, conversation_id="c", platform="tests").turn("hi") as t,
    ):
        t.reply = "hello"
    assert t.result.completed
    (user,) = [
        s for s in telemetry.named("upsert_memory") if s.attributes["neotoma_agent.phase"] == "user"
    ]
    (retry,) = user.events
    assert retry.name == "neotoma_agent.retry"
    assert retry.attributes["url.path"] == "/store"
    assert retry.attributes["attempt"] == 1
    assert retry.attributes["error.type"] == "ServerError"
    (count,) = telemetry.points("neotoma_agent.store.retries")
    assert count.value == 1
