"""The dev server's application: who may call, the middlewares, the app factory and running it.

:func:`create_app` builds the ``aiohttp.web`` application over a store; :func:`serving` runs
one in the background (tests, benchmarks); :func:`serve` and :func:`run_server` run the
EmbeddedStore at a path until SIGINT or SIGTERM (``neotoma-agent serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import traceback
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import aiohttp.typedefs
from aiohttp import web

from neotoma_agent import Transport
from neotoma_agent.exceptions import APIError, RateLimitedError
from neotoma_agent.log import get_logger
from neotoma_agent.server._conversations import CONVERSATION_ROUTES
from neotoma_agent.server._get_routes import READ_ROUTES
from neotoma_agent.server._guard import allowed_hosts, is_loopback_address, local_guard
from neotoma_agent.server._replies import (
    Reply,
    html_response,
    json_response,
    refusal,
    too_large,
)
from neotoma_agent.server._routes import GET_ROUTES, POST_ROUTES, STORE_KEY, Handler
from neotoma_agent.server._search import SEARCH_ROUTES
from neotoma_agent.server._users import CALLER, Callers
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.rest import envelope_of, flat_envelope

_log = get_logger()

DEFAULT_MAX_BODY_SIZE = 32 * 2**20

#: an aiohttp middleware: ``async def m(request, handler) -> response``
Middleware = aiohttp.typedefs.Middleware

_CALLERS_KEY = web.AppKey("neotoma_callers", Callers)
#: set on a sub-application that checks the token itself (the web view: browsers send a
#: cookie, not a bearer header)
SELF_AUTHENTICATED = web.AppKey("neotoma_self_authenticated", bool)


# --- middlewares -------------------------------------------------------------------------


@web.middleware
async def _answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every outcome into the answer a real server gives: envelopes, pages, statuses."""
    try:
        return await handler(request)
    except Reply as reply:
        return reply.response
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        # Express answers any unrouted method+path with this page (never a 405).
        return html_response(404, f"Cannot {request.method} {request.path}")
    except web.HTTPRequestEntityTooLarge:
        return too_large()
    except APIError as exc:
        response = json_response(envelope_of(exc), exc.status)
        if isinstance(exc, RateLimitedError) and exc.retry_after is not None:
            response.headers["Retry-After"] = str(round(exc.retry_after))
        return response
    except web.HTTPException:
        raise
    except Exception as exc:
        # A bug or a store failure: answer like the server's catch-all. The log gets the
        # error class and where it was raised, never its message or repr, which may quote
        # message content or a credential.
        _log.error(
            "server.error", path=request.path, error=type(exc).__name__, where=_raised_at(exc)
        )
        return json_response(
            flat_envelope("DB_QUERY_FAILED", f"internal error ({type(exc).__name__})"), 500
        )


def _raised_at(exc: BaseException) -> list[str]:
    """``file:line in function`` of the innermost frames of ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)[-6:]
    return [f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames]


def _bearer(request: web.Request) -> bytes | None:
    """The credential of ``Authorization: Bearer <credential>``, as the bytes sent."""
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    # aiohttp decodes header bytes that are not UTF-8 as lone surrogates (surrogateescape).
    # Encoding back the same way gives the bytes sent and cannot fail; a plain .encode()
    # raised an error that quoted the credential into the log and answered 500.
    return credentials.strip().encode("utf-8", "surrogateescape")


_AUTH_REQUIRED_HINT = "Send Authorization: Bearer <token>, the token the server was started with."


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Who may call: a caller with the server's token or a user's, wherever it connects
    from; the request then acts for that token's user (:mod:`._users`).

    Loopback is not a user boundary (another account on the machine connects from it
    too), so no address is exempt. The web view, mounted as a sub-application, checks the
    same tokens itself (a browser sends a cookie, not a header).
    """
    if (
        request.match_info.http_exception is not None
        or request.path == "/health"
        or any(app.get(SELF_AUTHENTICATED, False) for app in request.match_info.apps)
    ):
        return await handler(request)
    bearer = _bearer(request)
    if bearer is None:
        raise refusal(401, "AUTH_REQUIRED", "Missing Bearer token", {"hint": _AUTH_REQUIRED_HINT})
    caller = request.app[_CALLERS_KEY].match(bearer)
    if caller is None:
        raise _invalid_token()
    request[CALLER] = caller
    return await handler(request)


