"""The dev server on hostile input: refused with the usual envelopes, nothing leaks or sticks.

Requests aiohttp's client would refuse to send (a non-UTF-8 header, a Content-Length the body
never reaches) are written as raw bytes. After each, the server must still answer a normal
request, nothing may be stored, and no log line (structlog events, stdlib records, the CLI's
``--log-json`` output) may carry the presented credential or the message content.

Every server here listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import attrs
import pytest
import structlog
from cli_support import ROOT, clean_env

from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = pytest.mark.anyio

TOKEN = "configured-token-do-not-log"
PRESENTED = "presented-credential-do-not-log"
CONTENT = "private-message-text-do-not-log"
LIMIT = 4096


@attrs.frozen
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> object:
        return json.loads(self.body)


def _request(
    body: bytes,
    *,
    path: str = "/store",
    headers: dict[str, bytes] | None = None,
    content_length: int | None = None,
) -> bytes:
    """The raw bytes of ``POST path`` with a JSON ``body``, any header bytes as given.

    The server's token goes with it unless ``headers`` has an ``Authorization`` of its own;
    :func:`_raw` puts the server's port in the ``Host``.
    """
    headers = headers or {}
    lines = [
        f"POST {path} HTTP/1.1".encode(),
        _HOST,
        b"Content-Type: application/json",
        b"Content-Length: %d" % (len(body) if content_length is None else content_length),
    ]
    if "Authorization" not in headers:
        lines.append(b"Authorization: Bearer " + TOKEN.encode())
    lines += [name.encode() + b": " + value for name, value in headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def _read_answer(reader: asyncio.StreamReader) -> Answer:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(int(status_line.split()[1]), headers, body)


_HOST = b"Host: 127.0.0.1:PORT"


async def _raw(url: str, *chunks: bytes, timeout: float = 5.0) -> Answer:
    """Write ``chunks`` on a fresh connection and read one answer (within ``timeout``)."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname == "127.0.0.1"
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    host = b"Host: 127.0.0.1:%d" % (parts.port or 80)
    try:
        for chunk in chunks:
            chunk = chunk.replace(_HOST, host, 1)
            writer.write(chunk)
            await writer.drain()
        return await asyncio.wait_for(_read_answer(reader), timeout)
    finally:
        writer.close()


def _store_body(title: str) -> bytes:
    """A /store body whose entity title is ``title``, as raw JSON text (escapes kept)."""
    return (
        b'{"entities":[{"entity_type":"note","title":"%s","content":"%s"}],'
        b'"idempotency_key":"k"}' % (title.encode(), CONTENT.encode())
    )


@attrs.define
class Server:
    url: str
    store: EmbeddedStore
    session: aiohttp.ClientSession
    token: str

    async def still_serves_and_stored_nothing(self) -> None:
        async with self.session.post(
            self.url + "/retrieve_entity_by_identifier", json={"identifier": "x"}
        ) as response:
            assert response.status == 200
        assert (await self.store.query_entities()).total == 0


async def _server(token: str = TOKEN, max_body_size: int = LIMIT) -> AsyncIterator[Server]:
    async with EmbeddedStore.open(":memory:") as store:
        app = create_app(store, token=token, max_body_size=max_body_size)
        async with (
            serving(app, shutdown_timeout=2.0) as url,
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session,
        ):
            yield Server(url, store, session, token)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async for s in _server():
        yield s


@pytest.fixture
async def token_server() -> AsyncIterator[Server]:
    async for s in _server(TOKEN):
        yield s


@pytest.fixture
async def big_server() -> AsyncIterator[Server]:
    """A server whose body limit lets deeply nested JSON through to the parser."""
    async for s in _server(max_body_size=2**20):
        yield s


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[list[structlog.typing.EventDict]]:
    """Every log event of the test, structlog's and the stdlib's (aiohttp's own loggers)."""
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events:
        yield events
    text = repr(events) + caplog.text
    for secret in (TOKEN, PRESENTED, CONTENT):
        # the store lowercases names it derives, so look for the secrets in any case
        assert secret.lower() not in text.lower(), f"{secret} was logged"


def _assert_validation_error(answer: Answer) -> None:
    assert answer.status == 400
    body = answer.json
    assert isinstance(body, dict)
    assert body["error_code"] == "VALIDATION_INVALID_FORMAT"
    assert CONTENT.encode() not in answer.body


