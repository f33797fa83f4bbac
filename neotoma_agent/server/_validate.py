"""What the dev server accepts: request bodies decoded, bounded and checked per route.

:func:`read_body` decodes a body as Express's body-parser does (and refuses JSON that cannot
be stored); each route's function then checks the decoded body the way the real server does
(closed top-level keys on the write routes, Zod-shaped issues, ``501`` for features outside
the subset) and returns the body to forward to the store. Every refusal is a raised
:class:`~neotoma_agent.server._replies.Reply`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from aiohttp import web

from neotoma_agent.server._replies import (
    MISSING,
    Issues,
    Reply,
    html_response,
    refusal,
    too_large,
)
from neotoma_agent.server._users import claim_user
from neotoma_agent.transport.rest import (
    DIRECTIONS,
    MAX_DEPTH,
    OBSERVATION_SOURCES,
    is_storable,
    present,
)

T = TypeVar("T")


# Top-level keys the real server accepts on its closed routes (its action schemas).
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
_DELETION_FIELDS = frozenset({"entity_id", "entity_type", "reason", "user_id"})
_CORRECT_FIELDS = frozenset(
    {"entity_id", "entity_type", "field", "idempotency_key", "user_id", "value"}
)


def _typed(
    body: Mapping[str, Any],
    key: str,
    issues: Issues,
    expected: str,
    kind: type[T],
    *,
    required: bool,
) -> T | None:
    """``body[key]`` if it is a ``kind``; else None and an issue (if absent, only if required)."""
    value = body.get(key, MISSING)
    if value is MISSING:
        if required:
            issues.type_error([key], expected, MISSING)
        return None
    if not isinstance(value, kind):
        issues.type_error([key], expected, value)
        return None
    return value


def _string(
    body: Mapping[str, Any], key: str, issues: Issues, *, required: bool = False
) -> str | None:
    return _typed(body, key, issues, "string", str, required=required)


def _term(
    body: Mapping[str, Any], key: str, issues: Issues, *, required: bool = False
) -> str | None:
    """A string the store searches for: no NUL (no stored name can hold one to match)."""
    value = _string(body, key, issues, required=required)
    if value is not None and "\x00" in value:
        issues.custom([key], "must not contain a NUL character")
        return None
    return value


def _integer(body: Mapping[str, Any], key: str, issues: Issues) -> int | None:
    value = body.get(key, MISSING)
    if value is MISSING:
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
    body: Mapping[str, Any], key: str, issues: Issues, *, required: bool = False
) -> list[dict[str, Any]] | None:
    value = _typed(body, key, issues, "array", list, required=required)
    if value is None:
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
        raise refusal(
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
        raise refusal(
            501,
            "NOT_IMPLEMENTED",
            f"The neotoma-agent dev server does not implement {', '.join(present)} on {route}.",
            {"unsupported_fields": present},
        )


# Deeper request JSON is refused: Python's decoder (and any recursive walk after it) stops
# with RecursionError near the interpreter's limit of about 1000, and no turn needs more.
_TOO_DEEP = f"Request body is nested deeper than {MAX_DEPTH} levels"


_LONE_SURROGATE = "Request body contains a lone UTF-16 surrogate, which is not valid Unicode"


def _unstorable(value: object) -> str | None:
    """Why decoded JSON ``value`` cannot be stored, or None (never quoting it).

    Iterative, so that the check itself has no depth limit; strings are checked where they
    are met, so that only containers go on the stack (it runs on every request body).
    """
    if isinstance(value, str):
        return None if is_storable(value) else _LONE_SURROGATE
    if not isinstance(value, (dict, list)):
        return None
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return _TOO_DEEP
        if isinstance(item, dict):
            if not all(is_storable(key) for key in item):
                return _LONE_SURROGATE
            children: Iterable[Any] = item.values()
        else:
            children = item
        for child in children:
            if isinstance(child, str):
                if not is_storable(child):
                    return _LONE_SURROGATE
            elif isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return None


def json_option(text: str, path: Sequence[str | int]) -> Any:
    """A query-string option that holds JSON: its value, or ``text`` itself if not JSON.

    Text left as it was is refused by the option's type check, as the server's Zod schema
    does; JSON that cannot be stored (too deep, lone surrogates) is refused as a body is.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        problem: str | None = _TOO_DEEP
    except ValueError:
        return text
    else:
        problem = _unstorable(value)
    if problem is not None:
        issues = Issues()
        issues.custom(list(path), problem)
        issues.raise_if_any()
    return value


