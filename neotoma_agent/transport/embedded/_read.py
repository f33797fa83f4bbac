"""The read actions: lookup by identifier, entity queries, snapshots and observations."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping
from typing import Any

from ..._identity import (
    ENTITY_ID_RE,
    entity_id_for,
    normalize,
    resolve_entity_type,
)
from ._errors import (
    invalid_format,
    not_found,
)
from ._name_index import (
    BOOKKEEPING,
    FIELD_KINDS,
    NAME_KINDS,
    SEARCH_FIELDS,
    first_token,
    substring_ids,
)
from ._rows import (
    DIRECT_COLUMNS,
    decode_state,
    direct_item,
    observation_json,
    query_item,
    snapshot_record,
)
from ._validate import bounded_int

__all__ = [
    "get_entity_snapshot",
    "list_observations",
    "query_entities",
    "retrieve_entity_by_identifier",
]


_BY_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_ENT_LIKE_RE = re.compile(r"^ent_[0-9a-f]+$", re.IGNORECASE)

# Up to this many matched ids are bound as `id IN (?, ...)`; more go through json_each,
# which costs a few µs more but keeps the number of distinct statements bounded.
_INLINE_IDS = 8


def get_entity_snapshot(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /get_entity_snapshot``; 404 when the entity is unknown or deleted."""
    entity_id = body.get("entity_id")
    if not isinstance(entity_id, str) or not entity_id:
        raise invalid_format("entity_id is required", ["entity_id"])
    row = conn.execute(
        "SELECT entity_type, snapshot, observation_count, last_observation_at "
        "FROM entities WHERE id = ?",
        (entity_id,),
    ).fetchone()
    if row is None:
        raise not_found()
    state = decode_state(row[1], row[2], row[3])
    if state.deleted:
        raise not_found()
    return snapshot_record(entity_id, row[0], state)