# --- Authorization --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "credential",
    [
        b"\xff" + PRESENTED.encode(),  # not UTF-8: aiohttp decodes it to a lone surrogate
        PRESENTED.encode() + b"\x80",
    ],
)
async def test_a_non_utf8_bearer_is_a_401_and_never_logged(
    token_server: Server, logs: list[structlog.typing.EventDict], credential: bytes
) -> None:
    headers = {"Authorization": b"Bearer " + credential}
    answer = await _raw(token_server.url, _request(b"{}", headers=headers))
    assert answer.status == 401
    body = answer.json
    assert isinstance(body, dict)
    # the envelope of any other wrong token
    assert body == {
        "error_code": "AUTH_INVALID",
        "message": "Unauthorized - invalid authentication token",
        "timestamp": body["timestamp"],
    }
    assert PRESENTED.encode() not in answer.body
    await token_server.still_serves_and_stored_nothing()


# --- JSON that cannot be stored ---------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        _store_body("\\ud800"),
        _store_body("ok\\udfffok"),
        _store_body("\\ude00\\ud83d"),  # a pair in the wrong order is two lone surrogates
        # in a key, in an array, at the top level
        b'{"entities":[{"entity_type":"note","\\ud800":"%s"}],"idempotency_key":"k"}'
        % CONTENT.encode(),
        b'{"entities":[{"entity_type":"note","tags":["%s","\\udc00"]}],"idempotency_key":"k"}'
        % CONTENT.encode(),
        b'"\\ud800"',
    ],
)
async def test_a_lone_surrogate_is_a_validation_error_and_never_logged(
    server: Server, logs: list[structlog.typing.EventDict], body: bytes
) -> None:
    _assert_validation_error(await _raw(server.url, _request(body)))
    await server.still_serves_and_stored_nothing()


async def test_a_lone_surrogate_is_refused_on_every_route(
    server: Server, logs: list[structlog.typing.EventDict]
) -> None:
    for path, body in [
        ("/retrieve_entity_by_identifier", b'{"identifier":"\\ud800"}'),
        ("/entities/query", b'{"search":"\\udbff"}'),
        ("/correct", b'{"entity_id":"e","field":"f","value":"\\ud800","idempotency_key":"k"}'),
    ]:
        _assert_validation_error(await _raw(server.url, _request(body, path=path)))
    await server.still_serves_and_stored_nothing()


async def test_a_surrogate_pair_is_a_character_and_stored(server: Server) -> None:
    answer = await _raw(server.url, _request(_store_body("\\ud83d\\ude00")))
    assert answer.status == 200
    assert (await server.store.query_entities(entity_type="note")).total == 1


