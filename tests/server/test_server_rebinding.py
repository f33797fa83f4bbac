"""DNS rebinding and cross-site writes: `serve` and `ui` answer only to their own address.

A web page can point its own name at 127.0.0.1; the browser then sends the page's requests
to the local server as same-origin, with the page's name in ``Host``. Both applications
(``serve``, with the web view under /ui/, and the standalone ``ui``) must refuse such a
request on every route before anything runs, token or not, and refuse a write that a
browser marks as coming from another site.

Every server here is real (aiohttp on 127.0.0.1, or ::1) and holds a real store file.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from server_support import TOKEN

from neotoma_agent.server import create_app, serving
from neotoma_agent.server._app import _mount_ui
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

jinja2 = pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from neotoma_agent.ui._app import standalone_app  # noqa: E402

NOTE = {"entities": [{"entity_type": "note", "title": "n", "content": "c"}], "idempotency_key": "k"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}

#: (method, path, body) of routes of ``serve``: REST reads and writes, the view, its
#: static file, its JSON twin, an unrouted path
SERVE_ROUTES = [
    ("GET", "/health", None),
    ("POST", "/store", NOTE),
    ("POST", "/entities/query", {}),
    ("POST", "/retrieve_entity_by_identifier", {"identifier": "x"}),
    ("GET", "/entities", None),
    ("GET", "/ui", None),
    ("GET", "/ui/", None),
    ("GET", "/ui/api/conversations", None),
    ("GET", "/ui/api/conversation?id=c", None),
    ("GET", "/ui/static/ui.css", None),
    ("GET", "/ui/?token=" + TOKEN, None),
    ("GET", "/nowhere", None),
]
UI_ROUTES = [
    ("GET", "/", None),
    ("GET", "/ui/", None),
    ("GET", "/ui/health", None),
    ("GET", "/ui/api/conversations", None),
    ("GET", "/ui/static/ui.css", None),
    ("GET", "/ui/?token=" + TOKEN, None),
    ("POST", "/ui/", {}),
    ("GET", "/nowhere", None),
]


def _foreign_hosts(port: int) -> list[str]:
    return [
        f"evil.example:{port}",
        "evil.example",
        f"localhost.evil.example:{port}",
        f"127.0.0.1.nip.io:{port}",
        f"127.0.0.1:{port + 1 if port < 65535 else port - 1}",  # another port: another origin
        "127.0.0.1",  # port 80 implied
        f"user@127.0.0.1:{port}",
        "",
    ]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as s:
        yield s


@pytest.fixture
async def serve_url(store: EmbeddedStore) -> AsyncIterator[str]:
    """``serve``'s application as ``serve`` builds it: REST, and the view under /ui/."""
    app = create_app(store, token=TOKEN, hosts=["127.0.0.1"])
    _mount_ui(app, store, TOKEN)
    async with serving(app, shutdown_timeout=2.0) as url:
        yield url


@pytest.fixture
async def ui_url(store: EmbeddedStore) -> AsyncIterator[str]:
    """The standalone ``ui`` application, as ``neotoma-agent ui`` builds it."""
    app = standalone_app(store, token=TOKEN, hosts=["127.0.0.1"])
    async with serving(app, shutdown_timeout=2.0) as url:
        yield url


async def _call(
    url: str, method: str, path: str, body: object, headers: dict[str, str]
) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, url + path, json=body, headers={**AUTH, **headers}, allow_redirects=False
        ) as answer,
    ):
        return answer.status, await answer.text()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize(("method", "path", "body"), SERVE_ROUTES)
async def test_serve_refuses_a_foreign_host_on_every_route(
    serve_url: str, store: EmbeddedStore, method: str, path: str, body: object
) -> None:
    for host in _foreign_hosts(_port(serve_url)):
        status, text = await _call(serve_url, method, path, body, {"Host": host})
        assert status == 421, (host, path, text)
        assert "evil" not in text  # the Host is not echoed back
    assert (await store.query_entities()).total == 0  # nothing written
    # The same request with the server's own address goes through (the guard, not the route).
    status, _ = await _call(serve_url, method, path, body, {})
    assert status != 421


