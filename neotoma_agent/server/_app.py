"""The dev server: Neotoma's REST subset over any Transport (normally an EmbeddedStore).

``neotoma-agent serve`` runs it so that several processes can share one store, and the HTTP
tests run :class:`~neotoma_agent.HttpTransport` against it. It answers the way a real Neotoma
server does for this subset (reference/neotoma-semantics.md and the recorded calls in
reference/samples/): the same routes, response bodies (the store's ``.raw`` is already the
server's JSON), both error envelope families, an HTML page for malformed JSON and unknown
routes, and the same request validation (closed top-level keys on the write routes, Zod-shaped
issues). Features outside the subset (file uploads, dry runs, time travel) are refused with
``501 NOT_IMPLEMENTED`` rather than silently ignored.

Auth: without a token the server binds loopback only and serves the local user, refusing any
``Authorization: Bearer`` it cannot validate (as a default Neotoma refuses ``dev-local``);
with a token every route but ``GET /health`` requires ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import ipaddress
import json
import os
import signal
import traceback
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp.typedefs
import attrs
from aiohttp import web

from neotoma_agent._envelopes import envelope_of, flat_envelope, html_error_page
from neotoma_agent._log import get_logger
from neotoma_agent._version import __version__
from neotoma_agent.exceptions import APIError, RateLimitedError
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport._rest import RestActions, present

__all__ = ["DEFAULT_MAX_BODY_SIZE", "create_app", "run_server", "serve", "serving"]

_log = get_logger()

DEFAULT_MAX_BODY_SIZE = 32 * 2**20
LOCAL_USER_ID = "00000000-0000-0000-0000-000000000000"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: an aiohttp middleware: ``async def m(request, handler) -> response``
Middleware = aiohttp.typedefs.Middleware

_STORE_KEY = web.AppKey("neotoma_store", Transport)
_TOKEN_KEY = web.AppKey("neotoma_token", str)

_dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"))

# Top-level keys the real server accepts on its closed routes (src/shared/action_schemas.ts).
_STORE_FIELDS = frozenset(
    {
        "commit",
        "entities",
        "external_actor",
        "file_content",
        "file_idempotency_key",
        "file_path",
        "idempotency_key",
        "interpretation",
        "mime_type",
        "observation_source",
        "original_filename",
        "relationships",
        "source_peer_id",
        "source_priority",
        "source_storage",
        "strict",
        "user_id",
    }
)
_CREATE_RELATIONSHIP_FIELDS = frozenset(
    {
        "metadata",
        "relationship_type",
        "source_entity_id",
        "source_id",
        "target_entity_id",
        "user_id",
    }
)
_CREATE_RELATIONSHIPS_FIELDS = frozenset({"relationships", "source_id", "user_id"})
_CORRECT_FIELDS = frozenset(
    {"entity_id", "entity_type", "field", "idempotency_key", "user_id", "value"}
)
_OBSERVATION_SOURCES = ("sensor", "llm_summary", "workflow_state", "human", "import", "sync")
_DIRECTIONS = ("inbound", "outbound", "both")


class _Reply(Exception):
    """Stop handling a request and send ``response`` (a refusal found while validating)."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__(response.status)
        self.response = response


