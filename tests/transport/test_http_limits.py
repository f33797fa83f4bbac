"""HttpTransport against hostile servers on loopback: huge, slow and deep answers,
redirects, a certificate nobody vouches for.

An answer is read up to ``max_response_size`` (a ``Content-Length`` above it refused before
reading), JSON too deep to decode is a ``ServerError`` (retried and queued like any server
failure), no redirect is ever followed, for writes or reads, an answer dripped a byte at a
time ends at the timeout, and TLS certificates are verified.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from server_support import TOKEN

from neotoma_agent import NeotomaMemory, OutboxTransport
from neotoma_agent.exceptions import APIError, ConnectionLost, ReadTimeout, ServerError
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = pytest.mark.anyio

ONCE = RetryPolicy(attempts=1, backoff=False)
GB = 1024**3
MB = 1024**2
DEEP = "[" * 10_000 + "]" * 10_000
STORE_ARGS: dict[str, Any] = {
    "entities": [{"entity_type": "company", "canonical_name": "acme", "name": "Acme"}],
    "idempotency_key": "k-1",
}


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp runs on asyncio only."""
    return "asyncio"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def _serve(handler: Handler) -> AsyncIterator[str]:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with serving(app, shutdown_timeout=1.0) as url:
        yield url


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")  # pragma: no cover


class Drip:
    """Streams a JSON-looking body of ``total`` bytes, counting what it got out."""

    def __init__(self, total: int, *, announce: int | None) -> None:
        self.total = total
        self.announce = announce
        self.sent = 0
        self.done = asyncio.Event()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if self.announce is not None:
            resp.content_length = self.announce
        await resp.prepare(request)
        chunk = b"[" + b"0," * (128 * 1024)
        try:
            while self.sent < self.total:
                await resp.write(chunk)
                self.sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: what this counts
        finally:
            self.done.set()
        return resp


@pytest.mark.parametrize("announce", [10 * GB, None], ids=["content-length", "chunked"])
async def test_a_huge_answer_is_refused_and_not_read(announce: int | None) -> None:
    drip = Drip(400 * MB, announce=announce)
    async with _serve(drip) as url:
        before = _rss()
        async with HttpTransport(url, token=TOKEN, retry=ONCE, max_response_size=MB) as transport:
            with pytest.raises(ServerError) as caught:
                await transport.store(**STORE_ARGS)
        grown = _rss() - before
        await asyncio.wait_for(drip.done.wait(), 30)
    assert caught.value.code == "ERR_RESPONSE_TOO_LARGE"
    assert caught.value.status == 502
    # The client hung up early: the server got out what the socket buffers hold, no more.
    assert drip.sent < 64 * MB, drip.sent
    assert grown < 64 * MB, grown


async def test_a_content_length_above_the_default_cap_is_refused_at_once() -> None:
    drip = Drip(400 * MB, announce=10 * GB)
    async with _serve(drip) as url:
        async with HttpTransport(url, token=TOKEN, retry=ONCE) as transport:
            with pytest.raises(ServerError) as caught:
                await transport.get_route("/health", {})
        await asyncio.wait_for(drip.done.wait(), 30)
    assert caught.value.code == "ERR_RESPONSE_TOO_LARGE"
    assert "67,108,864 bytes" in str(caught.value)
    assert drip.sent < 64 * MB


async def test_an_answer_within_the_cap_is_read_whole() -> None:
    body = json.dumps({"ok": True, "pad": "x" * (MB - 100)}).encode()

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, content_type="application/json")

    async with (
        _serve(handler) as url,
        HttpTransport(url, token=TOKEN, retry=ONCE, max_response_size=MB) as transport,
    ):
        answer = await transport.get_route("/health", {})
    assert answer["ok"] is True


