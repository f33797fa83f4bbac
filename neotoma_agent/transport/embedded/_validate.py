"""Request validation shared by the actions: entities, relationships, bounded integers.

Every check here runs before the first write of a request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, overload

from ..._neotoma.identity import (
    ENTITY_ID_RE,
    js_json,
)
from ...exceptions import ValidationError
from .._wire import RELATIONSHIP_TYPES
from ._errors import (
    flat_error,
    invalid_format,
    resolution_failed,
)

__all__ = [
    "MAX_QUERY_OFFSET",
    "bounded_int",
    "check_entities",
    "check_query_offset",
    "check_relationship",
    "check_relationships",
    "check_term",
]


def check_entities(entities: object) -> list[Mapping[str, Any]]:
    if not isinstance(entities, list) or not entities:
        raise invalid_format("Must provide a non-empty list of entities", ["entities"])
    for i, element in enumerate(entities):
        if not isinstance(element, Mapping):
            raise invalid_format("each entity must be a JSON object", ["entities", i])
        etype = element.get("entity_type")
        if not isinstance(etype, str) or not etype.strip():
            raise invalid_format(
                "entity_type is required for each entity and must be a non-empty string",
                ["entities", i, "entity_type"],
            )
        target = element.get("target_id")
        if target is not None and not (isinstance(target, str) and ENTITY_ID_RE.match(target)):
            raise invalid_format(
                "target_id must be a Neotoma entity id (ent_ followed by 24 hex digits)",
                ["entities", i, "target_id"],
            )
    return entities


#: a checked relationship: type, source, target, metadata; in a store an end may be an index
Edge = tuple[str, str | int, str | int, Mapping[str, Any]]
#: a checked relationship whose ends are entity ids
IdEdge = tuple[str, str, str, Mapping[str, Any]]

# What an entity id must look like, in the server's words (its store route quotes them).
_ENTITY_ID_RULE = (
    "a Neotoma entity id (ent_ followed by 24 lowercase hex digits, matching generateEntityId)"
)


def check_relationships(relationships: object, n_entities: int) -> list[Edge]:
    """The ``relationships`` of a ``/store`` body, whose ends are batch indexes or ids."""
    if relationships is None:
        return []
    if not isinstance(relationships, list):
        raise invalid_format("relationships must be a list", ["relationships"])
    issues: list[dict[str, Any]] = []
    checked = [
        check_relationship(rel, ["relationships", i], n_entities=n_entities, issues=issues)
        for i, rel in enumerate(relationships)
    ]
    if issues:
        raise resolution_failed("Structured store relationship validation failed.", issues)
    return checked


#: each end of an edge: its name, and its two keys (a batch index, an entity id)
_ENDS: Final = (
    ("source", "source_index", "source_entity_id"),
    ("target", "target_index", "target_entity_id"),
)


@overload
def check_relationship(rel: object, path: list[str | int]) -> IdEdge: ...


@overload
def check_relationship(
    rel: object, path: list[str | int], *, n_entities: int, issues: list[dict[str, Any]]
) -> Edge: ...


def check_relationship(
    rel: object,
    path: list[str | int],
    *,
    n_entities: int | None = None,
    issues: list[dict[str, Any]] | None = None,
) -> Edge:
    """One relationship: its type, its two ends and its metadata (``{}`` when absent).

    Without ``n_entities`` (the create_relationship routes) each end is an entity id, and a
    malformed one is a schema error, as the server's request schema reports it. With it (a
    store) an end may instead be an index into the store's entities, and malformed ids are
    appended to ``issues`` for one ``ERR_STORE_RESOLUTION_FAILED``, as ``/store`` reports
    them; an end given by index is returned as that index, which the store resolves once its
    entities have ids.
    """
    if not isinstance(rel, Mapping):
        raise invalid_format("each relationship must be a JSON object", path)
    rtype = rel.get("relationship_type")
    if rtype not in RELATIONSHIP_TYPES:
        # A real server silently skips an unknown type; losing an edge silently is worse.
        raise invalid_format(
            f"relationship_type {rtype!r} is not one of Neotoma's relationship types",
            [*path, "relationship_type"],
        )
    ends: list[str | int] = []
    for end, index_key, id_key in _ENDS:
        if n_entities is not None:
            has_index = index_key in rel
            if has_index == (id_key in rel):
                raise invalid_format(f"give exactly one of {index_key} and {id_key}", path)
            if has_index:
                idx = rel[index_key]
                if not isinstance(idx, int) or isinstance(idx, bool) or not (0 <= idx < n_entities):
                    # The server skips an out-of-range index silently; we refuse.
                    raise invalid_format(
                        f"{index_key} {idx!r} is out of range for {n_entities} entities",
                        [*path, index_key],
                    )
                ends.append(idx)
                continue
        eid = rel.get(id_key)
        if not (isinstance(eid, str) and ENTITY_ID_RE.match(eid)):
            id_path = [*path, id_key]
            if issues is None:
                raise invalid_format(f"{end}_entity_id must be {_ENTITY_ID_RULE}", id_path)
            issues.append(
                {
                    "code": "ERR_RELATIONSHIP_ENTITY_ID_FORMAT",
                    "message": (
                        f"relationship_entity_id_format: {end}_entity_id must be {_ENTITY_ID_RULE}"
                    ),
                    "details": {"path": id_path},
                    "hint": "relationship_entity_id_format",
                }
            )
        ends.append(str(eid))
    metadata = rel.get("metadata")
    if not metadata:  # none, or an empty object (its JSON is "{}": nothing to check)
        if metadata is not None and not isinstance(metadata, Mapping):
            raise invalid_format("metadata must be a JSON object", [*path, "metadata"])
        return str(rtype), ends[0], ends[1], {} if metadata is None else metadata
    if not isinstance(metadata, Mapping):
        raise invalid_format("metadata must be a JSON object", [*path, "metadata"])
    try:
        js_json(dict(metadata))
    except ValueError as exc:
        # Checked here, before any write, rather than failing half-way through relate.
        raise invalid_format(
            f"metadata holds a value JSON cannot carry: {exc}", [*path, "metadata"]
        ) from None
    return str(rtype), ends[0], ends[1], metadata


#: The deepest entity-query offset a server (0.22.0) accepts: deeper paging takes a cursor.
MAX_QUERY_OFFSET: Final = 2000
_OFFSET_TOO_DEEP_HINT: Final = (
    "Deep `offset` paging is no longer accepted past 2000: it re-scans every prior row, so "
    "cost grows with depth. Page with `cursor` instead \u2014 read `next_cursor` from the "
    "previous response and pass it back as `cursor` (drop `offset` entirely). Cursor paging "
    "runs in constant time at any depth."
)


def check_query_offset(value: object) -> int:
    """An entity query's ``offset``, refused past :data:`MAX_QUERY_OFFSET` as a server does."""
    offset = bounded_int(value, "offset", 0, 2**31)
    if offset > MAX_QUERY_OFFSET:
        message = f"offset must not exceed {MAX_QUERY_OFFSET}; use cursor for deep pagination"
        issue = {
            "code": "custom",
            "message": message,
            "path": ["offset"],
            "params": {"code": "ERR_OFFSET_TOO_DEEP", "hint": _OFFSET_TOO_DEEP_HINT},
        }
        raise flat_error(
            ValidationError,
            400,
            "VALIDATION_INVALID_FORMAT",
            "Invalid request payload.",
            {"issues": [issue]},
        )
    return offset


def bounded_int(value: object, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise invalid_format(f"{name} must be an integer between {low} and {high}", [name])
    return value


def check_term(value: str, name: str) -> str:
    """``value``, a text searched for, or a 400 for a NUL in it: no stored name can hold one to
    match, and SQLite's full-text query ends at one (the server's routes answer the same)."""
    if "\x00" in value:
        raise invalid_format(f"{name} must not contain a NUL character", [name])
    return value