def _json(body: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.json_response(dict(body), status=status, dumps=_dumps)


def _flat(status: int, code: str, message: str, details: Mapping[str, Any] | None = None) -> _Reply:
    return _Reply(_json(flat_envelope(code, message, details), status))


def _html(status: int, message: str) -> web.Response:
    return web.Response(
        status=status, text=html_error_page(message), content_type="text/html", charset="utf-8"
    )


def _too_large() -> web.Response:
    response = _html(413, "PayloadTooLargeError: request entity too large")
    # The rest of the body is left unread, so this connection cannot carry another request.
    response.force_close()
    return response


# --- Zod-shaped validation -----------------------------------------------------------------


def _zod_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


@attrs.define
class _Issues:
    """Collects Zod-style issues; :meth:`raise_if_any` sends them as the server would."""

    issues: list[dict[str, Any]] = attrs.Factory(list)

    def type_error(self, path: Sequence[str | int], expected: str, value: object) -> None:
        received = "undefined" if value is _MISSING else _zod_type(value)
        message = "Required" if value is _MISSING else f"Expected {expected}, received {received}"
        self.issues.append(
            {
                "code": "invalid_type",
                "expected": expected,
                "received": received,
                "path": list(path),
                "message": message,
            }
        )

    def enum_error(self, path: Sequence[str | int], options: Sequence[str], value: object) -> None:
        expected = " | ".join(f"'{o}'" for o in options)
        self.issues.append(
            {
                "received": value,
                "code": "invalid_enum_value",
                "options": list(options),
                "path": list(path),
                "message": f"Invalid enum value. Expected {expected}, received '{value}'",
            }
        )

    def custom(self, path: Sequence[str | int], message: str) -> None:
        self.issues.append({"code": "custom", "message": message, "path": list(path)})

    def too_small(self, path: Sequence[str | int], minimum: int) -> None:
        self.issues.append(
            {
                "code": "too_small",
                "minimum": minimum,
                "type": "array",
                "inclusive": True,
                "exact": False,
                "message": f"Array must contain at least {minimum} element(s)",
                "path": list(path),
            }
        )

    def out_of_range(
        self, path: Sequence[str | int], minimum: int, maximum: int, value: int
    ) -> None:
        big = value > maximum
        bound = maximum if big else minimum
        relation = "less" if big else "greater"
        self.issues.append(
            {
                "code": "too_big" if big else "too_small",
                ("maximum" if big else "minimum"): bound,
                "type": "number",
                "inclusive": True,
                "exact": False,
                "message": f"Number must be {relation} than or equal to {bound}",
                "path": list(path),
            }
        )

    def raise_if_any(self) -> None:
        if self.issues:
            raise _flat(
                400,
                "VALIDATION_INVALID_FORMAT",
                "Invalid request payload.",
                {"issues": self.issues},
            )


_MISSING: Any = object()


def _string(
    body: Mapping[str, Any], key: str, issues: _Issues, *, required: bool = False
) -> str | None:
    value = body.get(key, _MISSING)
    if value is _MISSING:
        if required:
            issues.type_error([key], "string", _MISSING)
        return None
    if not isinstance(value, str):
        issues.type_error([key], "string", value)
        return None
    return value


def _integer(body: Mapping[str, Any], key: str, issues: _Issues) -> int | None:
    value = body.get(key, _MISSING)
    if value is _MISSING:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        issues.type_error([key], "number", value)
        return None
    if isinstance(value, float):
        if not value.is_integer():
            issues.type_error([key], "integer", value)
            return None
        value = int(value)
    return value


def _objects(
    body: Mapping[str, Any], key: str, issues: _Issues, *, required: bool = False
) -> list[dict[str, Any]] | None:
    value = body.get(key, _MISSING)
    if value is _MISSING:
        if required:
            issues.type_error([key], "array", _MISSING)
        return None
    if not isinstance(value, list):
        issues.type_error([key], "array", value)
        return None
    ok = True
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            issues.type_error([key, index], "object", item)
            ok = False
    return value if ok else None


def _closed(body: Mapping[str, Any], allowed: frozenset[str], operation: str) -> None:
    """Refuse undeclared top-level keys, as the server's unknown-fields guard does."""
    unknown = [k for k in body if k not in allowed]
    if unknown:
        raise _flat(
            400,
            "ERR_UNKNOWN_FIELD",
            f"Request body contains field(s) not declared by {operation}.",
            {
                "unknown_fields": unknown,
                "json_paths": [f"$.{k}" for k in unknown],
                "allowed_fields": sorted(allowed),
                "operation": operation,
            },
        )


def _not_implemented(body: Mapping[str, Any], keys: Iterable[str], route: str) -> None:
    """Refuse features of the real server that this subset does not implement."""
    present = sorted(k for k in keys if body.get(k) is not None)
    if present:
        raise _flat(
            501,
            "NOT_IMPLEMENTED",
            f"The neotoma-agent dev server does not implement {', '.join(present)} on {route}.",
            {"unsupported_fields": present},
        )


def _check_user(body: Mapping[str, Any]) -> None:
    # The dev server has one user, the local dev user; a real server honours another
    # user_id only for an admin, and refuses it otherwise.
    user_id = body.get("user_id")
    if user_id is not None and user_id != LOCAL_USER_ID:
        raise _flat(403, "FORBIDDEN", "user_id does not match the authenticated user")


# --- route handlers --------------------------------------------------------------------------


def _store_of(request: web.Request) -> Transport:
    return request.app[_STORE_KEY]


async def _forward(request: web.Request, action: str, body: dict[str, Any]) -> Mapping[str, Any]:
    """Run REST ``action`` with a validated ``body`` on the app's store; its JSON answer.

    Both built-in transports speak these bodies natively (:class:`RestActions`), so the
    answer is passed through as is: parsing it into a typed result only to serialise its
    ``.raw`` again cost an eighth of the server's time per lookup. Any other Transport is
    called through its typed method.
    """
    store = _store_of(request)
    if isinstance(store, RestActions):
        return await store._request(action, body)
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


# The typed method behind each REST action, for stores that are not RestActions.
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
    "entities/query": lambda t, b: t.query_entities(
        entity_type=b.get("entity_type"),
        search=b.get("search"),
        limit=b["limit"],
        offset=b["offset"],
        cursor=b.get("cursor"),
    ),
    "correct": lambda t, b: t.correct(
        b["entity_id"],
        b["entity_type"],
        b["field"],
        b["value"],
        idempotency_key=b["idempotency_key"],
    ),
}