def _invalid_token() -> Reply:
    return refusal(401, "AUTH_INVALID", "Unauthorized - invalid authentication token")


def _as_middleware(inner: Middleware) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await inner(request, handler)

    return middleware


def create_app(
    store: Transport,
    *,
    token: str,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    middlewares: Sequence[Middleware] = (),
    hosts: Sequence[str] = (),
    users: Mapping[str, str] | None = None,
) -> web.Application:
    """An ``aiohttp.web`` application serving ``store`` over Neotoma's REST subset.

    The caller owns ``store`` (the app never closes it). Every route but ``GET /health``
    requires ``Authorization: Bearer <token>`` (``secrets.token_urlsafe()`` makes a good
    one); there is no tokenless mode, loopback included. Every route refuses a ``Host``
    that is not a loopback name or the address the request arrived on (421: DNS
    rebinding), plus ``hosts`` (other names the server is reached by), and a cross-origin
    write (403). Bodies larger than ``max_body_size`` bytes are refused with 413.
    ``middlewares`` run innermost, after authentication and just around the route handler
    (tests inject faults and latency there).

    ``users`` maps more tokens to the user each acts for (``serve --users``): a request
    with one of them reads and writes that user's rows alone (``store.for_user``), and
    naming another user (a body or query ``user_id``) is refused with 403 ``FORBIDDEN``.
    ``token`` is the admin's: it acts for the default user
    (:data:`~neotoma_agent.LOCAL_USER_ID`) and may name any user, as Neotoma's local dev
    user may. :class:`ValueError` for ``users`` over a store without ``for_user``.
    """
    callers = Callers(token, users)
    if callers.scoped and not hasattr(store, "for_user"):
        raise ValueError("users= needs a store with for_user (an EmbeddedStore)")
    chain: list[Middleware] = [local_guard, _answers, _auth]
    chain.extend(_as_middleware(m) for m in middlewares)
    app = web.Application(client_max_size=max_body_size, middlewares=chain)
    app[STORE_KEY] = store
    app[_CALLERS_KEY] = callers
    allowed_hosts(app, hosts)
    for path, handler in {**POST_ROUTES, **SEARCH_ROUTES}.items():
        app.router.add_post(path, handler)
    for path, handler in {**GET_ROUTES, **CONVERSATION_ROUTES, **READ_ROUTES}.items():
        app.router.add_get(path, handler)
    return app


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` exposes the server to this machine only."""
    if host == "localhost":
        return True
    return is_loopback_address(host)


@contextlib.asynccontextmanager
async def serving(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    shutdown_timeout: float = 30.0,
    sock: socket.socket | None = None,
) -> AsyncIterator[str]:
    """Serve ``app`` in the background for the ``async with`` block; yield its base URL.

    ``port=0`` picks a free port; ``sock`` serves on a socket already bound instead. On
    exit the server stops accepting connections, lets
    in-flight requests finish (at most ``shutdown_timeout`` seconds) and closes the rest.
    Meant for tests and benchmarks (asyncio only); :func:`serve` is the long-running form.
    """
    # No access log: a library should not print a line per request; an application that
    # wants one can run the app with aiohttp's own runner.
    runner = web.AppRunner(
        app, handle_signals=False, shutdown_timeout=shutdown_timeout, access_log=None
    )
    await runner.setup()
    try:
        site: web.BaseSite = (
            web.TCPSite(runner, host, port) if sock is None else web.SockSite(runner, sock)
        )
        await site.start()
        bound_host, bound_port = _bound_address(runner, host, port)
        url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{url_host}:{bound_port}"
    finally:
        # Stops listening, lets in-flight handlers (stores) finish within shutdown_timeout,
        # closes idle connections, then runs the app's cleanup.
        await runner.cleanup()


async def _run_app(
    app: web.Application,
    host: str,
    port: int,
    *,
    sock: socket.socket,
    stop: asyncio.Event,
    shutdown_timeout: float,
    on_ready: Callable[[str, int], None] | None,
) -> None:
    """Serve ``app`` until ``stop`` is set, then finish in-flight requests and close."""
    async with serving(app, sock=sock, shutdown_timeout=shutdown_timeout) as url:
        parsed = urllib.parse.urlsplit(url)
        bound_host, bound_port = parsed.hostname or host, parsed.port or port
        _log.info("server.listening", host=bound_host, port=bound_port)
        if on_ready is not None:
            on_ready(bound_host, bound_port)
        await stop.wait()
        _log.info("server.stopping")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``OSError`` if it cannot be had: the port
    taken, out of range, the address not this machine's).

    Bind before building the application, then serve on the socket (``serving(app,
    sock=...)``): a port already in use fails at once, before a store is opened, and
    ``port=0`` has its free port known before the server starts. The caller closes it.
    """
    if not 0 <= port <= 65535:
        # Checked first: socket.create_server would leave its socket open on the
        # OverflowError bind() raises for such a port.
        raise OSError(f"port {port} is out of range (0 to 65535)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=128)


def _bound_address(runner: web.AppRunner, host: str, port: int) -> tuple[str, int]:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return str(address[0]), int(address[1])
    return host, port


async def serve(
    db_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 3080,
    *,
    token: str,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    shutdown_timeout: float = 30.0,
    on_ready: Callable[[str, int], None] | None = None,
    with_ui: bool = True,
    users: Mapping[str, str] | None = None,
) -> None:
    """Serve the EmbeddedStore at ``db_path`` until SIGINT or SIGTERM (asyncio only).

    ``with_ui``: also serve the web view under ``/ui/`` when the ``ui`` extra is installed.

    Every caller must send ``token`` (``Authorization: Bearer``; the web view takes it once
    as ``/ui/?token=``). On a signal it stops accepting connections, lets in-flight
    requests finish (at most ``shutdown_timeout`` seconds) and closes the store.
    ``on_ready(host, port)`` is called once listening (``port=0`` picks a free port).
    ``users``: more tokens, each bound to the user it acts for (see :func:`create_app`).
    """
    Callers(token, users)  # refused before anything is bound or opened
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows, threads
            pass
    # Bind first: a port in use (or out of range) fails before the store file is created.
    sock = bind_socket(host, port)
    try:
        async with EmbeddedStore.open(os.fspath(db_path)) as store:
            app = create_app(
                store, token=token, max_body_size=max_body_size, hosts=[host], users=users
            )
            if with_ui:
                _mount_ui(app, store, token, users)
            await _run_app(
                app,
                host,
                port,
                sock=sock,
                stop=stop,
                shutdown_timeout=shutdown_timeout,
                on_ready=on_ready,
            )
    finally:
        sock.close()
        for sig in installed:
            loop.remove_signal_handler(sig)


def _mount_ui(
    app: web.Application, store: Transport, token: str, users: Mapping[str, str] | None = None
) -> None:
    try:
        from neotoma_agent.ui import create_ui_app, mount_ui
    except ImportError:
        _log.info("server.ui_unavailable", hint="pip install 'neotoma-agent[ui]'")
        return
    ui = create_ui_app(store, token=token, users=users)
    ui[SELF_AUTHENTICATED] = True
    mount_ui(app, ui)


def run_server(
    db_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 3080,
    *,
    token: str,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    on_ready: Callable[[str, int], None] | None = None,
    users: Mapping[str, str] | None = None,
) -> None:
    """Blocking entry point for ``neotoma-agent serve``: :func:`serve` on a new event loop."""
    Callers(token, users)  # fail before creating a loop
    asyncio.run(
        serve(
            db_path,
            host,
            port,
            token=token,
            max_body_size=max_body_size,
            on_ready=on_ready,
            users=users,
        )
    )
