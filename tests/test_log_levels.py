"""Quiet means quiet: each outcome's log level, seen as a user sees it (no logging set up).

One real program in a subprocess runs every outcome on a real SQLite file (and the dev
server on 127.0.0.1 for the retried request) without configuring logging, so what reaches
stderr is what Python's last-resort handler prints: WARNING and above. A stop, a body's
error (raised to the caller), a queued close and a retried request are normal: nothing
printed. A close that failed and an outbox entry gone dead lose or risk data: printed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from cli_support import clean_env

PROGRAM = r"""
import asyncio, sys
from aiohttp import web

from neotoma_agent import EmbeddedStore, NeotomaMemory, OutboxTransport, TurnCloseError
from neotoma_agent.exceptions import ConnectionLost, ValidationError
from neotoma_agent.server import create_app, serving
from neotoma_agent.testing import FaultyTransport, key_phase
from neotoma_agent.transport.http import HttpTransport, RetryPolicy


TOKEN = "tok-tests"


def closing(method, args, kwargs):
    return key_phase(kwargs["idempotency_key"]) == "assistant"


def mark(name):
    sys.stderr.write(f"== {name}\n")
    sys.stderr.flush()


async def stopped(store):
    memory = NeotomaMemory(store, conversation_id="stop")
    started = asyncio.Event()

    async def body():
        async with memory.turn("Tell me about Acme Corp") as t:
            t.reply = "Acme is"
            started.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(body())
    await started.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


async def body_error(store):
    memory = NeotomaMemory(store, conversation_id="error")
    try:
        async with memory.turn("and Globex?") as t:
            t.reply = "Globex"
            raise KeyError("the agent broke")
    except KeyError:
        pass


async def queued(store, box):
    faulty = FaultyTransport(store).fail("store", ConnectionLost("down"), when=closing, times=1)
    async with OutboxTransport(faulty, box, background=False) as outbox:
        memory = NeotomaMemory(outbox, conversation_id="queued")
        async with memory.turn("Initech?") as t:
            t.reply = "Initech is a client"
        assert t.result.queued, t.result
        flushed = await outbox.flush()
        assert flushed.delivered == 1, flushed


async def retried(store):
    failed = []

    @web.middleware
    async def flaky(request, handler):
        if request.path.endswith("/store") and not failed:
            failed.append(request.path)
            return web.json_response({"error": "busy"}, status=503)
        return await handler(request)

    app = create_app(store, token=TOKEN, middlewares=[flaky])
    retry = RetryPolicy(backoff=False)
    async with serving(app) as url, HttpTransport(url, token=TOKEN, retry=retry) as http:
        memory = NeotomaMemory(http, conversation_id="retried")
        async with memory.turn("Umbrella?") as t:
            t.reply = "Umbrella is a prospect"
        assert t.result.completed and failed, failed


async def close_failed(store):
    faulty = FaultyTransport(store).fail("store", ConnectionLost("down"), when=closing)
    memory = NeotomaMemory(faulty, conversation_id="lost", close_timeout=5)
    try:
        async with memory.turn("Hooli?") as t:
            t.reply = "Hooli is"
    except TurnCloseError:
        pass


async def dead(store, box):
    faulty = (
        FaultyTransport(store)
        .fail("store", ConnectionLost("down"), when=closing, times=1)
        .fail("store", ValidationError("refused", status=400), when=closing)
    )
    async with OutboxTransport(faulty, box, background=False) as outbox:
        memory = NeotomaMemory(outbox, conversation_id="dead")
        async with memory.turn("Vandelay?") as t:
            t.reply = "Vandelay imports"
        flushed = await outbox.flush()
        assert flushed.dead == 1, flushed


async def main():
    folder = sys.argv[1]
    outcomes = [
        ("stopped", stopped),
        ("body_error", body_error),
        ("queued", lambda store: queued(store, f"{folder}/queued.outbox")),
        ("retried", retried),
        ("close_failed", close_failed),
        ("dead", lambda store: dead(store, f"{folder}/dead.outbox")),
    ]
    for name, run in outcomes:
        mark(name)
        # A store each: an OutboxTransport closes the transport it wraps.
        async with EmbeddedStore.open(f"{folder}/{name}.db") as store:
            await run(store)
    mark("end")


asyncio.run(main())
"""


def test_each_outcome_reaches_stderr_only_when_it_loses_or_risks_data(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    sections: dict[str, str] = {}
    for chunk in done.stderr.split("== ")[1:]:
        name, _, text = chunk.partition("\n")
        sections[name] = text
    assert list(sections) == [
        "stopped",
        "body_error",
        "queued",
        "retried",
        "close_failed",
        "dead",
        "end",
    ]
    # Normal outcomes: nothing at all.
    for quiet in ("stopped", "body_error", "queued", "retried"):
        assert sections[quiet] == "", (quiet, sections[quiet])
    # What loses or risks data: one line each, naming the event, never the content.
    assert "turn.close_failed" in sections["close_failed"]
    assert "outbox.dead" in sections["dead"]
    for loud in ("close_failed", "dead"):
        assert "Hooli is" not in sections[loud]
        assert "Vandelay imports" not in sections[loud]
