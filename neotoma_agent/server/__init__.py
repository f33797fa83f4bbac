"""The dev server: Neotoma's REST subset over any Transport (normally an EmbeddedStore).

``neotoma-agent serve`` runs it so that several processes can share one store, and the HTTP
tests run :class:`~neotoma_agent.HttpTransport` against it. It answers the way a real Neotoma
server does for this subset (the calls recorded from one in ``tests/data/samples``): the
same routes, response bodies (the store's ``.raw`` is already the
server's JSON), both error envelope families, an HTML page for malformed JSON and unknown
routes, and the same request validation (closed top-level keys on the write routes, Zod-shaped
issues). Features outside the subset (file uploads, dry runs, time travel) are refused with
``501 NOT_IMPLEMENTED`` rather than silently ignored.

Auth: every route but ``GET /health`` requires ``Authorization: Bearer <token>``, loopback
callers included (another account on the machine connects from loopback too). Before any
route, ``_guard`` refuses a ``Host`` that is not this server's (DNS rebinding) and a
cross-origin write.

The package: ``_replies`` (how a refusal is shaped: envelopes, HTML pages, Zod issues),
``_validate`` (request bodies decoded and checked per route), ``_routes`` (one handler per
route, forwarding to the store), ``_guard`` (Host, Origin, proxies), ``_app`` (auth, the
middlewares, the app factory, running it).

Another local web app on a store (``neotoma-agent ui`` is one) guards itself with the same
parts: :func:`local_guard` as its first middleware with :func:`allowed_hosts` for the names
it is bound to, :class:`Callers` for the tokens it accepts (each a :class:`Caller`), and
:func:`store_for` for the store as a caller's user sees it (kept on the request under a
:func:`scoped_key`). To have its port before it starts (and fail early when the port is
taken), it binds with :func:`bind_socket` and serves on that socket
(``serving(app, sock=...)``).
"""

from neotoma_agent.server._app import (
    DEFAULT_MAX_BODY_SIZE,
    Middleware,
    bind_socket,
    create_app,
    is_loopback_host,
    run_server,
    serve,
    serving,
)
from neotoma_agent.server._guard import allowed_hosts, local_guard
from neotoma_agent.server._routes import Handler
from neotoma_agent.server._users import Caller, Callers, scoped_key, store_for

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "Caller",
    "Callers",
    "Handler",
    "Middleware",
    "allowed_hosts",
    "bind_socket",
    "create_app",
    "is_loopback_host",
    "local_guard",
    "run_server",
    "scoped_key",
    "serve",
    "serving",
    "store_for",
]
