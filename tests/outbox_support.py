"""The outbox tests' set-up: a dev server that can be stopped and started again on its port,
and the transport they put in front of it (an outbox over HTTP)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
from aiohttp import web
from server_support import TOKEN

from neotoma_agent import HttpTransport, OutboxTransport, RetryPolicy
from neotoma_agent.server import Handler, create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["FAST", "Server", "outbox_over_http", "running_server"]

#: one quick retry, no wait: a stopped server fails a store at once
FAST = RetryPolicy(attempts=2, backoff=False)


def outbox_over_http(
    url: str,
    box: str | os.PathLike[str],
    *,
    retry: RetryPolicy = FAST,
    background: bool = False,
    **options: Any,
) -> OutboxTransport:
    """An outbox at ``box`` over an HttpTransport to ``url`` (the tests' token, ``retry``);
    no background delivery unless asked (the test delivers: ``flush()``, the next store).
    ``options`` go to :class:`OutboxTransport` (``poll``, ``max_entries``)."""
    http = HttpTransport(url, token=TOKEN, retry=retry)
    return OutboxTransport(http, box, background=background, **options)


@attrs.define
class Server:
    """A dev server over one embedded store that can be stopped and started on its port."""

    store: EmbeddedStore
    #: idempotency keys of the stores that reached the store, in arrival order
    keys: list[str] = attrs.Factory(list)
    #: answer a store (by its key's prefix) with this status and JSON body, unstored
    refuse: dict[str, tuple[int, dict[str, Any]]] = attrs.Factory(dict)
    #: called after a store committed, before its answer is sent
    after_commit: Callable[[str], None] | None = None
    port: int = 0
    _stack: contextlib.AsyncExitStack | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/store":
            return await handler(request)
        body = await request.json()
        key = str(body.get("idempotency_key"))
        for prefix, (code, answer) in self.refuse.items():
            if key.startswith(prefix):
                return web.json_response(answer, status=code)
        self.keys.append(key)
        response = await handler(request)
        if self.after_commit is not None:
            self.after_commit(key)
        return response

    async def start(self) -> None:
        stack = contextlib.AsyncExitStack()
        app = create_app(self.store, token=TOKEN, middlewares=[self.middleware])
        url = await stack.enter_async_context(serving(app, port=self.port, shutdown_timeout=0.5))
        self.port = int(url.rsplit(":", 1)[1])
        self._stack = stack

    async def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()


@contextlib.asynccontextmanager
async def running_server() -> AsyncIterator[Server]:
    """A started Server over a fresh in-memory store, stopped at the end."""
    async with EmbeddedStore.open(":memory:") as store:
        srv = Server(store)
        await srv.start()
        try:
            yield srv
        finally:
            await srv.stop()