def test_max_response_size_must_be_a_positive_int() -> None:
    with pytest.raises(ValueError, match="max_response_size"):
        HttpTransport("http://127.0.0.1:1", token=TOKEN, max_response_size=0)


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
async def test_no_redirect_is_followed_for_a_write_or_a_read(code: int) -> None:
    reached: list[str] = []

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        reached.append(f"{request.method} {request.path} {await request.read()!r}")
        return web.json_response({"ok": True})

    async with _serve(elsewhere) as other:

        async def redirecting(request: web.Request) -> web.StreamResponse:
            return web.Response(status=code, headers={"Location": other + request.path_qs})

        async with (
            _serve(redirecting) as url,
            HttpTransport(url, token="secret-token", retry=ONCE) as transport,
        ):
            with pytest.raises(APIError) as write:
                await transport.store(**STORE_ARGS)
            with pytest.raises(APIError) as read:
                await transport.get_route("/entities", {"limit": 1})
    for caught in (write, read):
        assert type(caught.value) is APIError
        assert caught.value.status == code
        assert caught.value.code == "ERR_REDIRECT_NOT_FOLLOWED"
    assert reached == []  # the other origin received nothing: no content, no token


async def test_a_deep_json_answer_is_a_server_error(tmp_path: Path) -> None:
    async def deep(request: web.Request) -> web.StreamResponse:
        return web.Response(text=DEEP, content_type="application/json")

    async with _serve(deep) as url, HttpTransport(url, token=TOKEN, retry=ONCE) as transport:
        with pytest.raises(ServerError) as caught:
            await transport.store(**STORE_ARGS)
    assert caught.value.code == "ERR_RESPONSE_TOO_DEEP"
    assert caught.value.status == 502


async def test_a_deep_error_answer_keeps_the_type_of_its_status() -> None:
    async def deep(request: web.Request) -> web.StreamResponse:
        return web.Response(text=DEEP, status=404, content_type="application/json")

    async with _serve(deep) as url, HttpTransport(url, token=TOKEN, retry=ONCE) as transport:
        with pytest.raises(APIError) as caught:
            await transport.get_route("/entities/ent_x", {})
    assert caught.value.status == 404


async def test_a_deep_answer_to_a_closing_store_is_queued_in_the_outbox(tmp_path: Path) -> None:
    stores: list[int] = []

    @web.middleware
    async def deep_closing(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/store":
            stores.append(1)
            if len(stores) > 1:  # the opening store passes, the closing one gets a deep answer
                return web.Response(text=DEEP, content_type="application/json")
        result: web.StreamResponse = await handler(request)
        return result

    async with EmbeddedStore.open(":memory:") as store:
        app = create_app(store, token=TOKEN, middlewares=[deep_closing])
        async with (
            serving(app, shutdown_timeout=2.0) as url,
            OutboxTransport(
                HttpTransport(url, token=TOKEN, retry=ONCE),
                tmp_path / "outbox.db",
                background=False,
            ) as transport,
        ):
            memory = NeotomaMemory(transport, conversation_id="deep")
            async with memory.turn("Tell me about Acme") as t:
                t.reply = "Acme is a client"
    assert t.result.queued, t.result


async def test_an_answer_dripped_a_byte_at_a_time_ends_at_the_timeout() -> None:
    stop = asyncio.Event()

    async def drip(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        try:
            while not stop.is_set():
                await resp.write(b" ")
                await asyncio.sleep(0.05)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    async with (
        _serve(drip) as url,
        HttpTransport(url, token=TOKEN, retry=ONCE, timeout=0.5) as transport,
    ):
        with pytest.raises(ReadTimeout):
            await transport.store(**STORE_ARGS)
        stop.set()


@pytest.fixture
def self_signed(tmp_path: Path) -> ssl.SSLContext:
    """A server's TLS context with a certificate it signed itself, for 127.0.0.1."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl program (to make a self-signed certificate)")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def test_a_self_signed_certificate_is_refused(self_signed: ssl.SSLContext) -> None:
    reached: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        reached.append(request.path)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self_signed)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        async with HttpTransport(f"https://127.0.0.1:{port}", token=TOKEN, retry=ONCE) as transport:
            with pytest.raises(ConnectionLost):
                await transport.store(**STORE_ARGS)
    finally:
        await runner.cleanup()
    assert reached == []  # nothing sent to a server whose certificate nobody vouches for
