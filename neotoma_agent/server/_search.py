"""The dev server's ``POST /text_search``: the store's full-text search (an extension).

A real Neotoma server has no such route (it answers 404, and
:class:`~neotoma_agent.HttpTransport` then searches through its other reads). The body is
``{"q": text, "limit"?: 1-100, "conversation_id"?: text}``; the answer is the
:class:`~neotoma_agent.SearchResult` JSON. Over an EmbeddedStore (or an HttpTransport to
another server) the body goes to the store as is, which checks it; over any other Transport
the typed search runs (its index if it has one, else its generic reads).
"""

from __future__ import annotations

from aiohttp import web

from neotoma_agent.exceptions import EmptySearchQueryError
from neotoma_agent.reads import search
from neotoma_agent.server._replies import MISSING, Issues, json_response, refusal
from neotoma_agent.server._routes import Handler, store_of
from neotoma_agent.server._validate import read_body
from neotoma_agent.transport.rest import SEARCH_ACTION, rest_request

__all__ = ["SEARCH_ROUTES"]


async def _post_search(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    store = store_of(request)
    answer = await rest_request(store, SEARCH_ACTION, body)
    if answer is not None:
        return json_response(answer)
    q, limit, scope = body.get("q", MISSING), body.get("limit", 10), body.get("conversation_id")
    issues = Issues()
    if not isinstance(q, str):
        issues.type_error(["q"], "string", q)
    if isinstance(limit, bool) or not isinstance(limit, int):
        issues.type_error(["limit"], "number", limit)
    if scope is not None and not isinstance(scope, str):
        issues.type_error(["conversation_id"], "string", scope)
    issues.raise_if_any()
    assert isinstance(q, str)  # checked above
    assert isinstance(limit, int)
    try:
        result = await search(store, q, limit=limit, conversation_id=scope)
    except EmptySearchQueryError:
        raise refusal(400, "VALIDATION_ERROR", "q is empty") from None
    except ValueError as exc:  # a limit out of range: the message names the bounds only
        raise refusal(400, "VALIDATION_ERROR", str(exc)) from None
    return json_response(result.to_json())


#: the route, by path (the app registers it beside the POST routes)
SEARCH_ROUTES: dict[str, Handler] = {f"/{SEARCH_ACTION}": _post_search}
