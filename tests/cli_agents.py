"""Agent functions the CLI tests load with ``chat --agent`` (not a test module)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from neotoma_agent import Turn


async def slow_agent(user_message: str, turn: Turn) -> AsyncIterator[str]:
    """Streams a long reply slowly, so a test can press Ctrl-C in the middle of it."""
    yield "Thinking about it: "
    for i in range(400):
        await anyio.sleep(0.05)
        yield f"word{i} "


def sync_agent(user_message: str, turn: Turn) -> str:
    """A plain function (run in a worker thread by the library)."""
    turn.cite(*turn.retrieved)
    return f"sync reply to {user_message!r} citing {len(turn.retrieved)}"


async def async_agent(user_message: str) -> str:
    """An async function that takes the message only."""
    return f"async reply to {user_message!r}"


def failing_agent(user_message: str, turn: Turn) -> str:
    """Fails on every turn after showing nothing."""
    raise RuntimeError("the model is down")
