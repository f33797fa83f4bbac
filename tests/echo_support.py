"""A server that echoes a marker in every error it answers (a forged log line, a terminal
escape): for the tests that check a server's text reaches no log and no problem line."""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["HOSTILE", "MARKER", "echoing"]

MARKER = "ECHOED-7f3a"
#: what the server says in each error: the marker, an escape, a forged log line
HOSTILE = f"{MARKER}\x1b[31m\nlevel=critical event=forged {MARKER}"


def echoing(stores_passed: int) -> Any:
    """Every route fails with the marker, but the first ``stores_passed`` stores."""
    stores: list[int] = []

    @web.middleware
    async def echo(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/store":
            stores.append(1)
            if len(stores) <= stores_passed:
                result: web.StreamResponse = await handler(request)
                return result
        elif request.path == "/health":
            return await handler(request)  # type: ignore[no-any-return]
        error = {"code": "ERR_ECHO", "message": HOSTILE, "hint": HOSTILE}
        return web.json_response({"error": error, "message": HOSTILE}, status=500)

    return echo