# Deeper request JSON is refused: Python's decoder (and any recursive walk after it) stops
# with RecursionError near the interpreter's limit of about 1000, and no turn needs more.
_MAX_JSON_DEPTH = 100
_TOO_DEEP = f"Request body is nested deeper than {_MAX_JSON_DEPTH} levels"


def _is_utf8(text: str) -> bool:
    # JSON may escape a lone UTF-16 surrogate ("\ud800"), which UTF-8, and so SQLite, cannot
    # store. Encoding is the fastest test for one (a regex is several times slower); the
    # error, which quotes the text, is dropped here.
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


_LONE_SURROGATE = "Request body contains a lone UTF-16 surrogate, which is not valid Unicode"


def _unstorable(value: object) -> str | None:
    """Why decoded JSON ``value`` cannot be stored, or None (never quoting it).

    Iterative, so that the check itself has no depth limit; strings are checked where they
    are met, so that only containers go on the stack (it runs on every request body).
    """
    if isinstance(value, str):
        return None if value.isascii() or _is_utf8(value) else _LONE_SURROGATE
    if not isinstance(value, (dict, list)):
        return None
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_JSON_DEPTH:
            return _TOO_DEEP
        if isinstance(item, dict):
            if not all(key.isascii() or _is_utf8(key) for key in item):
                return _LONE_SURROGATE
            children: Iterable[Any] = item.values()
        else:
            children = item
        for child in children:
            if isinstance(child, str):
                if not child.isascii() and not _is_utf8(child):
                    return _LONE_SURROGATE
            elif isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return None


async def _read_body(request: web.Request) -> dict[str, Any]:
    """The decoded JSON object, or a refusal shaped like Express's body-parser's.

    JSON that parses but cannot be stored (too deep, lone surrogates) is a validation error
    here, for every route, rather than a 500 from wherever it first breaks.
    """
    # A declared length over the limit is refused before any of the body is read: read()
    # would wait for all of it (100 GB declared, a few bytes sent: forever). A chunked body
    # has no length; read() stops it once it grows past the limit.
    declared = request.content_length
    if declared is not None and declared > request.client_max_size:
        raise _Reply(_too_large())
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _Reply(_too_large()) from None
    # Express parses only application/json bodies; anything else reaches the route as {}.
    if request.content_type != "application/json" or not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        problem: str | None = _TOO_DEEP
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Reply(_html(400, f"SyntaxError: {exc}")) from None
    else:
        problem = _unstorable(body)
    issues = _Issues()
    if problem is not None:
        issues.custom([], problem)
    elif not isinstance(body, dict):
        issues.type_error([], "object", body)
    issues.raise_if_any()
    _check_user(body)
    return dict(body)


