"""Who may address a local server at all: the ``Host`` allow-list, same-origin writes, proxies.

One middleware, :func:`local_guard`, runs first on ``serve`` and on ``ui`` (and on every route
of both, static files and ``/health`` included):

- **DNS rebinding.** A web page can point its own name at 127.0.0.1; the browser then sends
  it requests that look same-origin. They carry the page's name in ``Host``, so a request
  whose ``Host`` is not a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``), the
  address it arrived on or a name the server was bound to, with the port it arrived on,
  is refused with 421 before any route runs.
- **Cross-site writes.** A state-changing request (``POST``, ``PUT``, ``PATCH``,
  ``DELETE``) whose ``Origin`` is not the server's own or whose ``Sec-Fetch-Site`` is
  ``cross-site`` or ``same-site`` is refused with 403 (a page on another port of
  localhost is ``same-site`` and still another program).

No request is trusted for where it comes from: loopback is not a user boundary (another
account on the machine connects from it too) and a proxy on this machine relays the world
from it, with ``Forwarded`` / ``X-Forwarded-For`` / ``X-Real-IP`` saying so or not. So
neither app grants anything to a loopback peer, forwarding headers or not: every route but
``/health`` needs the token.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from aiohttp import web

__all__ = ["allowed_hosts", "is_loopback_address", "local_guard"]

#: names that always mean this machine (a browser sends them as they are in the address bar)
_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})

_WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ALLOWED_HOSTS: Final = web.AppKey("neotoma_allowed_hosts", frozenset)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback_address(address: str | None) -> bool:
    """Whether ``address`` (an IP, a v4-mapped v6 or a scoped v6 included) is loopback."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def allowed_hosts(app: web.Application, hosts: Iterable[str]) -> None:
    """Also accept ``hosts`` (names or addresses the server was bound to) in ``Host``."""
    names = {_host_name(h) for h in hosts if h}
    app[_ALLOWED_HOSTS] = frozenset(app.get(_ALLOWED_HOSTS, frozenset()) | names)


def _host_name(host: str) -> str:
    """How ``host`` appears in a ``Host`` header: lower case, a v6 address in brackets."""
    host = host.strip().lower()
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def _arrived_on(request: web.Request) -> tuple[str | None, int | None]:
    """The local address and port the request's connection arrived on."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return str(sockname[0]), int(sockname[1])
    return None, None


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a ``Host`` header value, or ``None`` when it is malformed."""
    try:
        parts = urllib.parse.urlsplit("//" + value)
        port = parts.port
        name = parts.hostname
    except ValueError:
        return None
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return _host_name(name), port


def _host_ok(request: web.Request) -> bool:
    raw = request.headers.getall("Host", [])
    if len(raw) != 1:
        return False
    split = _split_host(raw[0])
    if split is None:
        return False
    name, port = split
    # The names any application on the route's way allows (a mounted web view answers to
    # the names its parent server was bound to).
    names = _LOOPBACK_NAMES.union(
        *(app.get(_ALLOWED_HOSTS, frozenset()) for app in request.match_info.apps)
    )
    address, local_port = _arrived_on(request)
    if local_port is None:  # not a TCP socket (a Unix socket): no port to match
        return name in names
    if (port if port is not None else 80) != local_port:
        return False
    return name in names or (address is not None and name == _host_name(address))


def _same_origin(request: web.Request) -> bool:
    """Whether a write may proceed: not cross-site, and any ``Origin`` is this server."""
    if request.headers.get("Sec-Fetch-Site", "").lower() in ("cross-site", "same-site"):
        return False
    origins = request.headers.getall("Origin", [])
    if not origins:
        return True  # not a browser's cross-origin request (browsers send Origin on those)
    if len(origins) != 1:
        return False
    try:
        origin = urllib.parse.urlsplit(origins[0])
    except ValueError:
        return False
    if origin.scheme not in ("http", "https") or not origin.netloc:
        return False  # "null" (a sandboxed frame, a file: page) included
    host = request.headers.get("Host", "")
    default = 80 if origin.scheme == "http" else 443
    return _with_default_port(_split_host(origin.netloc), default) == _with_default_port(
        _split_host(host), default
    )


def _with_default_port(split: tuple[str, int | None] | None, default: int) -> object:
    if split is None:
        return None
    name, port = split
    return name, port if port is not None else default


def _refused(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"code": "MISDIRECTED" if status == 421 else "FORBIDDEN", "message": message}},
        status=status,
        headers={"Cache-Control": "no-store"},
    )


@web.middleware
async def local_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a foreign ``Host`` (421) and a cross-site write (403) before anything else."""
    if not _host_ok(request):
        # The Host is not quoted back: it is whatever a hostile page chose.
        return _refused(
            421, "this server answers only to its own address (a loopback name and its port)"
        )
    if request.method in _WRITES and not _same_origin(request):
        return _refused(403, "cross-origin write refused")
    return await handler(request)