async def read_body(request: web.Request) -> dict[str, Any]:
    """The decoded JSON object, or a refusal shaped like Express's body-parser's.

    JSON that parses but cannot be stored (too deep, lone surrogates) is a validation error
    here, for every route, rather than a 500 from wherever it first breaks.
    """
    # A declared length over the limit is refused before any of the body is read: read()
    # would wait for all of it (100 GB declared, a few bytes sent: forever). A chunked body
    # has no length; read() stops it once it grows past the limit.
    declared = request.content_length
    if declared is not None and declared > request.client_max_size:
        raise Reply(too_large())
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise Reply(too_large()) from None
    # Express parses only application/json bodies; anything else reaches the route as {}.
    if request.content_type != "application/json" or not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        problem: str | None = _TOO_DEEP
    except (ValueError, UnicodeDecodeError) as exc:
        raise Reply(html_response(400, f"SyntaxError: {exc}")) from None
    else:
        problem = _unstorable(body)
    issues = Issues()
    if problem is not None:
        issues.custom([], problem)
    elif not isinstance(body, dict):
        issues.type_error([], "object", body)
    issues.raise_if_any()
    body = dict(body)
    # The user it acts for is decided here, once (the store scoped to that user does the
    # rest): no route forwards a user_id.
    claim_user(request, body.pop("user_id", None))
    return body


# --- per-route validation: each takes the decoded body and returns the body to forward ----


def store(body: Mapping[str, Any]) -> dict[str, Any]:
    _closed(body, _STORE_FIELDS, "POST /store")
    issues = Issues()
    entities = _objects(body, "entities", issues)
    relationships = _objects(body, "relationships", issues)
    key = _string(body, "idempotency_key", issues)
    priority = _integer(body, "source_priority", issues)
    source = body.get("observation_source")
    if source is not None and source not in OBSERVATION_SOURCES:
        issues.enum_error(["observation_source"], OBSERVATION_SOURCES, source)
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
        raise refusal(
            400, "VALIDATION_ERROR", "idempotency_key is required when entities are provided"
        )
    return present(
        entities=entities or [],
        relationships=relationships or None,
        idempotency_key=key,
        source_priority=priority,
        observation_source=source,
        strict=strict or None,
    )