def list_observations(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /list_observations``: newest first."""
    entity_id = body.get("entity_id")
    if not isinstance(entity_id, str) or not entity_id:
        raise invalid_format("entity_id is required", ["entity_id"])
    limit = bounded_int(body.get("limit", 100), "limit", 1, 10_000)
    offset = bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    rows = conn.execute(
        "SELECT id, entity_id, entity_type, source_id, observed_at, source_priority, "
        "observation_source, specificity_score, fields, idempotency_key, identity_basis, "
        "identity_rule FROM observations WHERE entity_id = ? "
        "ORDER BY observed_at DESC, seq DESC LIMIT ? OFFSET ?",
        (entity_id, limit, offset),
    ).fetchall()
    return {"observations": [observation_json(r) for r in rows]}


def query_entities(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /entities/query``: by type and/or a search string over names, sorted by id."""
    types: list[str] = []
    if isinstance(body.get("entity_type"), str):
        types.append(resolve_entity_type(body["entity_type"]))
    extra = body.get("entity_types")
    if isinstance(extra, list):
        types.extend(resolve_entity_type(t) for t in extra if isinstance(t, str))
    search = body.get("search") or body.get("query") or body.get("search_query")
    limit = bounded_int(body.get("limit", 100), "limit", 1, 500)
    offset = bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    exclude_bookkeeping = body.get("exclude_bookkeeping") is True

    where: list[str] = []
    params: list[Any] = []
    if types:
        where.append(f"entity_type IN ({','.join('?' * len(types))})")
        params.extend(types)
    if exclude_bookkeeping:
        where.append(f"entity_type NOT IN ({','.join('?' * len(BOOKKEEPING))})")
        params.extend(sorted(BOOKKEEPING))
    search_mode = "none"
    if isinstance(search, str) and search.strip():
        ids = substring_ids(conn, search.strip().lower(), None)
        where.append("id IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(ids))
        search_mode = "lexical_fallback"
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    after, total = _parse_cursor(body.get("cursor"))
    if total is None:
        total = int(conn.execute(f"SELECT count(*) FROM entities{clause}", params).fetchone()[0])
    if after is not None:
        # Keyset paging: each page seeks to its start instead of skipping `offset` rows.
        clause = f"{clause} AND id > ?" if clause else " WHERE id > ?"
        params.append(after)
        offset = 0
    rows = conn.execute(
        "SELECT id, entity_type, canonical_name, snapshot, observation_count, "
        "last_observation_at "
        f"FROM entities{clause} ORDER BY id "
        "LIMIT ? OFFSET ?",
        (*params, limit, offset),
    ).fetchall()
    result: dict[str, Any] = {
        "entities": [query_item(r) for r in rows],
        "total": total,
        "limit": limit,
        "offset": offset,
        "search_mode": search_mode,
    }
    if len(rows) == limit:
        # Opaque to callers: the last id of this page, and the total counted on page one.
        # Like the server, a last page carries no next_cursor.
        result["next_cursor"] = f"{rows[-1][0]}.{total}"
    if search_mode != "none":
        result["applied_search_strategies"] = ["strict"]
    return result


def _parse_cursor(cursor: object) -> tuple[str | None, int | None]:
    """A ``next_cursor`` we gave out: ``(last id, total)``; ``(None, None)`` without one."""
    if cursor is None:
        return None, None
    if isinstance(cursor, str):
        last, _, total = cursor.rpartition(".")
        if ENTITY_ID_RE.match(last) and total.isdigit():
            return last, int(total)
    raise invalid_format("cursor must be a next_cursor from an earlier page", ["cursor"])


def retrieve_entity_by_identifier(
    conn: sqlite3.Connection, body: Mapping[str, Any]
) -> dict[str, Any]:
    """``POST /retrieve_entity_by_identifier``: by id, then name substring, then fields."""
    identifier = body.get("identifier")
    if not isinstance(identifier, str):
        raise invalid_format("identifier is required and must be a string", ["identifier"])
    entity_type = body.get("entity_type")
    if entity_type is not None and not isinstance(entity_type, str):
        raise invalid_format("entity_type must be a string", ["entity_type"])
    etype = resolve_entity_type(entity_type) if entity_type else None
    by = body.get("by")
    if by is not None and not (isinstance(by, str) and _BY_FIELD_RE.match(by)):
        raise invalid_format("by must be a field name", ["by"])
    limit = bounded_int(body.get("limit", 100), "limit", 1, 1000)
    text = identifier.strip()
    none: dict[str, Any] = {"entities": [], "total": 0, "match_mode": "none"}
    if not text:
        return none

    # Pass 1: an entity id is a primary-key lookup and nothing else.
    if _ENT_LIKE_RE.match(text):
        row = conn.execute(
            f"SELECT {DIRECT_COLUMNS} FROM entities WHERE id = ?", (text.lower(),)
        ).fetchone()
        if row is None:
            none["hint"] = (
                "identifier looks like an entity_id; use retrieve_entity_snapshot(entity_id) "
                "or check the id"
            )
            return none
        # The server's pass-1 item carries only these keys (sample d6), unlike pass 2's rows.
        full = direct_item(row)
        item = {k: full[k] for k in ("id", "entity_type", "canonical_name", "snapshot")}
        return {"entities": [item], "total": 1, "match_mode": "direct"}

    # Pass 2: case-insensitive substring of canonical names and aliases.
    needle = (normalize(etype, text) if etype else text.lower()).replace(",", "")
    memo: dict[str, list[tuple[str, str]]] = {}
    ids = substring_ids(conn, needle, NAME_KINDS, memo=memo) if needle else []
    rows: list[Any] = []
    if ids:
        type_clause = " AND entity_type = ?" if etype else ""
        if len(ids) <= _INLINE_IDS:
            id_list, id_args = f"({','.join('?' * len(ids))})", ids
        else:
            id_list, id_args = "(SELECT value FROM json_each(?))", [json.dumps(ids)]
        rows = conn.execute(
            f"SELECT {DIRECT_COLUMNS} FROM entities WHERE id IN {id_list}"
            f"{type_clause} ORDER BY canonical_name, id LIMIT ?",
            (*id_args, *((etype,) if etype else ()), limit),
        ).fetchall()
    if not rows and etype:
        rows = conn.execute(
            f"SELECT {DIRECT_COLUMNS} FROM entities WHERE id = ?",
            (entity_id_for(etype, text),),
        ).fetchall()
    if rows:
        items = [direct_item(r) for r in rows]
        return {"entities": items, "total": len(items), "match_mode": "direct"}

    # Pass 3: identity fields of snapshots: equality, then containment, then leading token.
    lowered = text.lower()
    fields = (by,) if by else SEARCH_FIELDS
    marks = ",".join("?" * len(fields))
    # The three index probes in one statement, tagged so that a stable sort keeps their order.
    probes = " UNION ALL ".join(
        f"SELECT {tag}, entity_id FROM field_values WHERE {column} = ? AND field IN ({marks})"
        for tag, column in enumerate(("value", "value", "first_token"))
    )
    rows = conn.execute(
        probes,
        (
            *(lowered, *fields),
            *(first_token(lowered), *fields),  # "Acme Corp" finds a field "Acme"
            *(lowered, *fields),  # "Acme" finds a field "Acme Corp"
        ),
    ).fetchall()
    rows.sort(key=lambda r: r[0])
    found = dict.fromkeys(r[1] for r in rows)  # an ordered set
    if by and by not in SEARCH_FIELDS:
        # An arbitrary field has no index: compare it on the snapshots (bounded, like the
        # server's scan of at most 500 snapshots).
        for (eid,) in conn.execute(
            "SELECT id FROM entities WHERE lower(json_extract(snapshot, ?)) = ? LIMIT 500",
            (f"$.f.{by}", lowered),
        ).fetchall():
            found.setdefault(eid)
    elif len(lowered) >= 3:
        kinds = frozenset(f"field:{f}" for f in fields) if by else FIELD_KINDS
        for eid in substring_ids(conn, lowered, kinds, bookkeeping=False, memo=memo):
            found.setdefault(eid)
    items = []
    for eid in found:
        row = conn.execute(
            "SELECT id, entity_type, canonical_name, snapshot FROM entities WHERE id = ?", (eid,)
        ).fetchone()
        if row is None or (etype and row[1] != etype):
            continue
        items.append(
            {
                "id": row[0],
                "entity_type": row[1],
                "canonical_name": row[2],
                "snapshot": json.loads(row[3]).get("f", {}),
            }
        )
        if len(items) >= limit:
            break
    if items:
        return {"entities": items, "total": len(items), "match_mode": "snapshot_field"}
    return none
