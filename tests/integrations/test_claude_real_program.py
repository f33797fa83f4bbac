"""End to end: the real ``claude`` program bundled in the SDK's wheel, a fake Anthropic API on
127.0.0.1 (``tests/fake_model_api.py``), NeotomaClaude, the store: completed, interrupted and
failed turns. Slow (the program takes seconds a turn); ``nox -s integrations`` runs it.

The SDK starts the program itself: through a wrapper (``cli_path``) that runs it inside
the fake API's network namespace (``unshare -n``), so nothing it sends leaves the machine.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore:Async generator 'claude_agent_sdk.:ResourceWarning"),
    # query() closed after its result leaves one of the SDK's own memory streams to the GC
    # (seen with the real program only; the SDK's, not this integration's).
    pytest.mark.filterwarnings("ignore:Unclosed <MemoryObjectReceiveStream:ResourceWarning"),
    pytest.mark.skipif(
        importlib.util.find_spec("claude_agent_sdk") is None,
        reason="the [claude-agent-sdk] extra is not installed",
    ),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _network_namespace() -> None:
    from netns_support import available

    reason = available()
    if reason is not None:
        pytest.skip(reason)


def in_namespace(api: Any, folder: Path) -> str:
    """A ``cli_path`` for the SDK: the bundled program, run inside ``api``'s namespace."""
    import claude_agent_sdk

    [program] = glob.glob(
        os.path.join(os.path.dirname(claude_agent_sdk.__file__), "_bundled", "claude")
    )
    wrapper = folder / "claude"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(api.command([program]))} "$@"\n')
    wrapper.chmod(0o700)
    return str(wrapper)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Any]:
    from neotoma_agent import EmbeddedStore

    async with EmbeddedStore.open(tmp_path / "memory.db") as embedded:
        yield embedded


async def test_the_real_program_completed_interrupted_and_failed(
    store: Any, tmp_path: Path
) -> None:
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient
    from fake_model_api import Fail, FakeAnthropic, Hang, Text

    from neotoma_agent import NeotomaMemory, TurnState
    from neotoma_agent.integrations.claude_agent_sdk import NeotomaClaude

    memory = NeotomaMemory(store, conversation_id="real-cli", close_timeout=10.0)
    acme = await memory.remember("company", name="Acme Corp", website="acme.com")
    nc = NeotomaClaude(memory)
    home = tmp_path / "home"
    home.mkdir()
    script = [Text("Acme Corp is a customer of ours."), Hang("partial ")]
    with FakeAnthropic(script, isolated=True) as api:
        env = {**api.env(), "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude")}
        options = ClaudeAgentOptions(
            cli_path=in_namespace(api, tmp_path),
            hooks=nc.hooks(),  # type: ignore[arg-type]
            include_partial_messages=True,
            setting_sources=[],
            tools=[],
            env=env,
            cwd=str(tmp_path),
        )
        async with ClaudeSDKClient(options) as client:
            async with nc.turn(client, "What about Acme Corp?") as done:
                text = "".join([d async for d in done.text()])
            async with nc.turn(client, "Tell me a long story") as stopped:
                async for _ in stopped.text():
                    await stopped.interrupt()
                    break
        # A fresh program for the failing prompt: one-shot query(). Its API error comes as an
        # assistant message holding the error text and a result with is_error set.
        # The program retries a failed streamed request without streaming: fail every try.
        api.add(Fail(400), Fail(400), Fail(400), Fail(400))
        async with nc.query("This one fails", options) as failed:
            pass
    assert text == "Acme Corp is a customer of ours."
    assert done.result.status is TurnState.COMPLETED
    sent = str(api.turn_requests[0]["messages"])
    assert "UserPromptSubmit hook additional context" in sent
    assert acme in sent  # t.context() reached the model
    assert stopped.result.status is TurnState.ABANDONED
    assert failed.result.status is TurnState.ABANDONED
    assert failed.result_message is not None
    assert failed.result_message.is_error
    assert failed.result_message.terminal_reason == "api_error"
    assert failed.reply is None
    stored = [(h.user, h.status, h.reply) for h in await memory.history(None)]
    assert stored == [
        ("What about Acme Corp?", "completed", "Acme Corp is a customer of ours."),
        ("Tell me a long story", "abandoned", "partial "),
        ("This one fails", "abandoned", None),
    ]
