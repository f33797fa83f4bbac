"""A library is silent: a program running turns prints nothing the program did not print.

Each case runs a real program in a subprocess (turns on a real SQLite file: completed,
with a lookup, over HTTP to the dev server too) and reads its stdout and stderr.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from cli_support import clean_env

PROGRAM = """
import asyncio, logging, sys
{setup}
from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.http import HttpTransport

TOKEN = "tok-tests"

async def turns(transport):
    memory = NeotomaMemory(transport, conversation_id="quiet")
    for i in range(3):
        async with memory.turn(f"Tell me about Acme Corp {{i}}") as t:
            t.reply = "fine"
    await memory.record_turn("and Globex?", "also fine")

async def main():
    async with EmbeddedStore.open(sys.argv[1]) as store:
        await turns(store)
        app = create_app(store, token=TOKEN)
        async with serving(app) as url, HttpTransport(url, token=TOKEN) as http:
            await turns(http)

asyncio.run(main())
"""


def run(tmp_path: Path, setup: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM.format(setup=setup)))
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
        check=True,
    )


def test_turns_print_nothing_by_default(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.stdout == ""
    assert result.stderr == ""


def test_logging_configuration_controls_the_events(tmp_path: Path) -> None:
    result = run(tmp_path, "logging.basicConfig(level=logging.INFO, stream=sys.stderr)")
    assert result.stdout == ""
    assert "INFO:neotoma_agent:turn.closed" in result.stderr
    assert "conversation_id='quiet'" in result.stderr
    # Never message content.
    assert "Acme" not in result.stderr
    assert "fine" not in result.stderr


def test_logging_above_info_silences_them(tmp_path: Path) -> None:
    result = run(tmp_path, "logging.basicConfig(level=logging.ERROR)")
    assert result.stdout == ""
    assert result.stderr == ""


def test_an_application_that_configures_structlog_gets_structured_events(
    tmp_path: Path,
) -> None:
    setup = """
import structlog
events = []
def keep(logger, name, event_dict):
    events.append(event_dict)
    raise structlog.DropEvent
structlog.configure(processors=[structlog.contextvars.merge_contextvars, keep])
import atexit
atexit.register(lambda: print(sorted({e["event"] for e in events}),
                              sorted({e.get("conversation_id") for e in events})))
"""
    result = run(tmp_path, setup)
    assert result.stderr == ""
    assert result.stdout.strip() == (
        "['history.done', 'retrieval.done', 'turn.closed', 'turn.opened'] ['quiet']"
    )
