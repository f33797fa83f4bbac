"""The embedded store's operations: synchronous, on the DB thread, inside a savepoint.

Each function takes the connection and a request body shaped like the REST body of the same
action, and returns the JSON a real Neotoma server would answer (reference semantics §3–5).
Every check runs before the first write, and the caller's savepoint rolls back anything a
late failure left behind, so a store is atomic: all of it or nothing, not even its key.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..._identity import (
    ENTITY_ID_RE,
    Identity,
    IdentityError,
    TypeSchema,
    hash_uuid,
    identity_keys,
    js_json,
    normalize,
    resolve_entity_type,
    resolve_identity,
    resolve_identity_cached,
    schema_for,
)
from ...exceptions import ValidationError
from ._errors import (
    flat_error,
    idempotency_mismatch,
    invalid_format,
    not_found,
    now_iso,
    resolution_failed,
)
from ._reducer import ObservationMeta, SnapshotState, fold, source_rank

__all__ = ["RELATIONSHIP_TYPES", "USER_ID"]

USER_ID = "00000000-0000-0000-0000-000000000000"  # a local server's dev user

# Closed and case-sensitive, as on the server (semantics §1.5).
RELATIONSHIP_TYPES = frozenset(
    (
        "PART_OF CORRECTS REFERS_TO SETTLES DUPLICATE_OF DEPENDS_ON SUPERSEDES EMBEDS "
        "works_at owns manages part_of related_to depends_on references transacted_with "
        "member_of reports_to located_at created_by funded_by acquired_by subsidiary_of "
        "partner_of competitor_of supplies_to contracted_with invested_in"
    ).split()
)
OBSERVATION_SOURCES = frozenset(
    ("sensor", "llm_summary", "workflow_state", "human", "import", "sync")
)
_BOOKKEEPING = frozenset(("conversation", "conversation_message", "conversation_turn"))
_NAME_KINDS = frozenset(("name", "alias"))
# Snapshot fields a lookup compares against the identifier (semantics §4 pass 3).
_SEARCH_FIELDS = ("name", "full_name", "title", "email", "domain", "company")
_FIELD_KINDS = frozenset(f"field:{f}" for f in _SEARCH_FIELDS)  # their name_index kinds
_BY_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENT_LIKE_RE = re.compile(r"^ent_[0-9a-f]+$", re.IGNORECASE)
_SCHEMA_VERSIONS = {"conversation": "1.4", "conversation_message": "1.4"}
_STRICT_OK_RULES = ("name_key:canonical_name", "name_key:email", "id_key:")


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _content_hash(entities: Sequence[Mapping[str, Any]]) -> str:
    try:
        text = js_json(list(entities))
    except ValueError as exc:
        raise invalid_format(
            f"entities hold a value JSON cannot carry: {exc}", ["entities"]
        ) from None
    return hashlib.sha256(text.encode()).hexdigest()


# -- reads shared by several actions -------------------------------------------------------


def _entity_row(conn: sqlite3.Connection, entity_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT id, entity_type, canonical_name, aliases, created_at, updated_at "
        "FROM entities WHERE id = ?",
        (entity_id,),
    ).fetchone()
    return _entity_json(row) if row else None


def _entity_json(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": row[0],
        "entity_type": row[1],
        "canonical_name": row[2],
        "aliases": [] if row[3] == "[]" else json.loads(row[3]),  # most have none
        "created_at": row[4],
        "updated_at": row[5],
        "user_id": USER_ID,
        "first_seen_at": None,
        "last_seen_at": None,
        "merged_to_entity_id": None,
        "merged_at": None,
        "merged_into": None,
    }


def _load_row(conn: sqlite3.Connection, entity_id: str) -> tuple[SnapshotState, int] | None:
    """An entity's snapshot state and message count, or None if there is no such entity."""
    row = conn.execute(
        "SELECT snapshot, observation_count, last_observation_at, message_count "
        "FROM entities WHERE id = ?",
        (entity_id,),
    ).fetchone()
    if row is None:
        return None
    return SnapshotState.from_json(json.loads(row[0]), row[1], row[2]), int(row[3])


def _load_state(conn: sqlite3.Connection, entity_id: str) -> SnapshotState | None:
    row = conn.execute(
        "SELECT snapshot, observation_count, last_observation_at FROM entities WHERE id = ?",
        (entity_id,),
    ).fetchone()
    if row is None:
        return None
    return SnapshotState.from_json(json.loads(row[0]), row[1], row[2])


def _display_name(fields: Mapping[str, Any]) -> str | None:
    for key in ("name", "title", "full_name"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _snapshot_record(entity_id: str, entity_type: str, state: SnapshotState) -> dict[str, Any]:
    return _snapshot_json(
        entity_id,
        entity_type,
        state.fields,
        state.provenance,
        state.observation_count,
        state.last_observation_at,
    )


def _snapshot_json(
    entity_id: str,
    entity_type: str,
    fields: dict[str, Any],
    provenance: dict[str, str],
    observation_count: int,
    last_observation_at: str | None,
) -> dict[str, Any]:
    return {
        "entity_id": entity_id,
        "entity_type": entity_type,
        "schema_version": _SCHEMA_VERSIONS.get(entity_type, "1.0"),
        "canonical_name": _display_name(fields),
        "snapshot": fields,
        "computed_at": last_observation_at,
        "observation_count": observation_count,
        "last_observation_at": last_observation_at,
        "provenance": provenance,
        "user_id": USER_ID,
    }


# -- store -------------------------------------------------------------------------------


@attrs.define
class _Planned:
    """One request element after validation and identity resolution, before any write."""

    index: int
    entity_type: str
    fields: dict[str, Any]
    identity: Identity
    exists: bool
    action: str
    #: the entity's snapshot state before this store (None: new, or first seen in this batch)
    state: SnapshotState | None = None
    #: the stored message count (conversations; 0 for a new entity)
    message_count: int = 0


def _check_entities(entities: object) -> list[Mapping[str, Any]]:
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


def _check_relationships(relationships: object, n_entities: int) -> list[Mapping[str, Any]]:
    if relationships is None:
        return []
    if not isinstance(relationships, list):
        raise invalid_format("relationships must be a list", ["relationships"])
    issues: list[dict[str, Any]] = []
    for i, rel in enumerate(relationships):
        path: list[str | int] = ["relationships", i]
        if not isinstance(rel, Mapping):
            raise invalid_format("each relationship must be a JSON object", path)
        rtype = rel.get("relationship_type")
        if rtype not in RELATIONSHIP_TYPES:
            # A real server silently skips an unknown type; losing an edge silently is worse.
            raise invalid_format(
                f"relationship_type {rtype!r} is not one of Neotoma's relationship types",
                [*path, "relationship_type"],
            )
        for end in ("source", "target"):
            has_index = f"{end}_index" in rel
            has_id = f"{end}_entity_id" in rel
            if has_index == has_id:
                raise invalid_format(f"give exactly one of {end}_index and {end}_entity_id", path)
            if has_index:
                idx = rel[f"{end}_index"]
                if not isinstance(idx, int) or isinstance(idx, bool) or not (0 <= idx < n_entities):
                    # The server skips an out-of-range index silently; we refuse.
                    raise invalid_format(
                        f"{end}_index {idx!r} is out of range for {n_entities} entities",
                        [*path, f"{end}_index"],
                    )
            else:
                eid = rel[f"{end}_entity_id"]
                if not (isinstance(eid, str) and ENTITY_ID_RE.match(eid)):
                    issues.append(
                        {
                            "code": "ERR_RELATIONSHIP_ENTITY_ID_FORMAT",
                            "message": (
                                f"relationship_entity_id_format: {end}_entity_id must be a "
                                "Neotoma entity id (ent_ followed by 24 lowercase hex digits, "
                                "matching generateEntityId)"
                            ),
                            "details": {"path": [*path, f"{end}_entity_id"]},
                            "hint": "relationship_entity_id_format",
                        }
                    )
        metadata = rel.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise invalid_format("metadata must be a JSON object", [*path, "metadata"])
        try:
            js_json(metadata)
        except ValueError as exc:
            # Checked here, before any write, rather than failing half-way through _relate.
            raise invalid_format(
                f"metadata holds a value JSON cannot carry: {exc}", [*path, "metadata"]
            ) from None
    if issues:
        raise resolution_failed("Structured store relationship validation failed.", issues)
    return relationships


def _entity_exists(conn: sqlite3.Connection, entity_id: str) -> bool:
    return conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity_id,)).fetchone() is not None