def _nested_note(levels: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    """A /store body whose entity content nests ``levels`` deep (3 more for the body)."""
    nested = open_ * levels + b"1" + close * levels
    return (
        b'{"entities":[{"entity_type":"note","title":"n","content":%s}],"idempotency_key":"k"}'
        % nested
    )


@pytest.mark.parametrize("levels", [98, 5_000, 100_000])
@pytest.mark.parametrize(("open_", "close"), [(b"[", b"]"), (b'{"a":', b"}")])
async def test_json_nested_too_deep_is_a_validation_error(
    big_server: Server,
    logs: list[structlog.typing.EventDict],
    levels: int,
    open_: bytes,
    close: bytes,
) -> None:
    _assert_validation_error(
        await _raw(big_server.url, _request(_nested_note(levels, open_, close)))
    )
    await big_server.still_serves_and_stored_nothing()


async def test_json_nested_to_the_limit_is_stored(big_server: Server) -> None:
    answer = await _raw(big_server.url, _request(_nested_note(97)))  # 100 levels in all
    assert answer.status == 200
    assert (await big_server.store.query_entities(entity_type="note")).total == 1


# --- bodies over the limit --------------------------------------------------------------------


def _assert_too_large(answer: Answer) -> None:
    assert answer.status == 413
    assert b"PayloadTooLargeError" in answer.body


@pytest.mark.parametrize("declared", [LIMIT + 1, 100_000_000_000])
async def test_a_declared_length_over_the_limit_is_refused_before_the_body(
    server: Server, logs: list[structlog.typing.EventDict], declared: int
) -> None:
    # Only a few bytes of the body are ever sent: the answer must not wait for the rest.
    _assert_too_large(
        await _raw(server.url, _request(b'{"entities":', content_length=declared), timeout=3.0)
    )
    await server.still_serves_and_stored_nothing()


async def test_a_declared_length_over_the_limit_is_refused_with_a_token_too(
    token_server: Server, logs: list[structlog.typing.EventDict]
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}".encode()}
    request = _request(b"{", headers=headers, content_length=100_000_000_000)
    _assert_too_large(await _raw(token_server.url, request, timeout=3.0))
    await token_server.still_serves_and_stored_nothing()


async def test_a_chunked_body_growing_past_the_limit_is_refused(
    server: Server, logs: list[structlog.typing.EventDict]
) -> None:
    parts = urllib.parse.urlsplit(server.url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(
            b"POST /store HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n"
            % (parts.port or 80, TOKEN.encode())
        )
        chunk = b"%x\r\n%s\r\n" % (1024, b" " * 1024)
        answer = asyncio.ensure_future(_read_answer(reader))
        sent = 0
        # Keep sending (never the last chunk) until the server answers: it must not wait
        # for the end of a body it will refuse, nor buffer more than about the limit.
        while not answer.done() and sent < 64 * LIMIT:
            writer.write(chunk)
            await writer.drain()
            sent += 1024
            await asyncio.sleep(0.001)
        _assert_too_large(await asyncio.wait_for(answer, 5.0))
        assert sent <= 4 * LIMIT
    finally:
        writer.close()
    await server.still_serves_and_stored_nothing()


# --- the command line server, with --log-json ---------------------------------------------------


async def test_the_cli_server_logs_no_credential_nor_content_in_json_mode(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store.db"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "neotoma_agent.cli",
        "--log-json",
        "--log-level",
        "debug",
        "--token",
        TOKEN,
        "--db",
        str(db),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(tmp_path),
        cwd=ROOT,
    )
    auth = {"Authorization": f"Bearer {TOKEN}".encode()}
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        url = line.split(" on ", 1)[1].split()[0]
        answers = [
            await _raw(
                url, _request(b"{}", headers={"Authorization": b"Bearer \xff" + PRESENTED.encode()})
            ),
            await _raw(url, _request(_store_body("\\ud800"), headers=auth)),
            await _raw(url, _request(b"[" * 100_000 + b"]" * 100_000, headers=auth)),
            await _raw(url, _request(b"{", headers=auth, content_length=10**11), timeout=3.0),
        ]
        assert [a.status for a in answers] == [401, 400, 400, 413]
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()
    log = err.decode("utf-8", "replace")
    assert process.returncode == 0, log
    for secret in (TOKEN, PRESENTED, CONTENT):
        assert secret.lower() not in log.lower(), f"{secret} was logged"
    async with EmbeddedStore.open(db) as reopened:
        assert (await reopened.query_entities()).total == 0


# --- the catch-all ---------------------------------------------------------------------------


async def test_an_unexpected_failure_is_a_500_that_logs_no_content(
    logs: list[structlog.typing.EventDict],
) -> None:
    """A store failure whose message quotes content: the log names its class and place only."""
    from neotoma_agent.testing import FaultyTransport

    async with EmbeddedStore.open(":memory:") as store:
        faulty = FaultyTransport(store).fail("store", RuntimeError(f"cannot store {CONTENT}"))
        async with serving(create_app(faulty, token=TOKEN), shutdown_timeout=2.0) as url:
            answer = await _raw(url, _request(_store_body("fine")))
    assert answer.status == 500
    assert CONTENT.encode() not in answer.body
    [event] = [e for e in logs if e.get("event") == "server.error"]
    assert event["error"] == "RuntimeError"
    assert any("testing.py" in frame for frame in event["where"])


# --- every route of serve (REST and the web view) on hostile values -----------------------------

#: values no client should send but anyone can: a NUL, blank, a lone surrogate's escape,
#: an id-shaped nothing, a huge number, a path climb
_HOSTILE_VALUES = ["\x00", "a\x00b", " ", "", "\t\n", "ent_" + "0" * 24, "9" * 40, "../../x"]
#: query parameters any route reads
_PARAMS = ["id", "q", "search", "before", "after", "cursor", "entity_type", "limit", "offset"]
#: body keys any write or query route reads
_BODY_KEYS = ["search", "query", "search_query", "identifier", "entity_type", "entity_id"]


@pytest.fixture
async def full_server(tmp_path: Path) -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    """``serve``'s whole application (REST and /ui/) over a store with a conversation."""
    pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")
    from neotoma_agent import NeotomaMemory
    from neotoma_agent.server._app import _mount_ui

    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="c1")
        await memory.record_turn("About Acme Corp?", "A company.", turn_id="t1", retrieve=False)
        app = create_app(store, token=TOKEN)
        _mount_ui(app, store, TOKEN)
        routes = sorted(
            {
                (route.method, route.resource.canonical)
                for route in app.router.routes()
                if route.method in ("GET", "POST") and route.resource is not None
            }
            | {
                ("GET", "/ui" + route.resource.canonical)
                for sub in _subapps(app)
                for route in sub.router.routes()
                if route.method == "GET" and route.resource is not None
            }
        )
        async with serving(app, shutdown_timeout=2.0) as url:
            yield url, routes


def _subapps(app: aiohttp.web.Application) -> list[aiohttp.web.Application]:
    return [r._app for r in app.router.resources() if hasattr(r, "_app")]


async def test_no_hostile_value_is_a_500_on_any_route(
    full_server: tuple[str, list[tuple[str, str]]], logs: list[structlog.typing.EventDict]
) -> None:
    url, routes = full_server
    assert len(routes) >= 15, routes  # REST reads and writes, and the view's pages
    failures = []
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as session:
        for method, path in routes:
            for value in _HOSTILE_VALUES:
                concrete = path.replace("{entity_id}", urllib.parse.quote(value, safe="") or "x")
                concrete = re.sub(r"\{[^}]+\}", urllib.parse.quote(value, safe="") or "x", concrete)
                if method == "GET":
                    for param in _PARAMS:
                        async with session.get(url + concrete, params={param: value}) as answer:
                            if answer.status >= 500:
                                failures.append((method, path, param, value, answer.status))
                else:
                    for key in _BODY_KEYS:
                        async with session.post(url + concrete, json={key: value}) as answer:
                            if answer.status >= 500:
                                failures.append((method, path, key, value, answer.status))
    assert not failures
    assert not [e for e in logs if e.get("event") in ("server.error", "ui.error")]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("/ui/api/conversation", {"id": " "}),
        ("/ui/conversation", {"id": "\t"}),
        ("/ui/api/search", {"q": "a\x00b"}),
        ("/ui/search", {"q": "\x00"}),
        ("/entities", {"search": "a\x00b"}),
    ],
)
async def test_what_cannot_exist_is_404_and_a_nul_is_400(
    full_server: tuple[str, list[tuple[str, str]]], path: str, value: dict[str, str]
) -> None:
    url, _ = full_server
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session,
        session.get(url + path, params=value) as answer,
    ):
        expected = 400 if "\x00" in next(iter(value.values())) else 404
        assert answer.status == expected, await answer.text()


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/entities/query", {"search": "a\x00b"}),
        ("/entities/query", {"query": "\x00"}),
        ("/retrieve_entity_by_identifier", {"identifier": "Acme\x00"}),
    ],
)
async def test_a_nul_in_a_search_term_is_a_validation_error(
    server: Server, route: str, body: dict[str, str]
) -> None:
    async with server.session.post(server.url + route, json=body) as answer:
        assert answer.status == 400
        assert (await answer.json())["error_code"] == "VALIDATION_INVALID_FORMAT"


def _raw_get(path: str, *headers: bytes) -> bytes:
    lines = [f"GET {path} HTTP/1.1".encode(), _HOST, *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


@pytest.mark.parametrize(
    "credential",
    [
        b"Authorization: Bearer \xff\xfe" + PRESENTED.encode(),
        b"Cookie: neotoma_ui_token=\xff" + PRESENTED.encode(),
        b"Cookie: neotoma_ui_token=" + PRESENTED.encode() + b"\xc3",
    ],
)
@pytest.mark.parametrize("path", ["/ui/", "/ui/api/conversations", "/ui/?token=%FF%FE"])
async def test_the_web_view_answers_a_non_utf8_credential_with_401(
    full_server: tuple[str, list[tuple[str, str]]],
    logs: list[structlog.typing.EventDict],
    credential: bytes,
    path: str,
) -> None:
    url, _ = full_server
    answer = await _raw(url, _raw_get(path, credential))
    assert answer.status == 401
    assert PRESENTED.encode() not in answer.body
    assert PRESENTED not in repr(logs)
