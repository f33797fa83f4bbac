"""The dev server's routes: one handler per route, forwarding the checked body to the store.

Each handler decodes and checks its body with :mod:`~neotoma_agent.server._validate`, runs
the matching REST action on the app's store and answers with the store's JSON as is (a real
server's answer, since the store's ``.raw`` already is one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from neotoma_agent import EntityDeleter, Transport, __version__
from neotoma_agent.reads import tenant_for
from neotoma_agent.server import _validate
from neotoma_agent.server._replies import json_response, refusal
from neotoma_agent.server._users import claim_user, user_store
from neotoma_agent.server._validate import read_body
from neotoma_agent.transport.rest import rest_request

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STORE_KEY = web.AppKey("neotoma_store", Transport)


def store_of(request: web.Request) -> Transport:
    """The app's store as the user ``request`` acts for sees it (:mod:`._users`)."""
    return user_store(request, request.app[STORE_KEY])


async def forward(request: web.Request, action: str, body: dict[str, Any]) -> Mapping[str, Any]:
    """Run REST ``action`` with a validated ``body`` on the app's store; its JSON answer.

    The built-in transports (the EmbeddedStore, an HttpTransport to another server) speak
    these bodies natively (:func:`neotoma_agent.transport.rest.rest_request`), so the answer is
    passed through as is: parsing it into a typed result only to serialise its ``.raw``
    again cost an eighth of the server's time per lookup. Any other Transport is called
    through its typed method.
    """
    store = store_of(request)
    answer = await rest_request(store, action, body)
    if answer is not None:
        return answer
    result = await _TYPED_CALLS[action](store, body)
    raw: Mapping[str, Any] = result.raw
    return raw


def _typed_store(t: Transport, b: Mapping[str, Any]) -> Awaitable[Any]:
    return t.store(
        b["entities"],
        idempotency_key=b["idempotency_key"],
        relationships=b.get("relationships", ()),
        source_priority=b.get("source_priority"),
        observation_source=b.get("observation_source"),
        strict=b.get("strict", False),
    )


# The options of /entities/query that Transport.query_entities takes; any other Transport
# cannot be asked the rest.
_TYPED_QUERY_OPTIONS = frozenset(("entity_type", "search", "limit", "offset", "cursor"))


def _typed_query(t: Transport, b: Mapping[str, Any]) -> Awaitable[Any]:
    untyped = sorted(k for k in b if k not in _TYPED_QUERY_OPTIONS)
    if untyped:
        raise refusal(
            501,
            "NOT_IMPLEMENTED",
            f"This dev server's store takes no {', '.join(untyped)} on /entities/query.",
            {"unsupported_fields": untyped},
        )
    return t.query_entities(
        entity_type=b.get("entity_type"),
        search=b.get("search"),
        limit=b["limit"],
        offset=b["offset"],
        cursor=b.get("cursor"),
    )


# The typed method behind each REST action, for stores other than the EmbeddedStore.
_TYPED_CALLS: dict[str, Callable[[Transport, Mapping[str, Any]], Awaitable[Any]]] = {
    "store": _typed_store,
    "retrieve_entity_by_identifier": lambda t, b: t.retrieve_entity_by_identifier(
        b["identifier"], entity_type=b.get("entity_type"), by=b.get("by"), limit=b.get("limit")
    ),
    "create_relationship": lambda t, b: t.create_relationship(
        b["relationship_type"],
        b["source_entity_id"],
        b["target_entity_id"],
        metadata=b.get("metadata"),
    ),
    "create_relationships": lambda t, b: t.create_relationships(b["relationships"]),
    "get_entity_snapshot": lambda t, b: t.get_entity_snapshot(b["entity_id"]),
    "list_observations": lambda t, b: t.list_observations(
        b["entity_id"], limit=b["limit"], offset=b["offset"]
    ),
    "retrieve_related_entities": lambda t, b: t.retrieve_related_entities(
        b["entity_id"],
        relationship_types=b.get("relationship_types"),
        direction=b["direction"],
        max_hops=b["max_hops"],
    ),
    "entities/query": _typed_query,
    "correct": lambda t, b: t.correct(
        b["entity_id"],
        b["entity_type"],
        b["field"],
        b["value"],
        idempotency_key=b["idempotency_key"],
    ),
    "delete_entity": lambda t, b: _deleter(t).delete_entity(
        b["entity_id"], b["entity_type"], reason=b.get("reason")
    ),
    "restore_entity": lambda t, b: _deleter(t).restore_entity(
        b["entity_id"], b["entity_type"], reason=b.get("reason")
    ),
}


