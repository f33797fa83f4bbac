"""A hook against a server that echoes a marker in every error: the problem line a hook
prints names the error by class, status and code, never by what the server said."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web
from echo_support import MARKER, echoing
from hook_support import Hooks, recorded
from server_support import TOKEN
from turn_support import capture_logs

from neotoma_agent.hooks import StoreSpec
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore


def test_a_hook_prints_no_server_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problems: list[str | None] = []

    async def go() -> None:
        async with EmbeddedStore.open(":memory:") as store:
            app = create_app(store, token=TOKEN, middlewares=[echoing(stores_passed=0)])
            async with serving(app, shutdown_timeout=2.0) as url:
                spec = StoreSpec(url=url, token=TOKEN, outbox=tmp_path / "outbox.db")
                hooks = Hooks(tmp_path, "claude-code", store=spec)

                def send() -> None:
                    for event, payload in recorded("claude-code", "completed"):
                        problems.append(hooks.send(event, payload).problem)

                await anyio.to_thread.run_sync(send)

    with capture_logs() as logs:
        anyio.run(go)
    assert any(p for p in problems), problems
    assert MARKER not in repr(problems)
    assert MARKER not in repr(logs) + capsys.readouterr().err


def _announcing_10_gb() -> Any:
    """Every route but /health answers 200 announcing a 10 GB body, of which it sends a bit."""

    @web.middleware
    async def huge(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/health":
            return await handler(request)  # type: ignore[no-any-return]
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = 10 * 1024**3
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await resp.write(b"[" + b"0," * 65536)
        return resp

    return huge


def test_a_hook_against_a_server_announcing_10_gb_answers_at_once(tmp_path: Path) -> None:
    """The hooks read a server's answers through the same cap as the library: the
    announced size is refused before the body is read, a typed error named on the
    problem line, the harness's neutral answer given."""
    problems: list[str | None] = []

    async def go() -> None:
        async with EmbeddedStore.open(":memory:") as store:
            app = create_app(store, token=TOKEN, middlewares=[_announcing_10_gb()])
            async with serving(app, shutdown_timeout=2.0) as url:
                spec = StoreSpec(url=url, token=TOKEN, outbox=tmp_path / "outbox.db")
                hooks = Hooks(tmp_path, "claude-code", store=spec)

                def send() -> None:
                    for event, payload in recorded("claude-code", "completed"):
                        problems.append(hooks.send(event, payload).problem)

                await anyio.to_thread.run_sync(send)

    anyio.run(go)
    assert any(p and "ERR_RESPONSE_TOO_LARGE" in p for p in problems), problems
