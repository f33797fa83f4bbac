"""``neotoma_agent.ui.standalone_app`` on a socket from ``neotoma_agent.server.bind_socket``:
the whole of ``neotoma-agent ui`` in code, as the web view's guide shows it, served on
127.0.0.1 and read with a real client."""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from server_support import TOKEN

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.server import bind_socket, serving
from neotoma_agent.ui import UI_PREFIX, standalone_app

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        await NeotomaMemory(store, conversation_id="ui-chat").record_turn(
            "hello", "hi there", turn_id="t1", retrieve=False
        )
        yield store


async def _status(url: str, *, host: str | None = None, token: str | None = None) -> int:
    headers = {"Host": host} if host else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, allow_redirects=False) as answer,
    ):
        if answer.status == 302:
            assert answer.headers["Location"] == f"{UI_PREFIX}/"
        return answer.status


async def test_the_standalone_view_serves_on_a_socket_bound_first(store: EmbeddedStore) -> None:
    with bind_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        app = standalone_app(store, token=TOKEN, hosts=["127.0.0.1", "box.lan"])
        async with serving(app, sock=sock) as url:
            assert url == f"http://127.0.0.1:{port}"
            assert await _status(f"{url}/") == 302  # the root leads into the view
            assert await _status(f"{url}/", host=f"box.lan:{port}") == 302  # a bound name
            assert await _status(f"{url}{UI_PREFIX}/") == 401  # every page needs the token
            assert await _status(f"{url}{UI_PREFIX}/", token=TOKEN) == 200


async def test_the_standalone_view_refuses_a_rebound_name_on_every_path(
    store: EmbeddedStore,
) -> None:
    with bind_socket("127.0.0.1", 0) as sock:
        async with serving(standalone_app(store, token=TOKEN), sock=sock) as url:
            for path in ("/", "/no/such/page", f"{UI_PREFIX}/"):
                assert await _status(f"{url}{path}", host="evil.example", token=TOKEN) == 421


def test_bind_socket_fails_before_serving_when_the_port_is_taken() -> None:
    with bind_socket("127.0.0.1", 0) as taken:
        assert taken.type == socket.SOCK_STREAM
        with pytest.raises(OSError, match="in use") as refused:
            bind_socket("127.0.0.1", taken.getsockname()[1])
        assert refused.value.errno == errno.EADDRINUSE
    with pytest.raises(OSError, match="out of range"):
        bind_socket("127.0.0.1", 70000)
