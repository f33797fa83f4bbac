"""The dev server's GET routes a real server's clients read: entities, observations, edges.

Each handler turns its path and query string into the body of an EmbeddedStore read action
and answers with the store's JSON (the store builds the server's shapes and refusals). A
query string is read the way the server reads it: the number and boolean options are
converted when they parse, and left as the text sent when not, so that validation refuses
them as Zod does (``limit=abc``: "Expected number, received string"); ``snapshot_filters``
is JSON. ``GET /entities`` is ``POST /entities/query`` with the same checks, as on the
server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from neotoma_agent.server import _validate
from neotoma_agent.server._replies import Issues, json_response, refusal
from neotoma_agent.server._routes import Handler, forward, store_of
from neotoma_agent.transport.embedded import EmbeddedStore, UserStore

__all__ = ["READ_ROUTES"]

_NUMBERS = frozenset(("limit", "offset"))
_FLAGS = frozenset(
    ("include_snapshots", "include_merged", "exclude_bookkeeping", "expand_entities")
)
_JSON = frozenset(("snapshot_filters",))


def _number(text: str) -> int | float | str:
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value):
        return text
    return int(value) if value.is_integer() else value


def _flag(text: str) -> bool | str:
    return {"true": True, "false": False}.get(text, text)


def query_body(query: Mapping[str, str]) -> dict[str, Any]:
    """A query string as the body the server's handler sees (the first of repeated keys)."""
    body: dict[str, Any] = {}
    for key in query:
        if key in body:
            continue
        text = query[key]
        if key in _NUMBERS:
            body[key] = _number(text)
        elif key in _FLAGS:
            body[key] = _flag(text)
        elif key in _JSON:
            body[key] = _validate.json_option(text, [key])
        else:
            body[key] = text
    return body


def _page(body: Mapping[str, Any]) -> dict[str, Any]:
    """``limit`` and ``offset`` of a listing, checked as numbers (absent: the store's defaults)."""
    issues = Issues()
    page: dict[str, Any] = {}
    for key in ("limit", "offset"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            issues.type_error([key], "number", value)
        else:
            page[key] = value
    issues.raise_if_any()
    return page


async def _read(request: web.Request, action: str, body: dict[str, Any]) -> web.StreamResponse:
    # The store, or its view of one user (the app's own store may be a view): the same
    # reads. A typed Transport has no method for them.
    store = store_of(request)
    if not isinstance(store, (EmbeddedStore, UserStore)):
        raise refusal(
            501,
            "NOT_IMPLEMENTED",
            f"The neotoma-agent dev server answers GET {request.path} over an EmbeddedStore only.",
        )
    return json_response(await store.request(action, body))


async def _get_entities(request: web.Request) -> web.StreamResponse:
    body = _validate.entities_query(query_body(request.query))
    return json_response(await forward(request, "entities/query", body))


async def _get_entity(request: web.Request) -> web.StreamResponse:
    return await _read(request, "get_entity", {"entity_id": request.match_info["id"]})


async def _get_entity_observations(request: web.Request) -> web.StreamResponse:
    body = {"entity_id": request.match_info["id"], **_page(query_body(request.query))}
    return await _read(request, "get_entity_observations", body)


async def _get_entity_relationships(request: web.Request) -> web.StreamResponse:
    expand = query_body(request.query).get("expand_entities") is True
    body = {"entity_id": request.match_info["id"], "expand_entities": expand}
    return await _read(request, "get_entity_relationships", body)


async def _get_relationship(request: web.Request) -> web.StreamResponse:
    return await _read(request, "get_relationship", {"relationship_key": request.match_info["id"]})


async def _get_relationships(request: web.Request) -> web.StreamResponse:
    query = query_body(request.query)
    ends = ("source_entity_id", "target_entity_id", "relationship_type")
    body: dict[str, Any] = {k: query[k] for k in ends if k in query}
    body.update(_page(query))
    return await _read(request, "get_relationships", body)


#: the GET routes of the reads, by path (the app registers them beside GET_ROUTES)
READ_ROUTES: dict[str, Handler] = {
    "/entities": _get_entities,
    "/entities/{id}": _get_entity,
    "/entities/{id}/observations": _get_entity_observations,
    "/entities/{id}/relationships": _get_entity_relationships,
    "/relationships": _get_relationships,
    "/relationships/{id}": _get_relationship,
}
