"""HttpTransport(user_id=): every request acts for one user, as Neotoma reads it.

A loopback aiohttp server records what the transport sends: ``user_id`` in every POST body
and GET query, nothing without it; a bad id refused before any request; the id never in
``repr`` nor in a log event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent import HttpTransport, RetryPolicy
from neotoma_agent.exceptions import InvalidUserIdError, ServerError
from neotoma_agent.server import serving

pytestmark = pytest.mark.anyio

USER = "alice@example.com"


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp runs on asyncio only."""
    return "asyncio"


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "body": json.loads(raw) if raw else None,
            }
        )
        if request.path.startswith("/recent_conversations/"):
            return web.json_response({"conversation": None, "messages": []})
        if request.path == "/recent_conversations":
            return web.json_response({"conversations": [], "total": 0})
        return web.json_response({"entities": [], "total": 0})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with serving(app) as url:
        yield seen, url


async def _every_kind_of_request(transport: HttpTransport) -> None:
    await transport.retrieve_entity_by_identifier("Acme")
    await transport.query_entities(entity_type="company")
    await transport.request("store", {"entities": [], "user_id": "someone-else"})
    await transport.get_route("/entities", {"entity_type": "company"})
    await transport.recent_conversations(limit=1)


async def test_every_request_carries_the_user(recorder: tuple[list[dict[str, Any]], str]) -> None:
    seen, url = recorder
    async with HttpTransport(url, user_id=USER, retry=RetryPolicy(attempts=1)) as transport:
        await _every_kind_of_request(transport)
    assert len(seen) == 5
    for sent in seen:
        carried = sent["body"] if sent["method"] == "POST" else sent["query"]
        # A body naming another user is overridden: the transport is scoped to its user.
        assert carried["user_id"] == USER, sent["path"]


async def test_no_user_id_is_sent_without_one(recorder: tuple[list[dict[str, Any]], str]) -> None:
    seen, url = recorder
    async with HttpTransport(url, retry=RetryPolicy(attempts=1)) as transport:
        await transport.retrieve_entity_by_identifier("Acme")
        await transport.get_route("/entities", {"entity_type": "company"})
    assert "user_id" not in seen[0]["body"]
    assert "user_id" not in seen[1]["query"]


@pytest.mark.parametrize("bad", ["", " alice", "a\x00b", "x" * 10_000, 7, b"alice"])
def test_a_bad_user_id_is_refused_before_any_request(bad: object) -> None:
    with pytest.raises(InvalidUserIdError) as caught:
        HttpTransport("http://127.0.0.1:9", user_id=bad)  # type: ignore[arg-type]
    if isinstance(bad, str) and bad:
        assert bad.strip() not in str(caught.value)


@given(st.text(max_size=40).map(lambda text: f"zq{text}"))
def test_any_user_id_is_accepted_or_refused_with_the_typed_error(user: str) -> None:
    refused: InvalidUserIdError | None = None
    try:
        transport = HttpTransport("http://127.0.0.1:9", user_id=user)
    except InvalidUserIdError as exc:
        refused = exc
    if refused is not None:
        assert "zq" not in str(refused)  # the id is never quoted
    else:
        assert transport.user_id == user
        assert user not in repr(transport)


def test_tenant_id_follows_the_server_s_ids() -> None:
    plain = HttpTransport("http://127.0.0.1:9", user_id=USER)
    assert plain.tenant_id is None  # a server whose ids ignore the user (Neotoma's default)
    scoped = HttpTransport("http://127.0.0.1:9", user_id=USER, tenant_scoped_ids=True)
    assert scoped.tenant_id == USER
    assert HttpTransport("http://127.0.0.1:9").tenant_id is None
    with pytest.raises(ValueError, match="user_id"):
        HttpTransport("http://127.0.0.1:9", tenant_scoped_ids=True)


async def test_the_user_id_is_in_no_log_event_nor_error(tmp_path: Any) -> None:
    fails = {"left": 1}

    async def flaky(request: web.Request) -> web.StreamResponse:
        if request.path == "/down" or fails["left"]:
            fails["left"] -= 1
            return web.json_response({"error": "busy"}, status=503)
        return web.json_response({"entities": [], "total": 0})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", flaky)
    async with serving(app) as flaky_url:
        policy = RetryPolicy(attempts=2, backoff=False)
        with structlog.testing.capture_logs() as events:
            async with HttpTransport(flaky_url, user_id=USER, retry=policy) as transport:
                await transport.retrieve_entity_by_identifier("Acme")
                fails["left"] = 1
                await transport.get_route("/entities", {"limit": 1})  # the id is in the query
                with pytest.raises(ServerError) as caught:
                    await transport.get_route("/down", {"limit": 1})
    assert [e["event"] for e in events].count("transport.retry") == 3
    # Not even URL-encoded (alice%40example.com): no query goes into an event or an error.
    assert "alice" not in repr(events)
    assert "alice" not in str(caught.value) + repr(caught.value)
