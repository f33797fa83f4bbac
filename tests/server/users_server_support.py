"""A dev server with two users' tokens (``serve --users``) and the web view, on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from two_users_support import ALICE, BOB

from neotoma_agent import EmbeddedStore
from neotoma_agent.server import create_app, serving
from neotoma_agent.server._app import _mount_ui

ADMIN = "tok-admin-SECRET"
TOKENS = {ALICE: "tok-alice-SECRET", BOB: "tok-bob-SECRET"}


@asynccontextmanager
async def users_server(path: Path) -> AsyncIterator[tuple[EmbeddedStore, str]]:
    """A store file at ``path`` served with ``TOKENS`` bound to their users and ``ADMIN`` as
    the server's own token: the store and the server's URL."""
    async with EmbeddedStore.open(path) as store:
        users = {token: user for user, token in TOKENS.items()}
        app = create_app(store, token=ADMIN, users=users)
        _mount_ui(app, store, ADMIN, users)
        async with serving(app) as url:
            yield store, url
