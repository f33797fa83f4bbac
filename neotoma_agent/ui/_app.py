"""The web view's aiohttp application: its routes, who may read them, and the headers every
answer carries.

Each page has a JSON twin at the same path under ``api/`` (``/ui/conversation?id=c`` and
``/ui/api/conversation?id=c``): both come from one view function (:mod:`._views`), so what
a page shows and what a script reads are one thing.

Every answer forbids scripts outright (``Content-Security-Policy: default-src 'none'``: the
pages use none, so a stored ``<script>`` that escaping somehow let through would still not
run), framing, referrers and caching (a page holds message content).
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from aiohttp import web

from .. import Transport
from ..exceptions import NeotomaError
from ..log import get_logger
from ..reads import IdentityError
from ..server import Caller, Callers, allowed_hosts, local_guard, scoped_key, store_for
from . import _views
from ._html import render

__all__ = ["UI_PREFIX", "create_ui_app", "mount_ui"]

_log = get_logger()

#: where the web view lives on a server (``neotoma-agent ui`` and ``serve`` alike)
UI_PREFIX: Final = "/ui"

_CSP: Final = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS: Final = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_COOKIE: Final = "neotoma_ui_token"

_TRANSPORT: Final = web.AppKey("ui_transport", Transport)
_CALLERS: Final = web.AppKey("ui_callers", Callers)
_OUTBOX: Final = web.AppKey("ui_outbox", str)
_BASE: Final = web.AppKey("ui_base", str)

View = Callable[[web.Request, Transport], Awaitable[tuple[str, Mapping[str, Any]] | None]]


def _required(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if not value:
        raise web.HTTPBadRequest(text=f"the {name!r} parameter is required")
    return value


async def _conversations(request: web.Request, transport: Transport) -> tuple[str, Any]:
    after = request.query.get("after") or None
    try:
        data = await _views.conversations_view(transport, after=after)
    except ValueError:
        raise web.HTTPBadRequest(text="after must be a page's next link") from None
    return "conversations.html", data


async def _conversation(request: web.Request, transport: Transport) -> tuple[str, Any] | None:
    before = request.query.get("before") or None
    try:
        data = await _views.conversation_view(transport, _required(request, "id"), before=before)
    except IdentityError:
        return None  # an id no conversation can have (blank, a rejected value): not found
    return None if data is None else ("conversation.html", data)


async def _entity(request: web.Request, transport: Transport) -> tuple[str, Any] | None:
    data = await _views.entity_view(transport, _required(request, "id"))
    return None if data is None else ("entity.html", data)


async def _search(request: web.Request, transport: Transport) -> tuple[str, Any]:
    query = request.query.get("q", "")
    if "\x00" in query:
        raise web.HTTPBadRequest(text="q must not contain a NUL character")
    return "search.html", await _views.search_view(transport, query)


async def _health(request: web.Request, transport: Transport) -> tuple[str, Any]:
    outbox = request.app.get(_OUTBOX)
    data = await _views.health_view(
        transport, run_audit=request.query.get("audit") == "1", outbox=outbox or None
    )
    return "health.html", {**data, "bars": _views.chart_bars(data["turns_per_day"])}


#: path (under the prefix) -> the view behind its page and its JSON twin
_PAGES: Final[Mapping[str, View]] = {
    "": _conversations,
    "conversation": _conversation,
    "entity": _entity,
    "search": _search,
    "health": _health,
}


#: the request's transport: the view's, as the caller's token's user sees it
_SCOPED: Final = scoped_key("ui_scoped_transport")


def _caller(request: web.Request, offered: str) -> Caller | None:
    """Who ``offered`` (a token) is: the admin, a user, or no one.

    aiohttp decodes bytes that are not UTF-8 (in a header, a cookie, a query) as lone
    surrogates: encoding them back the same way gives the bytes sent and cannot fail.
    """
    if not offered:
        return None
    return request.app[_CALLERS].match(offered.encode("utf-8", "surrogateescape"))


def _authorised(request: web.Request) -> Caller | None:
    header = request.headers.get("Authorization", "")
    offered = header[7:] if header.startswith("Bearer ") else request.cookies.get(_COOKIE, "")
    return _caller(request, offered)


def _error(request: web.Request, status: int, message: str, *, as_json: bool) -> web.Response:
    if as_json:
        return web.json_response({"error": {"status": status, "message": message}}, status=status)
    html = render("error.html", request.app[_BASE], {"status": status, "message": message})
    return web.Response(text=html, status=status, content_type="text/html")


@web.middleware
async def _guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    as_json = request.path.startswith(f"{request.app[_BASE]}/api/")
    offered = request.query.get("token")
    caller = None if offered is not None else _authorised(request)
    if offered is not None:
        # A link with ?token= (what `serve` and `ui` print) logs the browser in once: the
        # token moves to a cookie and the address bar loses it.
        if _caller(request, offered) is None:
            response: web.StreamResponse = _error(request, 401, "wrong token", as_json=as_json)
        else:
            query = {k: v for k, v in request.query.items() if k != "token"}
            location = str(request.rel_url.with_query(query))
            response = web.Response(status=303, headers={"Location": location})
            response.set_cookie(
                _COOKIE,
                offered,
                httponly=True,
                samesite="Strict",
                path=request.app[_BASE] or "/",
            )
    elif caller is None:
        response = _error(request, 401, "this view needs the server's token", as_json=as_json)
    else:
        try:
            # A user's token shows that user's memory alone; the admin's, the default user's.
            request[_SCOPED] = store_for(request.app[_TRANSPORT], caller.user_id)
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = _error(request, exc.status, exc.text or exc.reason, as_json=as_json)
        except NeotomaError as exc:
            # The store failed or refused: say which kind, never what it quoted.
            response = _error(
                request, 502, f"the store could not answer ({type(exc).__name__})", as_json=as_json
            )
        except Exception as exc:
            # A bug: the class and the page in the log, never the message (it may quote
            # stored text), and a plain 500 page.
            _log.error("ui.error", path=request.path, error=type(exc).__name__)
            response = _error(request, 500, "the page failed (see the log)", as_json=as_json)
    response.headers.update(_HEADERS)
    return response


def _handler(view: View, *, as_json: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        answer = await view(request, request[_SCOPED])
        if answer is None:
            raise web.HTTPNotFound(text="not in this store")
        template, data = answer
        if as_json:
            return web.json_response(data, dumps=_dumps)
        context = {**data, "query": request.query.get("q", "")}
        html = render(template, request.app[_BASE], context)
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    return handle


def _dumps(value: object) -> str:
    import json

    # Exact text: a lone surrogate a foreign writer stored stays an escape, never a crash.
    return json.dumps(value, ensure_ascii=True)


async def _css(request: web.Request) -> web.Response:
    css = importlib.resources.files("neotoma_agent.ui").joinpath("static/ui.css").read_text()
    return web.Response(text=css, content_type="text/css")


def create_ui_app(
    transport: Transport,
    *,
    token: str,
    outbox: str | os.PathLike[str] | None = None,
    prefix: str = UI_PREFIX,
    users: Mapping[str, str] | None = None,
) -> web.Application:
    """The read-only web view over ``transport``, to mount at ``prefix``.

    ``token`` (required, non-empty): every request must carry it (``Authorization:
    Bearer``, or the HttpOnly ``SameSite=Strict`` cookie a first visit with ``?token=``
    sets, the token then leaving the address bar by a redirect). A ``Host`` that is not a
    loopback name or the address the request arrived on is refused (421), as on the
    server. ``outbox``: the outbox file whose queue the health page shows. The
    application never writes to the store. Mount it with :func:`mount_ui` (or
    ``parent.add_subapp(prefix, app)``). ``users`` maps more tokens to a user each (as
    ``serve --users``): such a token shows that user's memory alone (``transport.for_user``),
    ``token`` the default user's.
    """
    callers = Callers(token, users)
    if callers.scoped and not hasattr(transport, "for_user"):
        raise ValueError("users= needs a store with for_user (an EmbeddedStore)")
    app = web.Application(middlewares=[local_guard, _guard])
    app[_TRANSPORT] = transport
    app[_BASE] = prefix.rstrip("/")
    app[_CALLERS] = callers
    if outbox is not None:
        app[_OUTBOX] = os.fspath(outbox)
    for path, view in _PAGES.items():
        app.router.add_get(f"/{path}", _handler(view, as_json=False))
        app.router.add_get(f"/api/{path or 'conversations'}", _handler(view, as_json=True))
    app.router.add_get("/static/ui.css", _css)
    return app


def standalone_app(
    transport: Transport,
    *,
    token: str,
    outbox: str | os.PathLike[str] | None = None,
    hosts: Sequence[str] = (),
    users: Mapping[str, str] | None = None,
) -> web.Application:
    """The whole of ``neotoma-agent ui``: the view at :data:`UI_PREFIX`, ``/`` leading there.

    ``token``, ``outbox`` and ``users`` are :func:`create_ui_app`'s. The ``Host`` guard
    runs on the root application too, so that no path (``/`` and unrouted ones included)
    answers a rebound name; ``hosts`` are the names it was bound to (beside the loopback
    names). Serve it with :func:`neotoma_agent.server.serving`, or any aiohttp runner.
    """
    app = web.Application(middlewares=[local_guard])
    allowed_hosts(app, hosts)
    mount_ui(app, create_ui_app(transport, token=token, outbox=outbox, users=users))

    async def root(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{UI_PREFIX}/")

    app.router.add_get("/", root)
    return app


def mount_ui(parent: web.Application, ui: web.Application) -> None:
    """Mount the web view on ``parent`` at its prefix; ``/`` there redirects into it."""
    base = ui[_BASE]

    async def into_ui(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{base}/")

    parent.router.add_get(base, into_ui)  # before the sub-application, which would take it
    parent.add_subapp(base, ui)