async def _post_store(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    _closed(body, _STORE_FIELDS, "POST /store")
    issues = _Issues()
    entities = _objects(body, "entities", issues)
    relationships = _objects(body, "relationships", issues)
    key = _string(body, "idempotency_key", issues)
    priority = _integer(body, "source_priority", issues)
    source = body.get("observation_source")
    if source is not None and source not in _OBSERVATION_SOURCES:
        issues.enum_error(["observation_source"], _OBSERVATION_SOURCES, source)
    strict = body.get("strict", False)
    if not isinstance(strict, bool):
        issues.type_error(["strict"], "boolean", strict)
    commit = body.get("commit", True)
    if not isinstance(commit, bool):
        issues.type_error(["commit"], "boolean", commit)
    has_file = body.get("file_path") or (body.get("file_content") and body.get("mime_type"))
    if not issues.issues and not entities and not has_file:
        issues.custom(
            [],
            "Must provide either entities, file_path, or file_content with mime_type "
            "(or use intake.mode='overflow')",
        )
    issues.raise_if_any()
    unsupported = [
        "file_content",
        "file_idempotency_key",
        "file_path",
        "mime_type",
        "original_filename",
        "source_storage",
        "interpretation",
        "external_actor",
        "source_peer_id",
    ]
    _not_implemented(body, unsupported, "POST /store")
    if commit is False:
        _not_implemented({"commit": False}, ["commit"], "POST /store")
    if not key:
        raise _flat(
            400, "VALIDATION_ERROR", "idempotency_key is required when entities are provided"
        )
    forwarded = present(
        entities=entities or [],
        relationships=relationships or None,
        idempotency_key=key,
        source_priority=priority,
        observation_source=source,
        strict=strict or None,
    )
    return _json(await _forward(request, "store", forwarded))


async def _post_retrieve_entity_by_identifier(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    issues = _Issues()
    _string(body, "identifier", issues, required=True)
    entity_type = _string(body, "entity_type", issues)
    by = _string(body, "by", issues)
    limit = _integer(body, "limit", issues)
    observations_limit = _integer(body, "observations_limit", issues)
    if observations_limit is not None and not 1 <= observations_limit <= 200:
        issues.out_of_range(["observations_limit"], 1, 200, observations_limit)
    issues.raise_if_any()
    raw = dict(
        await _forward(
            request,
            "retrieve_entity_by_identifier",
            present(identifier=body["identifier"], entity_type=entity_type, by=by, limit=limit),
        )
    )
    if body.get("include_observations") is not True:
        return _json(raw)
    # The server reads each hit's observations (newest first) into the item itself.
    items = []
    for item in raw.get("entities") or []:
        entity_id = item.get("id") or item.get("entity_id")
        observations = await _forward(
            request,
            "list_observations",
            {
                "entity_id": entity_id,
                "limit": 20 if observations_limit is None else observations_limit,
                "offset": 0,
            },
        )
        items.append({**item, "observations": observations.get("observations", [])})
    raw["entities"] = items
    return _json(raw)


async def _post_create_relationship(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    _closed(body, _CREATE_RELATIONSHIP_FIELDS, "POST /create_relationship")
    issues = _Issues()
    _string(body, "relationship_type", issues, required=True)
    _string(body, "source_entity_id", issues, required=True)
    _string(body, "target_entity_id", issues, required=True)
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        issues.type_error(["metadata"], "object", metadata)
    issues.raise_if_any()
    _not_implemented(body, ["source_id"], "POST /create_relationship")
    forwarded = present(
        relationship_type=body["relationship_type"],
        source_entity_id=body["source_entity_id"],
        target_entity_id=body["target_entity_id"],
        metadata=metadata,
    )
    return _json(await _forward(request, "create_relationship", forwarded))


async def _post_create_relationships(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    _closed(body, _CREATE_RELATIONSHIPS_FIELDS, "POST /create_relationships")
    issues = _Issues()
    items = _objects(body, "relationships", issues, required=True)
    if items is not None and not items:
        issues.too_small(["relationships"], 1)
    issues.raise_if_any()
    _not_implemented(body, ["source_id"], "POST /create_relationships")
    return _json(await _forward(request, "create_relationships", {"relationships": items or []}))


async def _post_get_entity_snapshot(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    issues = _Issues()
    _string(body, "entity_id", issues, required=True)
    issues.raise_if_any()
    _not_implemented(body, ["at", "at_ingested"], "POST /get_entity_snapshot")
    return _json(await _forward(request, "get_entity_snapshot", {"entity_id": body["entity_id"]}))


async def _post_list_observations(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    issues = _Issues()
    _string(body, "entity_id", issues, required=True)
    limit = _integer(body, "limit", issues)
    offset = _integer(body, "offset", issues)
    issues.raise_if_any()
    _not_implemented(body, ["updated_since", "created_since"], "POST /list_observations")
    forwarded = {
        "entity_id": body["entity_id"],
        "limit": 100 if limit is None else limit,
        "offset": offset or 0,
    }
    return _json(await _forward(request, "list_observations", forwarded))


async def _post_retrieve_related_entities(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    issues = _Issues()
    _string(body, "entity_id", issues, required=True)
    types = body.get("relationship_types")
    if types is not None and (
        not isinstance(types, list) or not all(isinstance(t, str) for t in types)
    ):
        issues.type_error(["relationship_types"], "array", types)
        types = None
    direction = body.get("direction", "both")
    if direction not in _DIRECTIONS:
        issues.enum_error(["direction"], _DIRECTIONS, direction)
    max_hops = _integer(body, "max_hops", issues)
    include_entities = body.get("include_entities", True)
    issues.raise_if_any()
    raw = dict(
        await _forward(
            request,
            "retrieve_related_entities",
            present(
                entity_id=body["entity_id"],
                relationship_types=types,
                direction=direction,
                max_hops=1 if max_hops is None else max_hops,
            ),
        )
    )
    if include_entities is False:
        raw["entities"] = []
    return _json(raw)


_QUERY_UNSUPPORTED = (
    "entity_types",
    "sort_by",
    "sort_order",
    "include_merged",
    "updated_since",
    "created_since",
    "snapshot_filters",
    "exclude_bookkeeping",
    "identity_basis",
)


async def _post_entities_query(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    issues = _Issues()
    entity_type = _string(body, "entity_type", issues)
    search: str | None = None
    for alias in ("search", "query", "search_query"):
        search = search or _string(body, alias, issues)
    limit = _integer(body, "limit", issues)
    offset = _integer(body, "offset", issues)
    cursor = _string(body, "cursor", issues)
    issues.raise_if_any()
    _not_implemented(body, _QUERY_UNSUPPORTED, "POST /entities/query")
    if body.get("include_snapshots") is False:
        _not_implemented(body, ["include_snapshots"], "POST /entities/query")
    forwarded = present(
        entity_type=entity_type,
        search=search,
        limit=100 if limit is None else limit,
        offset=offset or 0,
        cursor=cursor,
    )
    return _json(await _forward(request, "entities/query", forwarded))


async def _post_correct(request: web.Request) -> web.StreamResponse:
    body = await _read_body(request)
    _closed(body, _CORRECT_FIELDS, "POST /correct")
    issues = _Issues()
    _string(body, "entity_id", issues, required=True)
    entity_type = _string(body, "entity_type", issues)
    _string(body, "field", issues, required=True)
    _string(body, "idempotency_key", issues, required=True)
    if "value" not in body:
        issues.type_error(["value"], "any", _MISSING)
    issues.raise_if_any()
    forwarded = {
        "entity_id": body["entity_id"],
        "entity_type": entity_type or "unknown",
        "field": body["field"],
        "value": body["value"],
        "idempotency_key": body["idempotency_key"],
    }
    return _json(await _forward(request, "correct", forwarded))


async def _get_health(request: web.Request) -> web.StreamResponse:
    return _json({"ok": True, "version": __version__})


_ROUTES: dict[str, Handler] = {
    "/store": _post_store,
    "/retrieve_entity_by_identifier": _post_retrieve_entity_by_identifier,
    "/create_relationship": _post_create_relationship,
    "/create_relationships": _post_create_relationships,
    "/get_entity_snapshot": _post_get_entity_snapshot,
    "/list_observations": _post_list_observations,
    "/retrieve_related_entities": _post_retrieve_related_entities,
    "/entities/query": _post_entities_query,
    "/correct": _post_correct,
}


# --- middlewares -------------------------------------------------------------------------


@web.middleware
async def _answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every outcome into the answer a real server gives: envelopes, pages, statuses."""
    try:
        return await handler(request)
    except _Reply as reply:
        return reply.response
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        # Express answers any unrouted method+path with this page (never a 405).
        return _html(404, f"Cannot {request.method} {request.path}")
    except web.HTTPRequestEntityTooLarge:
        return _too_large()
    except APIError as exc:
        response = _json(envelope_of(exc), exc.status)
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
        return _json(
            flat_envelope("DB_QUERY_FAILED", f"internal error ({type(exc).__name__})"), 500
        )


def _raised_at(exc: BaseException) -> list[str]:
    """``file:line in function`` of the innermost frames of ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)[-6:]
    return [f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames]


def _is_loopback_address(address: str | None) -> bool:
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


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
    """Who may call: the local user from loopback, or any caller with the server's token."""
    if request.match_info.http_exception is not None or request.path == "/health":
        return await handler(request)
    token = request.app.get(_TOKEN_KEY)
    bearer = _bearer(request)
    if token is None:
        if bearer is not None:
            # Like a default Neotoma: a token it cannot validate is refused, not ignored, so
            # a client configured with a made-up token finds out here rather than in prod.
            raise _invalid_token()
        if "X-Forwarded-For" in request.headers or not _is_loopback_address(request.remote):
            raise _flat(401, "AUTH_REQUIRED", "Missing Bearer token", {"hint": _AUTH_REQUIRED_HINT})
        return await handler(request)
    if bearer is None:
        raise _flat(401, "AUTH_REQUIRED", "Missing Bearer token", {"hint": _AUTH_REQUIRED_HINT})
    if not hmac.compare_digest(bearer, token.encode()):
        raise _invalid_token()
    return await handler(request)


def _invalid_token() -> _Reply:
    return _flat(401, "AUTH_INVALID", "Unauthorized - invalid authentication token")


def _as_middleware(inner: Middleware) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await inner(request, handler)

    return middleware


def create_app(
    store: Transport,
    *,
    token: str | None = None,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    middlewares: Sequence[Middleware] = (),
) -> web.Application:
    """An ``aiohttp.web`` application serving ``store`` over Neotoma's REST subset.

    The caller owns ``store`` (the app never closes it). With ``token``, every route but
    ``GET /health`` requires ``Authorization: Bearer <token>``. Bodies larger than
    ``max_body_size`` bytes are refused with 413. ``middlewares`` run innermost, after
    authentication and just around the route handler (tests inject faults and latency there).
    """
    if token is not None and not token:
        raise ValueError("token must be a non-empty string or None")
    chain: list[Middleware] = [_answers, _auth]
    chain.extend(_as_middleware(m) for m in middlewares)
    app = web.Application(client_max_size=max_body_size, middlewares=chain)
    app[_STORE_KEY] = store
    if token is not None:
        app[_TOKEN_KEY] = token
    for path, handler in _ROUTES.items():
        app.router.add_post(path, handler)
    app.router.add_get("/health", _get_health)
    return app


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` exposes the server to this machine only."""
    if host == "localhost":
        return True
    return _is_loopback_address(host)


def _check_bind(host: str, token: str | None) -> None:
    if token is None and not is_loopback_host(host):
        raise ValueError(
            f"refusing to listen on {host!r} without a token: anyone who can reach it could "
            "read and write the store; pass a token or bind 127.0.0.1"
        )


@contextlib.asynccontextmanager
async def serving(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    shutdown_timeout: float = 30.0,
) -> AsyncIterator[str]:
    """Serve ``app`` in the background for the ``async with`` block; yield its base URL.

    ``port=0`` picks a free port. On exit the server stops accepting connections, lets
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
        site = web.TCPSite(runner, host, port)
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
    stop: asyncio.Event,
    shutdown_timeout: float,
    on_ready: Callable[[str, int], None] | None,
) -> None:
    """Serve ``app`` until ``stop`` is set, then finish in-flight requests and close."""
    async with serving(app, host=host, port=port, shutdown_timeout=shutdown_timeout) as url:
        parsed = urllib.parse.urlsplit(url)
        bound_host, bound_port = parsed.hostname or host, parsed.port or port
        _log.info("server.listening", host=bound_host, port=bound_port)
        if on_ready is not None:
            on_ready(bound_host, bound_port)
        await stop.wait()
        _log.info("server.stopping")


def _bound_address(runner: web.AppRunner, host: str, port: int) -> tuple[str, int]:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return str(address[0]), int(address[1])
    return host, port


async def serve(
    db_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 3080,
    token: str | None = None,
    *,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    shutdown_timeout: float = 30.0,
    on_ready: Callable[[str, int], None] | None = None,
) -> None:
    """Serve the EmbeddedStore at ``db_path`` until SIGINT or SIGTERM (asyncio only).

    Refuses (``ValueError``) to listen on a non-loopback ``host`` without ``token``. On a
    signal it stops accepting connections, lets in-flight requests finish (at most
    ``shutdown_timeout`` seconds) and closes the store. ``on_ready(host, port)`` is called
    once listening (``port=0`` picks a free port).
    """
    _check_bind(host, token)
    from neotoma_agent.transport.embedded import EmbeddedStore

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows, threads
            pass
    try:
        async with EmbeddedStore.open(os.fspath(db_path)) as store:
            app = create_app(store, token=token, max_body_size=max_body_size)
            await _run_app(
                app,
                host,
                port,
                stop=stop,
                shutdown_timeout=shutdown_timeout,
                on_ready=on_ready,
            )
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_server(
    db_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 3080,
    token: str | None = None,
    *,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    on_ready: Callable[[str, int], None] | None = None,
) -> None:
    """Blocking entry point for ``neotoma-agent serve``: :func:`serve` on a new event loop."""
    _check_bind(host, token)  # fail before creating a loop
    asyncio.run(
        serve(
            db_path,
            host,
            port,
            token,
            max_body_size=max_body_size,
            on_ready=on_ready,
        )
    )