def _plan(
    conn: sqlite3.Connection, entities: list[Mapping[str, Any]], strict: bool
) -> list[_Planned]:
    planned: list[_Planned] = []
    issues: list[dict[str, Any]] = []
    batch_roles: dict[str, object] = {}
    for index, element in enumerate(entities):
        etype = resolve_entity_type(str(element["entity_type"]).strip())
        fields = {
            k: v for k, v in element.items() if k not in ("entity_type", "intent", "target_id")
        }
        target = element.get("target_id")
        if isinstance(target, str):
            row = _entity_row(conn, target)
            if row is None and target not in batch_roles:
                issues.append(
                    {
                        "observation_index": index,
                        "entity_type": etype,
                        "code": "ERR_TARGET_NOT_FOUND",
                        "message": f"target_id {target} does not name an existing entity",
                        "details": {"entity_id": target},
                    }
                )
                continue
            identity = Identity(
                entity_type=etype,
                canonical_name=row["canonical_name"] if row else target,
                entity_id=target,
                identity_basis="target_id",
                identity_rule="target_id",
                resolver_path=("target_id",),
            )
            planned.append(_Planned(index, etype, fields, identity, True, "extended"))
            batch_roles.setdefault(target, fields.get("role"))
            continue
        try:
            identity = resolve_identity_cached(etype, fields)
        except IdentityError as exc:
            issues.append(
                {
                    "observation_index": index,
                    "entity_type": etype,
                    "code": exc.code,
                    "message": exc.message,
                    "details": exc.details,
                }
            )
            continue
        eid = identity.entity_id
        in_batch = eid in batch_roles
        loaded = None if in_batch else _load_row(conn, eid)
        state, message_count = loaded if loaded is not None else (None, 0)
        exists = in_batch or state is not None
        schema = schema_for(etype)
        refusal = _refusal(
            identity, schema, exists, strict or element.get("intent") == "create_new"
        )
        if refusal is not None:
            issues.append(
                {
                    "observation_index": index,
                    "entity_type": etype,
                    "code": "ERR_MERGE_REFUSED",
                    "message": refusal[1],
                    "details": {
                        "entity_id": eid,
                        "canonical_name": identity.canonical_name,
                        "resolver_path": list(identity.resolver_path),
                        "reason": refusal[0],
                        "policy": schema.name_collision_policy if schema else "merge",
                    },
                }
            )
            continue
        if etype == "conversation_message" and fields.get("role") == "assistant" and exists:
            existing_role = batch_roles[eid] if in_batch else state and state.fields.get("role")
            if existing_role == "user":
                issues.append(
                    {
                        "observation_index": index,
                        "entity_type": etype,
                        "code": "ERR_CONVERSATION_MESSAGE_ROLE_CONFLICT",
                        "message": (
                            f"assistant message reuses the turn_key of a user message "
                            f"({identity.canonical_name}); use '<conversation_id>:<turn_id>"
                            ":assistant'"
                        ),
                        "details": {"entity_id": eid, "turn_key": fields.get("turn_key")},
                    }
                )
                continue
        batch_roles.setdefault(eid, fields.get("role"))
        action = "matched_existing" if exists else "created"
        planned.append(
            _Planned(index, etype, fields, identity, exists, action, state, message_count)
        )
    if issues:
        raise resolution_failed(
            f"Structured store refused: {len(issues)} observation(s) failed resolution.", issues
        )
    return planned


def _refusal(
    identity: Identity, schema: TypeSchema | None, exists: bool, strict: bool
) -> tuple[str, str] | None:
    if not exists or identity.from_schema_rule:
        return None
    if schema is not None and schema.name_collision_policy == "reject":
        return (
            "schema_policy",
            f'Schema policy "name_collision_policy: reject": resolution for '
            f'"{identity.entity_type}" landed on existing entity {identity.entity_id} '
            f'(canonical_name "{identity.canonical_name}") via a heuristic path. Supply a '
            "value for the schema's canonical_name_fields to match deterministically, or pass "
            "target_id to extend the existing entity.",
        )
    if strict and not identity.identity_rule.startswith(_STRICT_OK_RULES):
        return (
            "strict",
            f"strict mode: refusing to merge into existing entity {identity.entity_id} "
            f'(canonical_name "{identity.canonical_name}") via {identity.identity_rule}',
        )
    return None


