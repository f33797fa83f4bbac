"""The read actions: lookup by identifier, entity queries, snapshots and observations."""

from __future__ import annotations

import base64
import binascii
import json
import re
import sqlite3
from collections.abc import Mapping
from typing import Any

from ..._neotoma.identity import (
    ENTITY_ID_RE,
    entity_id_for,
    normalize,
    resolve_entity_type,
)
from ...exceptions import APIError, ValidationError
from . import _derived_restatement as derived
from . import _first as first
from . import _scope
from ._codec import doc_fields, field_sql
from ._errors import (
    flat_error,
    invalid_format,
    not_found,
)
from ._id_prefix import id_among, id_is, ids_in
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
    LIVE,
    OBSERVATION_FIELDS,
    QUERY_COLUMNS,
    decode_entity,
    direct_item,
    dumps,
    encode_entity,
    encode_word,
    live_state,
    observation_json,
    query_item,
    snapshot_record,
    time_text,
)
from ._type_index import type_in
from ._type_prefix import id_order
from ._validate import bounded_int, check_query_offset, check_term

__all__ = [
    "get_entity_snapshot",
    "list_observations",
    "observations_page",
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
    live = live_state(conn, entity_id)
    if live is None:
        raise not_found()
    return snapshot_record(entity_id, live[0], live[1])


def list_observations(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /list_observations``: newest first."""
    entity_id = body.get("entity_id")
    if not isinstance(entity_id, str) or not entity_id:
        raise invalid_format("entity_id is required", ["entity_id"])
    limit = bounded_int(body.get("limit", 100), "limit", 1, 10_000)
    offset = bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    return {"observations": observations_page(conn, entity_id, limit, offset)}


# (``replace``: the fields' SQL holds braces)
# and the restatements derived from messages (``_derived_restatement``: their ids after)
_OBSERVATIONS = (
    first.OBSERVATIONS.replace("{fields}", OBSERVATION_FIELDS)
    + " UNION ALL "
    + derived.OBSERVATIONS
)


def observations_page(
    conn: sqlite3.Connection, entity_id: str, limit: int, offset: int
) -> list[dict[str, Any]]:
    """An entity's observations, newest first, in their answer shape."""
    rows = conn.execute(
        f"SELECT * FROM ({_OBSERVATIONS}) "
        f"WHERE EXISTS (SELECT 1 FROM entities WHERE {id_is('?1')} AND {_scope.owned()}) "
        "ORDER BY observed_at DESC, seq DESC LIMIT ?2 OFFSET ?3",
        (encode_entity(entity_id), limit, offset),
    ).fetchall()
    return [
        observation_json(r)
        if r[0] is not None
        else observation_json((derived.derived_id(r[3], entity_id, r[8]), *r[1:]))
        for r in rows
    ]


#: ``sort_by`` values other than ``snapshot.<field>``, and the column each orders by
_SORT_COLUMNS = {
    "entity_id": "id",
    "canonical_name": "canonical_name",
    "observation_count": "observation_count",
    "last_observation_at": "last_observation_at",
    "submitted_at": field_sql("created_at"),
}
#: the most rows a page may hold with snapshots (the server hydrates each), and without
MAX_PAGE_WITH_SNAPSHOTS = 500
_MAX_PAGE = 10_000
_CURSOR_VERSION = 1
# A snapshot field a filter or a sort names: its JSON path is built from it.
_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FILTER_COMPARISONS = {"gt": ">", "lt": "<", "gte": ">=", "lte": "<="}


def _combination(message: str, hint: str, code: str = "ERR_CURSOR_COMBINATION") -> APIError:
    """The server's refusal of a ``cursor`` that cannot be combined with another option."""
    issue = {
        "code": "custom",
        "message": message,
        "path": ["cursor"],
        "params": {"code": code, "hint": hint},
    }
    return flat_error(
        ValidationError,
        400,
        "VALIDATION_INVALID_FORMAT",
        "Invalid request payload.",
        {"issues": [issue], "hint": hint},
    )


def _invalid_cursor(message: str) -> APIError:
    hint = "drop the `cursor` parameter and re-paginate from the start"
    details = {"code": "INVALID_CURSOR", "message": message, "hint": hint}
    return flat_error(ValidationError, 400, "INVALID_CURSOR", message, details)


def encode_cursor(sort_order: str, last_id: str) -> str:
    """The server's keyset cursor: base64url (unpadded) JSON of the sort and the last id."""
    doc = {
        "v": _CURSOR_VERSION,
        "sort_by": "entity_id",
        "sort_order": sort_order,
        "entity_id": last_id,
    }
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode_cursor(cursor: object, sort_order: str) -> str:
    """The last id of a ``next_cursor`` we gave out for this ``sort_order``."""
    malformed = "cursor is malformed (not a valid pagination token)"
    if not isinstance(cursor, str):
        raise _invalid_cursor(malformed)
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        raise _invalid_cursor(malformed) from None
    if not isinstance(doc, dict) or not ENTITY_ID_RE.match(str(doc.get("entity_id", ""))):
        raise _invalid_cursor(malformed)
    if doc.get("v") != _CURSOR_VERSION or doc.get("sort_by") != "entity_id":
        raise _invalid_cursor("cursor was minted by an unsupported pagination version")
    if doc.get("sort_order") != sort_order:
        raise _invalid_cursor("cursor was minted under another sort_order than this request's")
    return str(doc["entity_id"])


def _sort_expression(sort_by: object) -> str:
    if not isinstance(sort_by, str):
        raise invalid_format("sort_by must be a string", ["sort_by"])
    if sort_by in _SORT_COLUMNS:
        return _SORT_COLUMNS[sort_by]
    field = sort_by.removeprefix("snapshot.")
    if field != sort_by and _FIELD_RE.match(field):
        return field_sql(field)
    raise invalid_format(
        f"sort_by must be one of {', '.join(_SORT_COLUMNS)} or snapshot.<field>", ["sort_by"]
    )


_WORD_BREAK_RE = re.compile(r"[\W_]+")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _words(value: object) -> str | None:
    """``value``'s words, ASCII-lowercased, each between spaces (``contains_word``'s terms).

    The stored value and the term are split alike, so "R&D" finds "VP of R&D" but "an" does
    not find "and".
    """
    if value is None:
        return None
    words = _WORD_BREAK_RE.split(str(value).translate(_ASCII_LOWER))
    return f" {' '.join(w for w in words if w)} "


def _filter_sql(conn: sqlite3.Connection, filters: object) -> tuple[list[str], list[Any]]:
    """``snapshot_filters``: one SQL condition per field, on the snapshot's value as text."""
    if not isinstance(filters, Mapping):
        raise invalid_format("snapshot_filters must be an object", ["snapshot_filters"])
    where: list[str] = []
    params: list[Any] = []
    for field, spec in filters.items():
        path = ["snapshot_filters", field]
        if not _FIELD_RE.match(field):
            raise invalid_format("a snapshot filter names a snapshot field", path)
        if not isinstance(spec, Mapping) or "op" not in spec:
            raise invalid_format("a snapshot filter is {op, value}", path)
        op, value = spec["op"], spec.get("value")
        column = field_sql(field)
        if op == "eq":
            where.append(f"{column} = ?")
            params.append(value)
        elif op == "in":
            if not isinstance(value, list):
                raise invalid_format("op in takes a list of values", [*path, "value"])
            where.append(f"{column} IN (SELECT value FROM json_each(?))")
            params.append(dumps(value))
        elif op in _FILTER_COMPARISONS:
            where.append(f"{column} {_FILTER_COMPARISONS[op]} ?")
            params.append(value)
        elif op == "contains":
            where.append(f"instr(lower({column}), lower(?)) > 0")
            params.append(str(value))
        elif op == "contains_word":
            conn.create_function("neotoma_words", 1, _words, deterministic=True)
            where.append(f"instr(neotoma_words({column}), ?) > 0")
            params.append(_words(value))
        else:
            raise invalid_format(
                "op must be one of eq, in, gt, lt, gte, lte, contains, contains_word",
                [*path, "op"],
            )
    return where, params


def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid_format(f"{name} must be a boolean", [name])
    return value


def _since(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid_format(f"{name} must be an ISO 8601 timestamp", [name])
    return value


def query_entities(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /entities/query`` (and ``GET /entities``): filter, sort and page entities.

    Types are taken as given (an alias such as ``agent_message`` matches nothing, sample
    k30i). ``next_cursor`` is offered on the default sort by id only, without ``search``
    and from ``offset`` 0, like the server's.
    """
    types: list[str] = []
    if isinstance(body.get("entity_type"), str):
        types.append(body["entity_type"])
    extra = body.get("entity_types")
    if isinstance(extra, list):
        types.extend(t for t in extra if isinstance(t, str))
    search = body.get("search") or body.get("query") or body.get("search_query")
    searching = isinstance(search, str) and bool(check_term(search, "search").strip())
    include_snapshots = _flag(body, "include_snapshots", True)
    _flag(body, "include_merged", False)  # nothing is ever merged here
    high = MAX_PAGE_WITH_SNAPSHOTS if include_snapshots else _MAX_PAGE
    limit = bounded_int(body.get("limit", 100), "limit", 1, high)
    offset = check_query_offset(body.get("offset", 0))
    sort_by = body.get("sort_by", "entity_id")
    order_column = _sort_expression(sort_by)
    sort_order = body.get("sort_order", "asc")
    if sort_order not in ("asc", "desc"):
        raise invalid_format("sort_order must be asc or desc", ["sort_order"])
    if searching and (sort_by != "entity_id" or sort_order != "asc"):
        raise invalid_format(
            "search cannot be combined with sort_by or sort_order=desc", ["search"]
        )
    cursor = body.get("cursor")
    if cursor is not None:
        if offset:
            raise _combination(
                "cursor and offset cannot be combined; use one or the other",
                "Pass `cursor` alone. It already encodes where the walk resumes, so `offset` "
                "is redundant \u2014 drop `offset` entirely.",
            )
        if searching:
            raise _combination(
                "cursor cannot be combined with search",
                "Search results are ranked, not keyset-ordered: page them with `offset`.",
            )
        if sort_by != "entity_id":
            raise _combination(
                "cursor is only supported with sort_by=entity_id",
                "Drop `sort_by` to walk by cursor, or page a custom sort with `offset`.",
            )

    # A soft-deleted entity is in no query, as on a server. ``instr`` first: the JSON is
    # parsed only for the rare row whose text holds the deletion mark.
    # The local dev user's untyped walk keeps the id order of the table itself.
    where: list[str] = [_scope.owned(index=bool(types) or _scope.uid() != 0), LIVE]
    params: list[Any] = []
    if types:
        clause, codes = type_in(types)
        where.append(clause)
        params.extend(codes)
    for name, column in (("updated_since", "updated_at"), ("created_since", "created_at")):
        since = _since(body, name)
        if since is not None:
            where.append(f"{time_text(column)} >= ?")
            params.append(since)
    basis = body.get("identity_basis")
    if basis is not None:
        if not isinstance(basis, str):
            raise invalid_format("identity_basis must be a string", ["identity_basis"])
        # The observation rows hold the entity's id as the entity row does (packed).
        where.append(
            "(EXISTS (SELECT 1 FROM observations o WHERE o.entity_row = entities.rowid "
            "AND o.identity_basis = ?) OR first_basis = ?)"
        )
        params.extend([encode_word(basis)] * 2)
    if body.get("snapshot_filters") is not None:
        conditions, values = _filter_sql(conn, body["snapshot_filters"])
        where.extend(conditions)
        params.extend(values)
    search_mode = "none"
    if searching:
        assert isinstance(search, str)
        if body.get("exclude_bookkeeping") is True and len(types) != 1:
            # Only the search path honours it; an explicit single type wins, as on a server.
            where.append(f"entity_type NOT IN ({','.join('?' * len(BOOKKEEPING))})")
            params.extend(sorted(BOOKKEEPING))
        ids = substring_ids(conn, search.strip().lower(), None)
        where.append(ids_in(f"?{len(params) + 1}"))  # (numbered: it is written twice)
        params.append(json.dumps(ids))
        search_mode = "lexical_fallback"
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = int(conn.execute(f"SELECT count(*) FROM entities{clause}", params).fetchone()[0])
    direction = "DESC" if sort_order == "desc" else "ASC"
    # A page in id order walks the type index or, of every type, the id index, each keyed
    # by 4 bytes of the id (``_type_prefix``, ``_id_prefix``): in their order, each run of
    # equal ones sorted by the id.
    by_prefix = order_column == "id"
    if cursor is not None:
        # Keyset paging: each page seeks to its start instead of skipping `offset` rows.
        after = encode_entity(_decode_cursor(cursor, sort_order))
        seek = "id < ?" if sort_order == "desc" else "id > ?"
        if by_prefix:  # (the id's first 4 bytes seek the index; no id after it is below)
            seek = f"substr(id, 1, 4) {seek[3]}= substr(?, 1, 4) AND {seek}"
            params.append(after)
        clause = f"{clause} AND {seek}" if clause else f" WHERE {seek}"
        params.append(after)
    order = f"id {direction}" if order_column == "id" else f"{order_column} {direction}, id ASC"
    sql = f"SELECT {QUERY_COLUMNS} FROM entities{clause} ORDER BY {order} LIMIT ? OFFSET ?"
    if by_prefix:
        # The rows a page skips are sorted as their rowids alone (their columns are read
        # for the page's rows only), then the page's rows read and put in id order.
        sql = (
            f"SELECT {QUERY_COLUMNS} FROM entities WHERE rowid IN (SELECT rowid FROM "
            f"entities{clause} ORDER BY {id_order('id', direction)} LIMIT ? OFFSET ?) "
            f"ORDER BY {order}"
        )
    rows = conn.execute(sql, (*params, limit, offset)).fetchall()
    items = [query_item(r) for r in rows]
    if not include_snapshots:
        for item in items:
            item["snapshot"] = {}
            item["provenance"] = {}
    result: dict[str, Any] = {
        "entities": items,
        "total": total,
        "limit": limit,
        "offset": offset,
        "search_mode": search_mode,
    }
    if len(rows) == limit and sort_by == "entity_id" and not searching and not offset:
        # Like the server, a page shorter than `limit` (the last) carries no next_cursor.
        result["next_cursor"] = encode_cursor(sort_order, decode_entity(rows[-1][0]))
    if searching:
        result["applied_search_strategies"] = ["strict"]
    return result


def retrieve_entity_by_identifier(
    conn: sqlite3.Connection,
    body: Mapping[str, Any],
    memo: dict[str, list[tuple[str, str]]] | None = None,
) -> dict[str, Any]:
    """``POST /retrieve_entity_by_identifier``: by id, then name substring, then fields.

    ``memo``: the name-index searches of needles already made in the same transaction
    (lookups run as one job share them: a name looked up as written and among people
    searches its text once)."""
    identifier = body.get("identifier")
    if not isinstance(identifier, str):
        raise invalid_format("identifier is required and must be a string", ["identifier"])
    check_term(identifier, "identifier")
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
            f"SELECT {DIRECT_COLUMNS} FROM entities WHERE {id_is('?1')} AND {_scope.owned()} "
            f"AND {LIVE}",
            (encode_entity(text.lower()),),
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
    memo = {} if memo is None else memo
    ids = substring_ids(conn, needle, NAME_KINDS, memo=memo) if needle else []
    rows: list[Any] = []
    if ids:
        type_clause = " AND entity_type = ?" if etype else ""
        if len(ids) <= _INLINE_IDS:
            id_list, id_args = id_among(len(ids)), [encode_entity(i) for i in ids]
        else:
            id_list, id_args = ids_in("?1"), [json.dumps(ids)]
        rows = conn.execute(
            f"SELECT {DIRECT_COLUMNS} FROM entities WHERE {id_list} AND {_scope.owned()} "
            f"AND {LIVE}"
            f"{type_clause} ORDER BY canonical_name, id LIMIT ?",
            (*id_args, *((etype,) if etype else ()), limit),
        ).fetchall()
    if not rows and etype:
        rows = conn.execute(
            f"SELECT {DIRECT_COLUMNS} FROM entities WHERE {id_is('?1')} AND {_scope.owned()} "
            f"AND {LIVE}",
            (encode_entity(entity_id_for(etype, text, _scope.tenant())),),
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
        f"SELECT {tag}, entity_id FROM field_values WHERE {_scope.owned(index=True)} "
        f"AND {column} = ? "
        f"AND field IN ({marks})"
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
        # server's scan of at most 500 snapshots), equal first, then, as the server's scan
        # does, on the first 500 snapshots (of the type): containing it ("halcyon.com" in
        # "https://www.halcyon.com/"), or a leading token equal either way.
        of_type, type_args = (" AND type_code = ?", (encode_word(etype),)) if etype else ("", ())
        # (in the type index's order: the type, then the id, ``_type_prefix``)
        order = f" ORDER BY {'' if etype else 'type_code, '}{id_order()}"
        for (eid,) in conn.execute(
            f"SELECT id FROM entities WHERE {_scope.owned(index=True)} "
            f"AND lower({field_sql('?')}) = ?"
            f"{of_type}{order} LIMIT 500",
            (by, by, lowered, *type_args),
        ).fetchall():
            found.setdefault(decode_entity(eid))
        scan = (
            f"SELECT id, {field_sql('?')} FROM (SELECT id, snapshot, canonical_name FROM "
            f"entities WHERE {_scope.owned(index=True)}{of_type}{order} LIMIT 500)"
        )
        lead = first_token(lowered)
        for eid, value in conn.execute(scan, (by, by, *type_args)).fetchall():
            if value is None or isinstance(value, (bytes, bytearray)):
                continue
            folded = str(value).strip().lower()
            if folded and (lowered in folded or folded == lead or first_token(folded) == lowered):
                found.setdefault(decode_entity(eid))
    elif len(lowered) >= 3:
        kinds = frozenset(f"field:{f}" for f in fields) if by else FIELD_KINDS
        for eid in substring_ids(conn, lowered, kinds, bookkeeping=False, memo=memo):
            found.setdefault(eid)
    items = []
    for eid in found:
        row = conn.execute(
            "SELECT id, entity_type, canonical_name, snapshot FROM entities "
            f"WHERE {id_is('?1')} AND {_scope.owned()} AND {LIVE}",
            (encode_entity(eid),),
        ).fetchone()
        if row is None or (etype and row[1] != etype):
            continue
        items.append(
            {
                "id": eid,
                "entity_type": row[1],
                "canonical_name": row[2],
                "snapshot": doc_fields(json.loads(row[3]), row[2]),
            }
        )
        if len(items) >= limit:
            break
    if items:
        return {"entities": items, "total": len(items), "match_mode": "snapshot_field"}
    return none
