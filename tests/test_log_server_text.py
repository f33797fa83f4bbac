"""What a server says in an error never reaches the logs: only the class, status and code.

A hostile or echoing server answers every failure with a marker (a forged log line, a
terminal escape): a turn whose lookups and closing store fail logs ``retrieval.lookup_failed``
and ``turn.close_failed``, an outbox logs its queued entry, a hook prints its problem line;
the marker is in none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from echo_support import MARKER, echoing
from server_support import TOKEN
from turn_support import capture_logs

from neotoma_agent import NeotomaMemory, OutboxTransport, TurnCloseError
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp runs on asyncio only."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _std_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="neotoma_agent")
    yield
    structlog.reset_defaults()


def _everything(logs: list[dict[str, Any]], caplog: pytest.LogCaptureFixture) -> str:
    return repr(logs) + caplog.text + repr([r.__dict__ for r in caplog.records])


async def test_a_turn_logs_no_server_text(caplog: pytest.LogCaptureFixture) -> None:
    async with EmbeddedStore.open(":memory:") as store:
        app = create_app(store, token=TOKEN, middlewares=[echoing(stores_passed=1)])
        async with serving(app, shutdown_timeout=2.0) as url:
            http = HttpTransport(url, token=TOKEN, retry=RetryPolicy(attempts=1, backoff=False))
            async with http:
                memory = NeotomaMemory(http, conversation_id="echo")
                with capture_logs() as logs, pytest.raises(TurnCloseError):
                    async with memory.turn("Tell me about Acme Corp and Globex Inc") as t:
                        t.reply = "They are clients"
    events = {e["event"]: e for e in logs}
    assert events["retrieval.lookup_failed"]["error"] == "ServerError 500 ERR_ECHO"
    assert events["turn.close_failed"]["close_error"] == "ServerError 500 ERR_ECHO"
    assert MARKER not in _everything(logs, caplog)


async def test_an_outbox_logs_no_server_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with EmbeddedStore.open(":memory:") as store:
        app = create_app(store, token=TOKEN, middlewares=[echoing(stores_passed=1)])
        async with serving(app, shutdown_timeout=2.0) as url:
            http = OutboxTransport(
                HttpTransport(url, token=TOKEN, retry=RetryPolicy(attempts=1, backoff=False)),
                tmp_path / "outbox.db",
                background=False,
            )
            async with http:
                memory = NeotomaMemory(http, conversation_id="echo")
                with capture_logs() as logs:
                    try:
                        async with memory.turn("Tell me about Acme Corp") as t:
                            t.reply = "A client"
                    except TurnCloseError:
                        pass  # a 500 is not transient: not queued, the close fails
                    await http.flush()
    assert MARKER not in _everything(logs, caplog)
