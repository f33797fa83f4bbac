"""``neotoma-agent ui``: the read-only web view over any store, on 127.0.0.1."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import urllib.parse
from pathlib import Path

from ._common import USER_OPTION, CLIError, Command, given_token, listening, open_transport, option
from ._tokens import announce_token, login_link, new_token, remove_token_file
from ._users_file import USERS_OPTION, given_users

__all__ = ["register"]


def _check(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise CLIError(
            f"--port {args.port} is out of range", "pass 0 to 65535 (0 picks a free one)"
        )


async def _serve(
    args: argparse.Namespace, token: str, given: str | None, users: dict[str, str] | None
) -> None:
    from ..server import bind_socket, serving
    from ..ui import UI_PREFIX, standalone_app

    sock = bind_socket(args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with open_transport(args, must_exist=True, read_only=True) as transport:
            if users is not None and not hasattr(transport, "for_user"):
                raise CLIError(
                    "--users shows each user's memory of a store file; a server keeps its own",
                    "drop --url and pass --db, or drop --users",
                )
            app = standalone_app(
                transport, token=token, outbox=args.outbox, hosts=[args.host], users=users
            )
            written: list[Path] = []
            try:
                async with serving(app, sock=sock, shutdown_timeout=5.0) as url:
                    page = f"{url}{UI_PREFIX}/"
                    print(f"web view on {page}; Ctrl-C to stop", flush=True)
                    port = urllib.parse.urlsplit(url).port or args.port
                    announce_token(token, port, generated=given is None, written=written)
                    print(f"log in: {login_link(page, token, given)}", flush=True)
                    if args.open:
                        import webbrowser

                        webbrowser.open(page + "?" + urllib.parse.urlencode({"token": token}))
                    await stop.wait()
            finally:
                for path in written:
                    remove_token_file(path, token)
    finally:
        sock.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


def run(args: argparse.Namespace) -> int:
    """Serve the web view until SIGINT or SIGTERM."""
    try:
        import jinja2  # noqa: F401
    except ImportError:
        raise CLIError("the web view needs Jinja2", "pip install 'neotoma-agent[ui]'") from None
    _check(args)
    users = given_users(args)
    given = given_token(
        args.ui_token, args.ui_token_file, "NEOTOMA_UI_TOKEN", file_option="--ui-token-file"
    )
    token = given or new_token()
    if users is not None and token in users:
        raise CLIError(
            "a token in --users is the view's own (--ui-token): it must be no user's",
            "give the view another token, or drop that line from the users file",
        )
    with listening(args.host, args.port):
        asyncio.run(_serve(args, token, given, users))
    return 0


COMMAND = Command(
    "ui",
    help="browse conversations, turns and entities in a web view (read-only)",
    description="""
        Serve a read-only web view of the store (--db, or a Neotoma server with --url):
        conversations, each conversation's turns with their exact texts and statuses,
        entities and the turns that referred to them, and the store's health. Binds
        127.0.0.1 unless --host says otherwise. Every page needs a token: --ui-token-file
        (a file holding it) or $NEOTOMA_UI_TOKEN, else a new one each start (the printed
        link logs in; kept 0600 in the per-user data directory). --users FILE (one
        `TOKEN USER_ID` a line, mode 0600) lets each user log in with a token of their
        own and see their memory alone. Needs the `ui` extra (pip install
        'neotoma-agent[ui]'). Stop with Ctrl-C.
    """,
    run=run,
    options=(
        USER_OPTION,
        option("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)"),
        option("--port", type=int, default=3081, help="port (default 3081; 0 picks a free one)"),
        option("--open", action="store_true", help="open the view in a browser"),
        option(
            "--ui-token",
            metavar="TOKEN",
            default=None,
            help="token every page requires (visible to other accounts in the process "
            "list: prefer --ui-token-file or $NEOTOMA_UI_TOKEN; default: a new one each start)",
        ),
        option(
            "--ui-token-file",
            metavar="PATH",
            default=None,
            help="file whose first line is the token every page requires (keep it 0600)",
        ),
        option("--outbox", metavar="PATH", default=None, help="outbox file the health page shows"),
        USERS_OPTION,
    ),
)
register = COMMAND.register
