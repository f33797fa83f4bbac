"""``neotoma-agent demo``: the scripted conversation of :mod:`._demo_script`."""

from __future__ import annotations

import argparse
import shlex
import sqlite3
import sys
from pathlib import Path

from ._common import Command, open_transport, resolve_url, run_async, store_error

__all__ = ["register"]


async def _demo_on_server(args: argparse.Namespace, url: str) -> None:
    from ._demo_script import run_demo_on

    async with open_transport(args) as transport:
        await run_demo_on(transport, url)


def run(args: argparse.Namespace) -> int:
    """Run the demo; with ``--db``, say how to read the conversation back."""
    from ._demo_script import CONVERSATION_ID, run_demo

    url = resolve_url(args) if args.url else None
    if url is not None:
        run_async(_demo_on_server, args, url)
        sys.stdout.write(
            "\nRead the conversation back from the server:\n"
            f"  neotoma-agent show {CONVERSATION_ID} --url {shlex.quote(url)}\n"
        )
        return 0
    db = str(args.db) if args.db else None
    if db is not None and not Path(db).expanduser().parent.is_dir():
        raise store_error(Path(db), FileNotFoundError(db))
    out = sys.stdout
    try:
        run_async(run_demo, db)
    except (OSError, sqlite3.Error) as exc:
        if db is None:
            raise
        raise store_error(Path(db), exc) from exc
    out.write("\n")
    if db is None:
        out.write(
            "The store was a temporary file. To keep it and read the conversation back:\n"
            f"  neotoma-agent demo --db demo.db\n"
            f"  neotoma-agent show {CONVERSATION_ID} --db demo.db\n"
        )
    else:
        out.write(
            "Read the conversation back from the store:\n"
            f"  neotoma-agent show {CONVERSATION_ID} --db {shlex.quote(db)}\n"
            "Talk to it (each line is one turn; the echo agent cites what memory finds):\n"
            f"  neotoma-agent chat --db {shlex.quote(db)}\n"
        )
    return 0


COMMAND = Command(
    "demo",
    help="run a scripted conversation and show what is stored (start here)",
    description="""
        Run a scripted six-turn conversation on the embedded store (a temporary file unless
        --db is given) and print, for each turn, what retrieval found, the reply and what
        was stored, then the conversation graph read back from the store. One turn streams,
        one fails mid-stream and is recorded as abandoned. Running it again on the same --db
        replays every turn and writes nothing. The demo ignores $NEOTOMA_AGENT_DB, so that
        it never writes into your own store unasked. With --url it runs against that Neotoma
        server instead.
    """,
    run=run,
    default_log_level="error",
)
register = COMMAND.register