@pytest.mark.parametrize(("method", "path", "body"), UI_ROUTES)
async def test_ui_refuses_a_foreign_host_on_every_route(
    ui_url: str, method: str, path: str, body: object
) -> None:
    for host in _foreign_hosts(_port(ui_url)):
        status, text = await _call(ui_url, method, path, body, {"Host": host})
        assert status == 421, (host, path, text)
    status, _ = await _call(ui_url, method, path, body, {})
    assert status != 421


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LocalHost"])
async def test_loopback_names_with_the_port_are_served(
    serve_url: str, ui_url: str, name: str
) -> None:
    for url, path in ((serve_url, "/entities"), (ui_url, "/ui/api/conversations")):
        status, text = await _call(url, "GET", path, None, {"Host": f"{name}:{_port(url)}"})
        assert status == 200, (name, text)


async def test_the_bound_name_is_served_besides_loopback(store: EmbeddedStore) -> None:
    app = create_app(store, token=TOKEN, hosts=["memory.internal"])
    async with serving(app, shutdown_timeout=2.0) as url:
        port = _port(url)
        assert (await _call(url, "GET", "/entities", None, {"Host": f"memory.internal:{port}"}))[
            0
        ] == 200
        assert (await _call(url, "GET", "/entities", None, {"Host": "memory.internal"}))[0] == 421


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(
    not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback (::1) to listen on"
)
async def test_ipv6_loopback_is_served_by_its_bracketed_name(store: EmbeddedStore) -> None:
    app = create_app(store, token=TOKEN, hosts=["::1"])
    async with serving(app, host="::1", shutdown_timeout=2.0) as url:
        port = _port(url)
        assert (await _call(url, "GET", "/entities", None, {"Host": f"[::1]:{port}"}))[0] == 200
        assert (await _call(url, "GET", "/entities", None, {"Host": f"evil.example:{port}"}))[
            0
        ] == 421


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "http://evil.example:{port}"},
        {"Origin": "http://127.0.0.1:1"},  # another program on this machine
        {"Origin": "http://localhost:{port}"},  # another name: another origin
        {"Origin": "null"},
        {"Origin": "file://"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "cross-site"},
    ],
)
async def test_a_cross_site_write_is_refused(
    serve_url: str, store: EmbeddedStore, headers: dict[str, str]
) -> None:
    port = _port(serve_url)
    sent = {k: v.format(port=port) for k, v in headers.items()}
    status, text = await _call(serve_url, "POST", "/store", NOTE, sent)
    assert status == 403, (sent, text)
    assert (await store.query_entities()).total == 0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "http://127.0.0.1:{port}"},
        {"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},  # typed in the address bar, a bookmark
    ],
)
async def test_a_same_origin_write_goes_through(
    serve_url: str, store: EmbeddedStore, headers: dict[str, str]
) -> None:
    port = _port(serve_url)
    sent = {k: v.format(port=port) for k, v in headers.items()}
    status, text = await _call(serve_url, "POST", "/store", NOTE, sent)
    assert status == 200, (sent, text)
    assert (await store.query_entities()).total == 1


async def test_a_cross_site_read_of_the_view_is_not_a_write(ui_url: str) -> None:
    # A link from another site to a page is fine (the cookie is SameSite=Strict anyway).
    status, _ = await _call(ui_url, "GET", "/ui/", None, {"Sec-Fetch-Site": "cross-site"})
    assert status == 200


class _Socket:
    """The transport of a connection that arrived on 127.0.0.1:3080."""

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 3080) if name == "sockname" else default

    def is_closing(self) -> bool:
        return False


def _host_allowed(host: str) -> bool:
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from neotoma_agent.server._guard import _host_ok

    app = web.Application()
    request = make_mocked_request("GET", "/", headers={"Host": host}, app=app, transport=_Socket())
    return _host_ok(request)


@settings(max_examples=300, deadline=None)
@given(
    name=st.from_regex(r"[A-Za-z0-9.\-\[\]@_%]{0,40}", fullmatch=True)
    | st.sampled_from(["localhost", "LocalHost", "127.0.0.1", "[::1]", "[::2]", "::1"]),
    port=st.one_of(st.none(), st.integers(0, 65535)),
)
@example(name="localhost", port=3080)
@example(name="evil.example", port=3080)
def test_only_a_loopback_name_with_the_port_is_allowed(name: str, port: int | None) -> None:
    host = name if port is None else f"{name}:{port}"
    expected = name.lower() in ("localhost", "127.0.0.1", "[::1]") and port == 3080
    assert _host_allowed(host) is expected, host