def retrieve_entity_by_identifier(body: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The body to forward, and how many observations to add to each hit (None: none)."""
    issues = Issues()
    _term(body, "identifier", issues, required=True)
    entity_type = _string(body, "entity_type", issues)
    by = _string(body, "by", issues)
    limit = _integer(body, "limit", issues)
    observations_limit = _integer(body, "observations_limit", issues)
    if observations_limit is not None and not 1 <= observations_limit <= 200:
        issues.out_of_range(["observations_limit"], 1, 200, observations_limit)
    issues.raise_if_any()
    forwarded = present(identifier=body["identifier"], entity_type=entity_type, by=by, limit=limit)
    if body.get("include_observations") is not True:
        return forwarded, None
    return forwarded, 20 if observations_limit is None else observations_limit


def create_relationship(body: Mapping[str, Any]) -> dict[str, Any]:
    _closed(body, _CREATE_RELATIONSHIP_FIELDS, "POST /create_relationship")
    issues = Issues()
    _string(body, "relationship_type", issues, required=True)
    _string(body, "source_entity_id", issues, required=True)
    _string(body, "target_entity_id", issues, required=True)
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        issues.type_error(["metadata"], "object", metadata)
    issues.raise_if_any()
    _not_implemented(body, ["source_id"], "POST /create_relationship")
    return present(
        relationship_type=body["relationship_type"],
        source_entity_id=body["source_entity_id"],
        target_entity_id=body["target_entity_id"],
        metadata=metadata,
    )


def create_relationships(body: Mapping[str, Any]) -> dict[str, Any]:
    _closed(body, _CREATE_RELATIONSHIPS_FIELDS, "POST /create_relationships")
    issues = Issues()
    items = _objects(body, "relationships", issues, required=True)
    if items is not None and not items:
        issues.too_small(["relationships"], 1)
    issues.raise_if_any()
    _not_implemented(body, ["source_id"], "POST /create_relationships")
    return {"relationships": items or []}


def get_entity_snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    issues = Issues()
    _string(body, "entity_id", issues, required=True)
    issues.raise_if_any()
    _not_implemented(body, ["at", "at_ingested"], "POST /get_entity_snapshot")
    return {"entity_id": body["entity_id"]}


def list_observations(body: Mapping[str, Any]) -> dict[str, Any]:
    issues = Issues()
    _string(body, "entity_id", issues, required=True)
    limit = _integer(body, "limit", issues)
    offset = _integer(body, "offset", issues)
    issues.raise_if_any()
    _not_implemented(body, ["updated_since", "created_since"], "POST /list_observations")
    return {
        "entity_id": body["entity_id"],
        "limit": 100 if limit is None else limit,
        "offset": offset or 0,
    }


def retrieve_related_entities(body: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The body to forward, and whether the answer keeps its ``entities``."""
    issues = Issues()
    _string(body, "entity_id", issues, required=True)
    types = body.get("relationship_types")
    if types is not None and (
        not isinstance(types, list) or not all(isinstance(t, str) for t in types)
    ):
        issues.type_error(["relationship_types"], "array", types)
        types = None
    direction = body.get("direction", "both")
    if direction not in DIRECTIONS:
        issues.enum_error(["direction"], DIRECTIONS, direction)
    max_hops = _integer(body, "max_hops", issues)
    include_entities = body.get("include_entities", True)
    issues.raise_if_any()
    forwarded = present(
        entity_id=body["entity_id"],
        relationship_types=types,
        direction=direction,
        max_hops=1 if max_hops is None else max_hops,
    )
    return forwarded, include_entities is not False


#: the values ``identity_basis`` may take (its Zod enum)
IDENTITY_BASES = (
    "schema_rule",
    "schema_lookup",
    "heuristic_name",
    "heuristic_fallback",
    "target_id",
)
_SORT_ORDERS = ("asc", "desc")
# Options of the server's query that the embedded store does not have (published dates).
_QUERY_UNSUPPORTED = ("published", "published_after", "published_before")
_FILTER_OPS = ("eq", "in", "gt", "lt", "gte", "lte", "contains", "contains_word")
_QUERY_STRINGS = ("entity_type", "cursor", "sort_by", "updated_since", "created_since")
_QUERY_FLAGS = ("include_snapshots", "include_merged", "exclude_bookkeeping")


def _enum(body: Mapping[str, Any], key: str, options: Sequence[str], issues: Issues) -> None:
    value = _string(body, key, issues)
    if value is not None and value not in options:
        issues.enum_error([key], options, value)


def _snapshot_filters(body: Mapping[str, Any], issues: Issues) -> None:
    filters = _typed(body, "snapshot_filters", issues, "object", dict, required=False)
    for field, spec in (filters or {}).items():
        if not isinstance(spec, dict):
            issues.type_error(["snapshot_filters", field], "object", spec)
            continue
        op = spec.get("op", MISSING)
        if not isinstance(op, str):
            issues.type_error(["snapshot_filters", field, "op"], "string", op)
        elif op not in _FILTER_OPS:
            issues.enum_error(["snapshot_filters", field, "op"], _FILTER_OPS, op)


def entities_query(body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /entities/query`` and ``GET /entities``: the options' types, as Zod checks them.

    The rules between options (cursor with offset, offset and page caps) are the store's.
    """
    issues = Issues()
    for key in _QUERY_STRINGS:
        _string(body, key, issues)
    search: str | None = None
    for alias in ("search", "query", "search_query"):
        search = search or _term(body, alias, issues)
    entity_types = _typed(body, "entity_types", issues, "array", list, required=False)
    for index, item in enumerate(entity_types or ()):
        if not isinstance(item, str):
            issues.type_error(["entity_types", index], "string", item)
    limit = _integer(body, "limit", issues)
    if limit is not None and limit <= 0:
        issues.not_positive(["limit"])
    offset = _integer(body, "offset", issues)
    if offset is not None and offset < 0:
        issues.out_of_range(["offset"], 0, 2**31, offset)
    _enum(body, "sort_order", _SORT_ORDERS, issues)
    _enum(body, "identity_basis", IDENTITY_BASES, issues)
    for key in _QUERY_FLAGS:
        _typed(body, key, issues, "boolean", bool, required=False)
    _snapshot_filters(body, issues)
    issues.raise_if_any()
    _not_implemented(body, _QUERY_UNSUPPORTED, "/entities/query")
    passed = {k: body.get(k) for k in (*_QUERY_STRINGS, *_QUERY_FLAGS)}
    return present(
        **passed,
        entity_types=entity_types or None,
        search=search,
        limit=100 if limit is None else limit,
        offset=offset or 0,
        sort_order=body.get("sort_order"),
        identity_basis=body.get("identity_basis"),
        snapshot_filters=body.get("snapshot_filters"),
    )


def correct(body: Mapping[str, Any]) -> dict[str, Any]:
    _closed(body, _CORRECT_FIELDS, "POST /correct")
    issues = Issues()
    _string(body, "entity_id", issues, required=True)
    entity_type = _string(body, "entity_type", issues)
    _string(body, "field", issues, required=True)
    _string(body, "idempotency_key", issues, required=True)
    if "value" not in body:
        issues.type_error(["value"], "any", MISSING)
    issues.raise_if_any()
    return {
        "entity_id": body["entity_id"],
        "entity_type": entity_type or "unknown",
        "field": body["field"],
        "value": body["value"],
        "idempotency_key": body["idempotency_key"],
    }


def entity_deletion(body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /delete_entity`` and ``/restore_entity``: ``entity_id`` and ``entity_type``
    required, ``reason`` optional (the real server's ``DeleteEntityRequestSchema``)."""
    _closed(body, _DELETION_FIELDS, "POST /delete_entity")
    issues = Issues()
    _string(body, "entity_id", issues, required=True)
    _string(body, "entity_type", issues, required=True)
    _string(body, "reason", issues)
    issues.raise_if_any()
    return present(
        entity_id=body["entity_id"], entity_type=body["entity_type"], reason=body.get("reason")
    )
