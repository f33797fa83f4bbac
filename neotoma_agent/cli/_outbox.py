"""``neotoma-agent outbox status|flush --outbox PATH``: the closing stores a transport queued."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import OutboxFlush, outbox_status
from ..reads import printable
from ..transport.outbox import OutboxTransport
from ._common import (
    USER_OPTION,
    CLIError,
    Command,
    given_user,
    open_transport,
    option,
    resolve_token,
    resolve_url,
    run_async,
)

__all__ = ["register"]


def run(args: argparse.Namespace) -> int:
    """``status`` or ``flush``; 1 when a flush leaves entries queued."""
    path = Path(args.outbox).expanduser()
    if not path.is_file():
        raise CLIError(f"no outbox file at {path}", "pass the path given to OutboxTransport")
    if args.action == "status":
        status = outbox_status(path)
        if args.json:
            sys.stdout.write(json.dumps(status.to_json(), indent=2, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(printable(status.render()) + "\n")
        return 0
    url = resolve_url(args)
    if given_user(args) is not None:
        # A user's outbox (``hook --user``'s): delivered as that user, to --url or --db.
        done = run_async(_flush_into_store, args, path)
    elif url is not None:
        from ..transport.http import flush_outbox  # aiohttp only for a flush to a server

        done = run_async(flush_outbox, path, url, resolve_token(args, url=url))
    elif args.db:
        done = run_async(_flush_into_store, args, path)
    else:
        raise CLIError(
            "outbox flush delivers to a server or a store file",
            "pass --url (or set NEOTOMA_URL), or --db",
        )
    if args.json:
        sys.stdout.write(
            json.dumps(
                {
                    "delivered": done.delivered,
                    "remaining": done.remaining,
                    "dead": done.dead,
                    "last_error": done.last_error,
                },
                indent=2,
            )
            + "\n"
        )
    else:
        line = f"delivered {done.delivered:,}; {done.remaining:,} still queued; {done.dead:,} dead"
        if done.last_error:
            line += f" (last error: {done.last_error})"
        sys.stdout.write(printable(line) + "\n")
    return 1 if done.remaining else 0


async def _flush_into_store(args: argparse.Namespace, path: Path) -> OutboxFlush:
    async with (
        open_transport(args, must_exist=True) as store,
        OutboxTransport(store, path, background=False) as outbox,
    ):
        return await outbox.flush()


COMMAND = Command(
    "outbox",
    help="show or deliver the closing stores an outbox queued while a server was down",
    description="""
        An OutboxTransport over PATH (or an HttpTransport given outbox=PATH) queues a
        closing store that fails with a transient error (server down, timeout, 5xx, 429)
        in that file and delivers it later. `status` shows what is queued (counts, oldest
        entry's age, last error, per conversation); `flush` delivers it now to --url (or
        $NEOTOMA_URL), or into the store file --db, in order per conversation, and exits 1
        while entries remain. An outbox file is one user's: flush a user's (`hook --user`
        keeps one per user) with --user USER.
    """,
    run=run,
    options=(
        USER_OPTION,
        option("action", choices=("status", "flush"), help="what to do"),
        option("--outbox", required=True, metavar="PATH", help="the outbox file"),
        option("--json", action="store_true", help="print the result as JSON"),
    ),
)
register = COMMAND.register
