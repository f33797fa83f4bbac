"""``neotoma-agent serve``: the store file over Neotoma's REST API (the dev server)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import CLIError, Command, db_path, listening, option, resolve_token
from ._paths import private_parent
from ._tokens import announce_token, login_link, new_token, remove_token_file
from ._users_file import USERS_OPTION, given_users

__all__ = ["register"]


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    from ..server import run_server

    if not 0 <= args.port <= 65535:
        raise CLIError(
            f"--port {args.port} is out of range", "pass 0 to 65535 (0 picks a free one)"
        )
    if args.url:
        raise CLIError(
            "serve runs the store file, not a server at --url",
            "drop --url (or unset NEOTOMA_URL) and pass --db",
        )
    users = given_users(args)
    given = resolve_token(args)
    token = given or new_token()
    if users is not None and token in users:
        raise CLIError(
            "a token in --users is the server's own (--token): the admin's token must be no user's",
            "give the admin another token, or drop that line from the users file",
        )
    db = db_path(args)
    if not args.db:
        private_parent(db)
    if not db.parent.is_dir():
        raise CLIError(
            f"cannot open the store {db}: directory {db.parent} does not exist",
            "create the directory, or pass --db with a file in an existing directory",
        )
    written: list[Path] = []

    def ready(host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(f"serving {db} on http://{shown}:{port} (token required); Ctrl-C to stop", flush=True)
        announce_token(token, port, generated=given is None, written=written)
        print(f"web view: {login_link(f'http://{shown}:{port}/ui/', token, given)}", flush=True)

    # A failed bind raises before the store file is created.
    with listening(args.host, args.port):
        try:
            run_server(
                str(db), host=args.host, port=args.port, token=token, on_ready=ready, users=users
            )
        finally:
            for path in written:
                remove_token_file(path, token)
    return 0


COMMAND = Command(
    "serve",
    help="serve the store file over Neotoma's REST API (a local dev server)",
    description="""
        Serve the store file (--db) over the subset of Neotoma's REST API this library uses,
        so that several processes, or `--url`, can share one store. Binds 127.0.0.1 unless
        --host says otherwise. Every caller needs the token: --token-file or $NEOTOMA_TOKEN,
        else a new one each start, kept 0600 in the per-user data directory where clients
        on this machine find it. The web view is at /ui/ (the printed link logs in). Stop
        with Ctrl-C. --users FILE serves many users: each line `TOKEN USER_ID` binds a
        token to the user it acts for (its requests, and the web view it logs in to, see
        that user's memory alone); the server's own token is the admin's, which may act
        for any user with a body or query user_id.
    """,
    run=run,
    options=(
        option("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)"),
        option("--port", type=int, default=3080, help="port (default 3080; 0 picks a free one)"),
        USERS_OPTION,
    ),
)
register = COMMAND.register