def store(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /store``: entities and relationships under an idempotency key, atomically."""
    entities = _check_entities(body.get("entities"))
    key = body.get("idempotency_key")
    if not isinstance(key, str) or not key:
        raise flat_error(
            ValidationError,
            400,
            "VALIDATION_ERROR",
            "idempotency_key is required when entities are provided",
        )
    priority = body.get("source_priority", 100)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise invalid_format("source_priority must be an integer", ["source_priority"])
    if body.get("commit", True) is not True:
        # A dry run must write nothing; this store does not implement one, so it refuses.
        raise invalid_format("commit: false (dry run) is not supported", ["commit"])
    obs_source = body.get("observation_source") or "llm_summary"
    if obs_source not in OBSERVATION_SOURCES:
        raise invalid_format(
            f"observation_source must be one of {sorted(OBSERVATION_SOURCES)}",
            ["observation_source"],
        )
    content_hash = _content_hash(entities)

    seen = conn.execute(
        "SELECT entities_hash, source_id FROM idempotency_keys WHERE key = ?", (key,)
    ).fetchone()
    if seen is not None:
        if seen[0] != content_hash:
            raise idempotency_mismatch(key)
        return _replay(conn, seen[1], key)

    relationships = _check_relationships(body.get("relationships"), len(entities))
    planned = _plan(conn, entities, bool(body.get("strict", False)))

    now = now_iso()
    source_id = hash_uuid(f"source:{USER_ID}:{content_hash}")

    out_entities: list[dict[str, Any]] = []
    ids_by_index: dict[int, str] = {}
    types_by_id: dict[str, str] = {}
    created = 0
    states: dict[str, SnapshotState] = {}
    new_ids: set[str] = set()
    written: list[list[str]] = []
    for item in planned:
        ident = item.identity
        if not item.exists:
            new_ids.add(ident.entity_id)
            _index_name(
                conn, ident.canonical_name.lower(), ident.entity_id, ident.entity_type, "name"
            )
            created += 1
        elif item.action == "extended":
            created += 1
        obs_id, snapshot = _observe(
            conn,
            entity_id=ident.entity_id,
            entity_type=item.entity_type,
            fields=item.fields,
            source_id=source_id,
            priority=priority,
            obs_source=obs_source,
            identity=ident,
            now=now,
            states=states,
            known_state=item.state if item.exists else SnapshotState(),
            create=ident if ident.entity_id in new_ids else None,
        )
        new_ids.discard(ident.entity_id)
        written.append([ident.entity_id, item.entity_type, obs_id])
        ids_by_index[item.index] = ident.entity_id
        types_by_id[ident.entity_id] = item.entity_type
        existing = "existing_row:matched" if item.exists else "existing_row:none"
        out_entities.append(
            {
                "entity_id": ident.entity_id,
                "entity_type": item.entity_type,
                "observation_id": obs_id,
                "observation_index": item.index,
                "action": item.action,
                "canonical_name": ident.canonical_name,
                "resolver_path": [*ident.resolver_path, existing],
                "identity_basis": ident.identity_basis,
                "identity_rule": ident.identity_rule,
                "entity_snapshot_after": snapshot,
            }
        )

    written.reverse()  # a replay lists a source's observations newest first
    conn.execute(
        "INSERT INTO idempotency_keys (key, entities_hash, source_id, observations, "
        "created_at) VALUES (?, ?, ?, ?, ?)",
        (key, content_hash, source_id, _dumps(written), now),
    )

    counts: dict[str, int] = {}
    created_edges: list[dict[str, Any]] = []
    for rel in relationships:
        src = (
            ids_by_index[rel["source_index"]] if "source_index" in rel else rel["source_entity_id"]
        )
        dst = (
            ids_by_index[rel["target_index"]] if "target_index" in rel else rel["target_entity_id"]
        )
        rtype = str(rel["relationship_type"])
        _relate(
            conn, rtype, src, dst, rel.get("metadata") or {}, source_id, now, types_by_id, counts
        )
        created_edges.append(
            {"relationship_type": rtype, "source_entity_id": src, "target_entity_id": dst}
        )

    response: dict[str, Any] = {
        "success": True,
        "replayed": False,
        "commit": True,
        "source_id": source_id,
        "entities_created": created,
        "observations_created": len(planned),
        "entities": out_entities,
        "relationships_created": created_edges,
    }
    count = _conversation_message_count(conn, planned, counts)
    if count is not None:
        response["conversation_message_count"] = count
    return response


def _replay(conn: sqlite3.Connection, source_id: str, key: str) -> dict[str, Any]:
    row = conn.execute("SELECT observations FROM idempotency_keys WHERE key = ?", (key,)).fetchone()
    entries = []
    for entity_id, entity_type, obs_id in json.loads(row[0]):
        state = _load_state(conn, entity_id)
        entries.append(
            {
                "entity_id": entity_id,
                "entity_type": entity_type,
                "observation_id": obs_id,
                "entity_snapshot_after": dict(state.fields) if state else None,
                "deduplicated": True,
            }
        )
    return {
        "success": True,
        "replayed": True,
        "source_id": source_id,
        "entities_created": 0,
        "observations_created": len(entries),
        "entities": entries,
    }


def _index_name(
    conn: sqlite3.Connection, text: str, entity_id: str, entity_type: str, kind: str
) -> None:
    if entity_type in _BOOKKEEPING:
        conn.execute(
            "INSERT INTO bookkeeping_names (text, entity_id, kind) VALUES (?, ?, ?)",
            (text, entity_id, kind),
        )
    else:
        _index_text(conn, text, entity_id, kind)


def _trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


def _index_text(conn: sqlite3.Connection, text: str, entity_id: str, kind: str) -> None:
    """Make ``text`` findable by substring for ``entity_id`` (see ``_substring_ids``)."""
    conn.execute(
        "INSERT INTO name_index (text, entity_id, kind) VALUES (?, ?, ?)", (text, entity_id, kind)
    )
    conn.executemany(
        "INSERT INTO trigram_df (gram, n) VALUES (?, 1) ON CONFLICT (gram) DO UPDATE SET n = n + 1",
        ((g,) for g in _trigrams(text)),
    )


def _observe(
    conn: sqlite3.Connection,
    *,
    entity_id: str,
    entity_type: str,
    fields: dict[str, Any],
    source_id: str | None,
    priority: int,
    obs_source: str | None,
    identity: Identity | None,
    now: str,
    obs_id: str | None = None,
    idempotency_key: str | None = None,
    states: dict[str, SnapshotState] | None = None,
    known_state: SnapshotState | None = None,
    create: Identity | None = None,
) -> tuple[str, dict[str, Any] | None]:
    """Append one observation and fold it into the snapshot; return its id and the snapshot.

    With ``create``, the entity is new: its row is inserted with the folded snapshot.
    """
    fields_json = js_json(fields)
    if obs_id is None:
        # The server's observation id: a hash of this exact JSON (keys in this order).
        obs_id = hash_uuid(
            '{"source_id":'
            + _dumps(source_id)
            + ',"interpretation_id":"none","entity_id":'
            + _dumps(entity_id)
            + ',"fields":'
            + fields_json
            + "}"
        )
    cur = conn.execute(
        "INSERT OR IGNORE INTO observations (id, entity_id, entity_type, source_id, "
        "observed_at, source_priority, observation_source, specificity_score, fields, "
        "idempotency_key, identity_basis, identity_rule) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            obs_id,
            entity_id,
            entity_type,
            source_id,
            now,
            priority,
            obs_source,
            1.0,
            fields_json,
            idempotency_key,
            identity.identity_basis if identity else None,
            identity.identity_rule if identity else None,
        ),
    )
    # Reuse the state this store already read or wrote instead of reading the row again.
    if states is not None and entity_id in states:
        state: SnapshotState | None = states[entity_id]
    elif known_state is not None:
        state = known_state
    else:
        state = _load_state(conn, entity_id)
    if cur.rowcount == 0:
        # The same fields from the same source are already recorded: nothing new to fold.
        return obs_id, dict(state.fields) if state else None
    if state is None:
        state = SnapshotState()
    old_fields = dict(state.fields)
    meta = ObservationMeta(
        id=obs_id,
        seq=int(cur.lastrowid or 0),
        observed_at=now,
        source_priority=priority,
        source_rank=source_rank(obs_source),
    )
    fold(state, meta, fields, schema_for(entity_type))
    if states is not None:
        states[entity_id] = state
    doc = _dumps(state.to_json())
    if create is not None:
        conn.execute(
            "INSERT INTO entities (id, entity_type, canonical_name, aliases, created_at, "
            "updated_at, snapshot, observation_count, last_observation_at) "
            "VALUES (?, ?, ?, '[]', ?, ?, ?, ?, ?)",
            (
                entity_id,
                create.entity_type,
                create.canonical_name,
                now,
                now,
                doc,
                state.observation_count,
                state.last_observation_at,
            ),
        )
    else:
        conn.execute(
            "UPDATE entities SET snapshot = ?, observation_count = ?, last_observation_at = ?, "
            "updated_at = ? WHERE id = ?",
            (doc, state.observation_count, state.last_observation_at, now, entity_id),
        )
    _index_fields(conn, entity_id, old_fields, state.fields)
    _rederive_name(conn, entity_id, entity_type, old_fields, state.fields, now)
    return obs_id, dict(state.fields)


def _first_token(value: str) -> str:
    parts = value.split(None, 1)
    return parts[0] if parts else ""


def _index_fields(
    conn: sqlite3.Connection,
    entity_id: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
) -> None:
    """Keep the lookup indexes of the searchable snapshot fields in step with the snapshot."""
    for name in _SEARCH_FIELDS:
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if isinstance(before, str):
            conn.execute(
                "DELETE FROM field_values WHERE entity_id = ? AND field = ?", (entity_id, name)
            )
            conn.execute(
                "DELETE FROM name_index WHERE entity_id = ? AND kind = ?",
                (entity_id, f"field:{name}"),
            )
        if isinstance(after, str) and after.strip():
            value = after.strip().lower()
            conn.execute(
                "INSERT INTO field_values (entity_id, field, value, first_token) "
                "VALUES (?, ?, ?, ?)",
                (entity_id, name, value, _first_token(value)),
            )
            _index_text(conn, value, entity_id, f"field:{name}")


def _rederive_name(
    conn: sqlite3.Connection,
    entity_id: str,
    entity_type: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    now: str,
) -> None:
    """Semantics §1.4: a merged snapshot whose identity names something else renames the
    entity (old name kept as an alias) when nobody owns the new name. The id never changes."""
    if old == new or not old:
        return
    keys = identity_keys(entity_type)
    if keys is not None and any(k in old for k in keys):
        changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
        if changed.isdisjoint(keys):
            return  # e.g. a turn record's status: identity cannot have moved
    try:
        before = resolve_identity(entity_type, old)
        after = resolve_identity(entity_type, new)
    except IdentityError:
        return
    if before.entity_id == after.entity_id or _entity_exists(conn, after.entity_id):
        return
    row = conn.execute(
        "SELECT canonical_name, aliases FROM entities WHERE id = ?", (entity_id,)
    ).fetchone()
    if row is None or row[0] == after.canonical_name:
        return
    aliases = json.loads(row[1])
    if row[0] not in aliases:
        aliases.append(row[0])
    conn.execute(
        "UPDATE entities SET canonical_name = ?, aliases = ?, updated_at = ? WHERE id = ?",
        (after.canonical_name, _dumps(aliases), now, entity_id),
    )
    table = "bookkeeping_names" if entity_type in _BOOKKEEPING else "name_index"
    conn.execute(
        f"UPDATE {table} SET kind = 'alias' WHERE entity_id = ? AND kind = 'name'", (entity_id,)
    )
    _index_name(conn, after.canonical_name.lower(), entity_id, entity_type, "name")


def _entity_type_of(
    conn: sqlite3.Connection, entity_id: str, known: Mapping[str, str]
) -> str | None:
    if entity_id in known:
        return known[entity_id]
    row = conn.execute("SELECT entity_type FROM entities WHERE id = ?", (entity_id,)).fetchone()
    return str(row[0]) if row else None


def _relate(
    conn: sqlite3.Connection,
    rtype: str,
    src: str,
    dst: str,
    metadata: Mapping[str, Any],
    source_id: str | None,
    now: str,
    known_types: Mapping[str, str],
    counts: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Observe one edge: one row per key, duplicates collapse, metadata last-write.

    ``counts`` collects the new message count of a conversation gaining a message.
    """
    key = f"{rtype}:{src}:{dst}"
    meta_json = js_json(dict(sorted(metadata.items()))) if metadata else "{}"
    if source_id is None:
        # No source: the server hashes a synthetic one from key, user and sorted metadata.
        source_id = hash_uuid(f"relationship:{USER_ID}:{key}:{meta_json}")
    rel_obs_id = hash_uuid(f"{source_id}:{key}:{meta_json}")
    merged = {k: v for k, v in metadata.items() if v is not None}
    provenance = dict.fromkeys(merged, rel_obs_id)
    # Most edges are new: try the insert first, and read the row only when it exists.
    cur = conn.execute(
        "INSERT INTO relationships (source_entity_id, relationship_type, target_entity_id, "
        "metadata, provenance, seen, observation_count, last_observation_at, computed_at) "
        "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT DO NOTHING",
        (
            src,
            rtype,
            dst,
            _dumps(merged) if merged else "{}",
            _dumps(provenance) if provenance else "{}",
            _dumps([rel_obs_id]),
            now,
            now,
        ),
    )
    if cur.rowcount:
        if (
            rtype == "PART_OF"
            and known_types.get(dst, "conversation") == "conversation"
            and _entity_type_of(conn, src, known_types) == "conversation_message"
        ):
            # The entity_type test stands in for reading the target's type first.
            # (RETURNING here costs several times a plain UPDATE plus a later SELECT.)
            counted = conn.execute(
                "UPDATE entities SET message_count = message_count + 1 "
                "WHERE id = ? AND entity_type = 'conversation'",
                (dst,),
            )
            if counted.rowcount and counts is not None:
                counts[dst] = counts.get(dst, 0) + 1
        return _relationship_json(key, rtype, src, dst, merged, provenance, 1, now, now)
    row = conn.execute(
        "SELECT metadata, provenance, seen, observation_count, last_observation_at "
        "FROM relationships WHERE source_entity_id = ? AND relationship_type = ? "
        "AND target_entity_id = ?",
        (src, rtype, dst),
    ).fetchone()
    merged = json.loads(row[0])
    provenance = json.loads(row[1])
    seen: list[str] = json.loads(row[2])
    count, last = int(row[3]), str(row[4])
    if rel_obs_id not in seen:
        # Same source, key and metadata is the same observation: a repeat is skipped.
        seen.append(rel_obs_id)
        for k, v in metadata.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
            provenance[k] = rel_obs_id
        count += 1
        last = now
        conn.execute(
            "UPDATE relationships SET metadata = ?, provenance = ?, seen = ?, "
            "observation_count = ?, last_observation_at = ?, computed_at = ? "
            "WHERE source_entity_id = ? AND relationship_type = ? AND target_entity_id = ?",
            (_dumps(merged), _dumps(provenance), _dumps(seen), count, last, now, src, rtype, dst),
        )
    return _relationship_json(key, rtype, src, dst, merged, provenance, count, last, now)


def _relationship_json(
    key: str,
    rtype: str,
    src: str,
    dst: str,
    metadata: Mapping[str, Any],
    provenance: Mapping[str, Any],
    count: int,
    last: str,
    computed: str,
) -> dict[str, Any]:
    return {
        "relationship_key": key,
        "relationship_type": rtype,
        "source_entity_id": src,
        "target_entity_id": dst,
        "schema_version": "1.0",
        "snapshot": dict(metadata),
        "computed_at": computed,
        "observation_count": count,
        "last_observation_at": last,
        "provenance": dict(provenance),
        "user_id": USER_ID,
        "is_live": 1,
    }


def _relationship_row_json(row: Sequence[Any]) -> dict[str, Any]:
    src, rtype, dst = row[0], row[1], row[2]
    return _relationship_json(
        f"{rtype}:{src}:{dst}",
        rtype,
        src,
        dst,
        json.loads(row[3]),
        json.loads(row[4]),
        row[5],
        row[6],
        row[7],
    )


_REL_COLUMNS = (
    "source_entity_id, relationship_type, target_entity_id, metadata, provenance, "
    "observation_count, last_observation_at, computed_at"
)


def _conversation_message_count(
    conn: sqlite3.Connection, planned: Sequence[_Planned], counts: Mapping[str, int]
) -> int | None:
    # Like the server, only a store that carries a message reports the count (samples f3, f5).
    if not any(p.entity_type == "conversation_message" for p in planned):
        return None
    conversation: str | None = None
    for item in planned:
        if item.entity_type == "conversation":
            # Its count was read with its row: add this store's new messages, no read.
            if not item.exists or item.state is not None:
                return item.message_count + counts.get(item.identity.entity_id, 0)
            conversation = item.identity.entity_id
            break
    if conversation is None and counts:
        conversation = next(iter(counts))
    if conversation is None:
        message = next(p for p in planned if p.entity_type == "conversation_message")
        row = conn.execute(
            "SELECT r.target_entity_id FROM relationships r JOIN entities e "
            "ON e.id = r.target_entity_id WHERE r.source_entity_id = ? "
            "AND r.relationship_type = 'PART_OF' AND e.entity_type = 'conversation' LIMIT 1",
            (message.identity.entity_id,),
        ).fetchone()
        if row is None:
            return None
        conversation = str(row[0])
    row = conn.execute(
        "SELECT message_count FROM entities WHERE id = ?", (conversation,)
    ).fetchone()
    return int(row[0]) if row else 0


# -- relationships ---------------------------------------------------------------------


def _check_edge(
    rel: Mapping[str, Any], path: list[str | int]
) -> tuple[str, str, str, Mapping[str, Any]]:
    rtype = rel.get("relationship_type")
    if rtype not in RELATIONSHIP_TYPES:
        raise invalid_format(
            f"relationship_type {rtype!r} is not one of Neotoma's relationship types",
            [*path, "relationship_type"],
        )
    ends = []
    for end in ("source_entity_id", "target_entity_id"):
        eid = rel.get(end)
        if not (isinstance(eid, str) and ENTITY_ID_RE.match(eid)):
            raise invalid_format(
                f"{end} must be a Neotoma entity id (ent_ followed by 24 hex digits)",
                [*path, end],
            )
        ends.append(eid)
    metadata = rel.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise invalid_format("metadata must be a JSON object", [*path, "metadata"])
    try:
        js_json(dict(metadata))
    except ValueError as exc:
        raise invalid_format(f"metadata holds a value JSON cannot carry: {exc}", path) from None
    return str(rtype), ends[0], ends[1], metadata


def create_relationship(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /create_relationship``: one edge between two entity ids."""
    rtype, src, dst, metadata = _check_edge(body, [])
    source_id = body.get("source_id")
    return _relate(
        conn,
        rtype,
        src,
        dst,
        metadata,
        source_id if isinstance(source_id, str) else None,
        now_iso(),
        {},
    )


def create_relationships(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /create_relationships``: several edges; each is checked before any is written."""
    rels = body.get("relationships")
    if not isinstance(rels, list) or not rels:
        raise invalid_format("relationships must be a non-empty list", ["relationships"])
    checked = []
    for i, rel in enumerate(rels):
        if not isinstance(rel, Mapping):
            raise invalid_format("each relationship must be a JSON object", ["relationships", i])
        checked.append(_check_edge(rel, ["relationships", i]))
    now = now_iso()
    source_id = body.get("source_id")
    out = []
    for i, (rtype, src, dst, metadata) in enumerate(checked):
        snap = _relate(
            conn,
            rtype,
            src,
            dst,
            metadata,
            source_id if isinstance(source_id, str) else None,
            now,
            {},
        )
        out.append({"index": i, **snap})
    return {
        "success": True,
        "requested": len(rels),
        "created_count": len(out),
        "error_count": 0,
        "relationships": out,
        "errors": [],
    }


def retrieve_related_entities(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /retrieve_related_entities``: breadth-first over edges, outbound then inbound."""
    start = body.get("entity_id")
    if not isinstance(start, str) or not start:
        raise invalid_format("entity_id is required", ["entity_id"])
    types = body.get("relationship_types")
    if types is not None and not (
        isinstance(types, list) and all(isinstance(t, str) for t in types)
    ):
        raise invalid_format("relationship_types must be a list of strings", ["relationship_types"])
    direction = body.get("direction", "both")
    if direction not in ("inbound", "outbound", "both"):
        raise invalid_format("direction must be inbound, outbound or both", ["direction"])
    max_hops = body.get("max_hops", 1)
    if not isinstance(max_hops, int) or isinstance(max_hops, bool) or max_hops < 1:
        raise invalid_format("max_hops must be a positive integer", ["max_hops"])
    type_filter = ""
    params: list[Any] = []
    if types:
        type_filter = f" AND relationship_type IN ({','.join('?' * len(types))})"
        params = list(types)

    visited = {start}
    frontier = [start]
    edges: dict[str, dict[str, Any]] = {}
    for _ in range(max_hops):
        nxt: list[str] = []
        for node in frontier:
            # Outbound edges, then inbound, each in key (type:source:target) order.
            for column, near, far in (
                ("source_entity_id", "source_entity_id", 2),
                ("target_entity_id", "target_entity_id", 0),
            ):
                if (column == "source_entity_id" and direction == "inbound") or (
                    column == "target_entity_id" and direction == "outbound"
                ):
                    continue
                other_end = "target_entity_id" if near == "source_entity_id" else "source_entity_id"
                rows = conn.execute(
                    f"SELECT {_REL_COLUMNS} FROM relationships WHERE {column} = ?{type_filter} "
                    f"ORDER BY relationship_type, {other_end}",
                    (node, *params),
                ).fetchall()
                for row in rows:
                    edge = _relationship_row_json(row)
                    edges.setdefault(edge["relationship_key"], edge)
                    other = row[far]
                    if other not in visited:
                        visited.add(other)
                        nxt.append(other)
        frontier = nxt
    visited.discard(start)
    rows = conn.execute(
        "SELECT id, entity_type, canonical_name, aliases, created_at, updated_at FROM entities "
        "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY canonical_name, id",
        (_dumps(sorted(visited)),),
    ).fetchall()
    entities = [_entity_json(row) for row in rows]
    return {"relationships": list(edges.values()), "entities": entities}


# -- reads -------------------------------------------------------------------------------


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
    state = SnapshotState.from_json(json.loads(row[1]), row[2], row[3])
    if state.deleted:
        raise not_found()
    return _snapshot_record(entity_id, row[0], state)


def _observation_json(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": row[0],
        "entity_id": row[1],
        "entity_type": row[2],
        "schema_version": "1.0",  # observations say 1.0 even where snapshots say 1.4 (e5)
        "source_id": row[3],
        "interpretation_id": None,
        "observed_at": row[4],
        "specificity_score": row[7],
        "source_priority": row[5],
        "observation_source": row[6],
        "fields": json.loads(row[8]),
        "created_at": row[4],
        "user_id": USER_ID,
        "idempotency_key": row[9],
        "canonical_hash": None,
        "identity_basis": row[10],
        "identity_rule": row[11],
        "provenance": None,
        "source_peer_id": None,
        "canonical_key": None,
        "sighting_source_id": None,
    }


def list_observations(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /list_observations``: newest first."""
    entity_id = body.get("entity_id")
    if not isinstance(entity_id, str) or not entity_id:
        raise invalid_format("entity_id is required", ["entity_id"])
    limit = _bounded_int(body.get("limit", 100), "limit", 1, 10_000)
    offset = _bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    rows = conn.execute(
        "SELECT id, entity_id, entity_type, source_id, observed_at, source_priority, "
        "observation_source, specificity_score, fields, idempotency_key, identity_basis, "
        "identity_rule FROM observations WHERE entity_id = ? "
        "ORDER BY observed_at DESC, seq DESC LIMIT ? OFFSET ?",
        (entity_id, limit, offset),
    ).fetchall()
    return {"observations": [_observation_json(r) for r in rows]}


def _bounded_int(value: object, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise invalid_format(f"{name} must be an integer between {low} and {high}", [name])
    return value


def _query_item(row: Sequence[Any]) -> dict[str, Any]:
    # Fields and provenance only: SQLite cuts them out of the snapshot doc, so the
    # per-field winners (most of the doc) are never decoded when paging through a store.
    entity_id, entity_type, canonical_name = row[0], row[1], row[2]
    return {
        "entity_id": entity_id,
        "entity_type": entity_type,
        "canonical_name": canonical_name,
        "schema_version": _SCHEMA_VERSIONS.get(entity_type, "1.0"),
        "snapshot": json.loads(row[3]),
        "observation_count": row[4],
        "last_observation_at": row[5],
        "provenance": json.loads(row[6]),
        "computed_at": row[5],
        "merged_to_entity_id": None,
        "merged_at": None,
    }


def _fts_phrase(needle: str) -> str:
    return '"' + needle.replace('"', '""') + '"'


def _kind_sql(kinds: frozenset[str] | None) -> tuple[str, tuple[str, ...]]:
    if kinds is None:
        return "1", ()
    ordered = tuple(sorted(kinds))
    return f"kind IN ({','.join('?' * len(ordered))})", ordered


# The FTS5 searches of ``_substring_ids``. Each costs a few µs however small its answer, so
# when both tables are searched it is one statement; the first column says which table a
# row came from, and rows come in rowid order within each table, as from two statements.
_BOOKKEEPING_NAMES_SQL = (
    "SELECT 0, entity_id, kind FROM bookkeeping_names WHERE bookkeeping_names MATCH ?"
)
_NAME_INDEX_SQL = (
    "SELECT 1, entity_id, kind FROM name_index WHERE name_index MATCH ? AND instr(text, ?) > 0"
)
_BOTH_NAMES_SQL = f"{_BOOKKEEPING_NAMES_SQL} UNION ALL {_NAME_INDEX_SQL}"


def _substring_ids(
    conn: sqlite3.Connection,
    needle: str,
    kinds: frozenset[str] | None,
    *,
    bookkeeping: bool = True,
    memo: dict[str, list[tuple[str, str]]] | None = None,
) -> list[str]:
    """Entity ids whose indexed text (of the given kinds; None: any) contains ``needle``.

    A trigram phrase query reads the posting list of every trigram of the needle, and the
    common ones ("com", "ion") list most of the store. Instead, intersect the two rarest
    trigrams, or take the rarest alone when few texts have it (any subset of the needle's
    trigrams finds a superset of the answers), and check the whole needle on those few
    rows: the answers are the same whichever trigrams are read. ``bookkeeping=False``
    skips the names of conversations, messages and turn records (they hold no snapshot
    fields). ``memo`` lets the passes of one lookup share the trigram search of one needle.
    """
    if len(needle) < 3:
        where, params = _kind_sql(kinds)
        found: list[str] = []
        tables = ("name_index", "bookkeeping_names") if bookkeeping else ("name_index",)
        for table in tables:
            found += [
                str(r[0])
                for r in conn.execute(
                    f"SELECT DISTINCT entity_id FROM {table} WHERE instr(text, ?) > 0 AND {where}",
                    (needle, *params),
                ).fetchall()
            ]
        return list(dict.fromkeys(found))
    hits = memo.get(needle) if memo is not None else None
    match = _trigram_match(conn, needle) if hits is None else None
    if hits is None and match is None:
        hits = []  # a trigram no indexed text has: nothing can contain the needle
    rows: list[Any] = []
    if bookkeeping and match is not None:
        rows = conn.execute(_BOTH_NAMES_SQL, (_fts_phrase(needle), match, needle)).fetchall()
    elif bookkeeping:
        rows = conn.execute(_BOOKKEEPING_NAMES_SQL, (_fts_phrase(needle),)).fetchall()
    elif match is not None:
        rows = conn.execute(_NAME_INDEX_SQL, (match, needle)).fetchall()
    if hits is None:
        hits = [(str(r[1]), str(r[2])) for r in rows if r[0]]
    if memo is not None:
        memo[needle] = hits
    # The kind filter and the de-duplication of bookkeeping rows happen here rather than
    # in SQL (DISTINCT, kind IN): the same first-seen order, one cheaper statement.
    found = [str(r[1]) for r in rows if not r[0] and (kinds is None or r[2] in kinds)]
    found.extend(eid for eid, kind in hits if kinds is None or kind in kinds)
    return list(dict.fromkeys(found))


# A rarest trigram in at most this many indexed texts is queried alone: checking the
# needle on those few rows costs less than reading a second posting list (small stores).
_FEW_TEXTS = 4
# Document frequencies of up to this many trigrams are read as the first one's row plus one
# scalar subquery per other trigram: point lookups whose answers come back in the trigrams'
# order (no row, or NULL: no text has it), about half the cost of `gram IN (...)`, which
# first builds a temporary index of its list.
_SCALAR_DF = 32
_DF_SQL = {
    k: "SELECT n"
    + "".join(f", (SELECT n FROM trigram_df WHERE gram = ?{i})" for i in range(2, k + 1))
    + " FROM trigram_df WHERE gram = ?1"
    for k in range(2, _SCALAR_DF + 1)
}


def _trigram_match(conn: sqlite3.Connection, needle: str) -> str | None:
    """The ``name_index`` MATCH query for a needle of three chars or more: its rarest
    trigrams (see ``_substring_ids``); None when one of its trigrams is in no indexed text.
    """
    grams = sorted(_trigrams(needle))
    if len(grams) > 1:
        counts: Sequence[Any] | None  # ints; None for a trigram no text has
        if len(grams) <= _SCALAR_DF:
            counts = conn.execute(_DF_SQL[len(grams)], grams).fetchone()
        else:
            known = dict(
                conn.execute(
                    f"SELECT gram, n FROM trigram_df WHERE gram IN ({','.join('?' * len(grams))})",
                    grams,
                ).fetchall()
            )
            counts = [known.get(g) for g in grams]
        if counts is None or None in counts:
            return None  # a trigram no indexed text has: nothing can contain the needle
        rarest = sorted(range(len(grams)), key=counts.__getitem__)[:2]
        if counts[rarest[0]] <= _FEW_TEXTS:
            del rarest[1:]
        grams = [grams[i] for i in rarest]
    return " AND ".join(_fts_phrase(g) for g in grams)


def query_entities(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /entities/query``: by type and/or a search string over names, sorted by id."""
    types: list[str] = []
    if isinstance(body.get("entity_type"), str):
        types.append(resolve_entity_type(body["entity_type"]))
    extra = body.get("entity_types")
    if isinstance(extra, list):
        types.extend(resolve_entity_type(t) for t in extra if isinstance(t, str))
    search = body.get("search") or body.get("query") or body.get("search_query")
    limit = _bounded_int(body.get("limit", 100), "limit", 1, 500)
    offset = _bounded_int(body.get("offset", 0), "offset", 0, 2**31)
    exclude_bookkeeping = body.get("exclude_bookkeeping") is True

    where: list[str] = []
    params: list[Any] = []
    if types:
        where.append(f"entity_type IN ({','.join('?' * len(types))})")
        params.extend(types)
    if exclude_bookkeeping:
        where.append(f"entity_type NOT IN ({','.join('?' * len(_BOOKKEEPING))})")
        params.extend(sorted(_BOOKKEEPING))
    search_mode = "none"
    if isinstance(search, str) and search.strip():
        ids = _substring_ids(conn, search.strip().lower(), None)
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
        "SELECT id, entity_type, canonical_name, json_extract(snapshot, '$.f'), "
        "observation_count, last_observation_at, json_extract(snapshot, '$.p') "
        f"FROM entities{clause} ORDER BY id "
        "LIMIT ? OFFSET ?",
        (*params, limit, offset),
    ).fetchall()
    result: dict[str, Any] = {
        "entities": [_query_item(r) for r in rows],
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


# An entity row and what its snapshot record needs, read together: a direct hit costs one
# statement, not an entity read plus a snapshot read.
_DIRECT_COLUMNS = (
    "id, entity_type, canonical_name, aliases, created_at, updated_at, "
    "snapshot, observation_count, last_observation_at"
)
# Up to this many matched ids are bound as `id IN (?, ...)`; more go through json_each,
# which costs a few µs more but keeps the number of distinct statements bounded.
_INLINE_IDS = 8


def _direct_item(row: Sequence[Any]) -> dict[str, Any]:
    """A pass-1/2 item from a ``_DIRECT_COLUMNS`` row: the entity and its snapshot record."""
    item = _entity_json(row)
    # Only fields and provenance: the winners and deletion order are the store's business.
    doc = json.loads(row[6])
    item["snapshot"] = _snapshot_json(
        row[0], row[1], doc.get("f", {}), doc.get("p", {}), row[7], row[8]
    )
    return item


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
    limit = _bounded_int(body.get("limit", 100), "limit", 1, 1000)
    text = identifier.strip()
    none: dict[str, Any] = {"entities": [], "total": 0, "match_mode": "none"}
    if not text:
        return none

    # Pass 1: an entity id is a primary-key lookup and nothing else.
    if _ENT_LIKE_RE.match(text):
        row = conn.execute(
            f"SELECT {_DIRECT_COLUMNS} FROM entities WHERE id = ?", (text.lower(),)
        ).fetchone()
        if row is None:
            none["hint"] = (
                "identifier looks like an entity_id; use retrieve_entity_snapshot(entity_id) "
                "or check the id"
            )
            return none
        # The server's pass-1 item carries only these keys (sample d6), unlike pass 2's rows.
        full = _direct_item(row)
        item = {k: full[k] for k in ("id", "entity_type", "canonical_name", "snapshot")}
        return {"entities": [item], "total": 1, "match_mode": "direct"}

    # Pass 2: case-insensitive substring of canonical names and aliases.
    needle = (normalize(etype, text) if etype else text.lower()).replace(",", "")
    memo: dict[str, list[tuple[str, str]]] = {}
    ids = _substring_ids(conn, needle, _NAME_KINDS, memo=memo) if needle else []
    rows: list[Any] = []
    if ids:
        type_clause = " AND entity_type = ?" if etype else ""
        if len(ids) <= _INLINE_IDS:
            id_list, id_args = f"({','.join('?' * len(ids))})", ids
        else:
            id_list, id_args = "(SELECT value FROM json_each(?))", [json.dumps(ids)]
        rows = conn.execute(
            f"SELECT {_DIRECT_COLUMNS} FROM entities WHERE id IN {id_list}"
            f"{type_clause} ORDER BY canonical_name, id LIMIT ?",
            (*id_args, *((etype,) if etype else ()), limit),
        ).fetchall()
    if not rows and etype:
        from ..._identity import entity_id_for

        rows = conn.execute(
            f"SELECT {_DIRECT_COLUMNS} FROM entities WHERE id = ?",
            (entity_id_for(etype, text),),
        ).fetchall()
    if rows:
        items = [_direct_item(r) for r in rows]
        return {"entities": items, "total": len(items), "match_mode": "direct"}

    # Pass 3: identity fields of snapshots: equality, then containment, then leading token.
    lowered = text.lower()
    fields = (by,) if by else _SEARCH_FIELDS
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
            *(_first_token(lowered), *fields),  # "Acme Corp" finds a field "Acme"
            *(lowered, *fields),  # "Acme" finds a field "Acme Corp"
        ),
    ).fetchall()
    rows.sort(key=lambda r: r[0])
    found = dict.fromkeys(r[1] for r in rows)  # an ordered set
    if by and by not in _SEARCH_FIELDS:
        # An arbitrary field has no index: compare it on the snapshots (bounded, like the
        # server's scan of at most 500 snapshots).
        for (eid,) in conn.execute(
            "SELECT id FROM entities WHERE lower(json_extract(snapshot, ?)) = ? LIMIT 500",
            (f"$.f.{by}", lowered),
        ).fetchall():
            found.setdefault(eid)
    elif len(lowered) >= 3:
        kinds = frozenset(f"field:{f}" for f in fields) if by else _FIELD_KINDS
        for eid in _substring_ids(conn, lowered, kinds, bookkeeping=False, memo=memo):
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


# -- correct -----------------------------------------------------------------------------


def correct(conn: sqlite3.Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /correct``: one high-priority observation of one field."""
    entity_id = body.get("entity_id")
    field = body.get("field")
    key = body.get("idempotency_key")
    entity_type = body.get("entity_type") or "unknown"
    if not isinstance(entity_id, str) or not ENTITY_ID_RE.match(entity_id):
        raise invalid_format("entity_id must be a Neotoma entity id", ["entity_id"])
    if not isinstance(field, str) or not field:
        raise invalid_format("field is required", ["field"])
    if not isinstance(key, str) or not key:
        raise invalid_format("idempotency_key is required", ["idempotency_key"])
    if not isinstance(entity_type, str):
        raise invalid_format("entity_type must be a string", ["entity_type"])
    etype = resolve_entity_type(entity_type)
    row = conn.execute("SELECT entity_type FROM entities WHERE id = ?", (entity_id,)).fetchone()
    if row is None:
        raise not_found()
    if schema_for(etype) is None:
        raise flat_error(
            ValidationError,
            400,
            "ERR_NO_SCHEMA_FOR_ENTITY_TYPE",
            f"No schema for entity_type {entity_type!r}",
        )
    value = body.get("value")
    fields = {field: value}
    try:
        obs_id = hash_uuid(js_json([entity_id, fields, key]))
    except ValueError as exc:
        raise invalid_format(f"value is not JSON: {exc}", ["value"]) from None
    before = conn.execute(
        "SELECT 1 FROM observations WHERE entity_id = ? AND id = ?", (entity_id, obs_id)
    ).fetchone()
    _, snapshot = _observe(
        conn,
        entity_id=entity_id,
        entity_type=str(row[0]),
        fields=fields,
        source_id=None,
        priority=1000,
        obs_source="human",
        identity=None,
        now=now_iso(),
        obs_id=obs_id,
        idempotency_key=key,
    )
    return {
        "success": True,
        "snapshot": None if before else snapshot,
        "observation_id": obs_id,
        "entity_id": entity_id,
        "field": field,
        "value": value,
        "message": "Correction recorded" if not before else "Correction already recorded",
    }
