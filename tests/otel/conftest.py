"""The fixtures of the OpenTelemetry tests (their helpers: otel_support.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

pytest.importorskip("opentelemetry.sdk", reason="the otel tests need opentelemetry-sdk")

from otel_support import Served, Telemetry, install
from server_support import TOKEN

from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> Telemetry:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    return install(monkeypatch)


@pytest.fixture(params=["embedded", "http"])
async def served(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[Served]:
    """The embedded store on a real file, or the same store behind the dev server on
    127.0.0.1 (asyncio only), its request headers recorded."""
    async with EmbeddedStore.open(tmp_path / "memory.db") as embedded:
        if request.param == "embedded":
            yield Served(embedded, [])
            return
        if anyio_backend != "asyncio":
            pytest.skip("HttpTransport runs on asyncio only")
        seen: list[dict[str, str]] = []

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            seen.append(
                {"path": request.path, **{k.lower(): v for k, v in request.headers.items()}}
            )
            return await handler(request)

        async with (
            serving(create_app(embedded, token=TOKEN, middlewares=[record])) as url,
            HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
        ):
            yield Served(http, seen)