def _deleter(t: Transport) -> EntityDeleter:
    if not isinstance(t, EntityDeleter):
        raise refusal(501, "NOT_IMPLEMENTED", "This dev server's store cannot delete entities.")
    return t


def _forwarding(action: str, check: Callable[[dict[str, Any]], dict[str, Any]]) -> Handler:
    """The handler of a route that checks its body and answers with the store's answer."""

    async def handler(request: web.Request) -> web.StreamResponse:
        body = check(await read_body(request))
        return json_response(await forward(request, action, body))

    return handler


async def _post_retrieve_entity_by_identifier(request: web.Request) -> web.StreamResponse:
    forwarded, observations_limit = _validate.retrieve_entity_by_identifier(
        await read_body(request)
    )
    raw = dict(await forward(request, "retrieve_entity_by_identifier", forwarded))
    if observations_limit is None:
        return json_response(raw)
    # The server reads each hit's observations (newest first) into the item itself.
    items = []
    for item in raw.get("entities") or []:
        entity_id = item.get("id") or item.get("entity_id")
        observations = await forward(
            request,
            "list_observations",
            {"entity_id": entity_id, "limit": observations_limit, "offset": 0},
        )
        items.append({**item, "observations": observations.get("observations", [])})
    raw["entities"] = items
    return json_response(raw)


async def _post_retrieve_related_entities(request: web.Request) -> web.StreamResponse:
    forwarded, include_entities = _validate.retrieve_related_entities(await read_body(request))
    raw = dict(await forward(request, "retrieve_related_entities", forwarded))
    if not include_entities:
        raw["entities"] = []
    return json_response(raw)


async def _get_health(request: web.Request) -> web.StreamResponse:
    # A store with users derives each user's entity ids under that user (Neotoma's
    # tenant-scoped ids): a client acting for a user must derive its ids the same way.
    scoped = hasattr(request.app[STORE_KEY], "for_user")
    return json_response({"ok": True, "version": __version__, "tenant_scoped_ids": scoped})


async def _get_me(request: web.Request) -> web.StreamResponse:
    # Neotoma's GET /me: the user the token acts for. A client that sent only its token
    # learns here whose ids it must derive (tenant_scoped_ids: the store derives this
    # user's entity ids under the user), so that what it reads by id is what it stored.
    store = store_of(request)
    user_id = getattr(store, "user_id", None) or claim_user(request, request.query.get("user_id"))
    scoped = tenant_for(store) is not None
    return json_response({"user_id": user_id, "tenant_scoped_ids": scoped})


#: the POST routes, by path; the two with their own handler reshape the store's answer
POST_ROUTES: dict[str, Handler] = {
    "/store": _forwarding("store", _validate.store),
    "/retrieve_entity_by_identifier": _post_retrieve_entity_by_identifier,
    "/create_relationship": _forwarding("create_relationship", _validate.create_relationship),
    "/create_relationships": _forwarding("create_relationships", _validate.create_relationships),
    "/get_entity_snapshot": _forwarding("get_entity_snapshot", _validate.get_entity_snapshot),
    "/list_observations": _forwarding("list_observations", _validate.list_observations),
    "/retrieve_related_entities": _post_retrieve_related_entities,
    "/entities/query": _forwarding("entities/query", _validate.entities_query),
    "/correct": _forwarding("correct", _validate.correct),
    "/delete_entity": _forwarding("delete_entity", _validate.entity_deletion),
    "/restore_entity": _forwarding("restore_entity", _validate.entity_deletion),
}
#: the GET routes, by path
GET_ROUTES: dict[str, Handler] = {"/health": _get_health, "/me": _get_me}
