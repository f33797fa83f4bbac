"""A hook against a server that echoes a marker in every error: the problem line a hook
prints names the error by class, status and code, never by what the server said."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
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
