"""The write actions, ``store`` and ``correct``: plan, then observe, then fold.

Every check runs before the first write, and the caller's savepoint rolls back anything a
late failure left behind, so a store is atomic: all of it or nothing, not even its key.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..._neotoma.identity import (
    Identity,
    IdentityError,
    TypeSchema,
    js_json,
    resolve_entity_type,
    resolve_identity_cached,
    schema_for,
)
from ...exceptions import ValidationError
from .._wire import OBSERVATION_SOURCES
from . import _derived_restatement as derived
from . import _scope
from ._close_room import STATE_SET, room_for
from ._close_row import CLOSE_SEQ, CLOSE_SET, holds, materialize
from ._codec import encode_fields, row_name
from ._errors import (
    flat_error,
    idempotency_mismatch,
    invalid_format,
    now_iso,
    resolution_failed,
)
from ._first import FIRST_SEQ, first_of
from ._first_id import DERIVED as DERIVED_ID
from ._id_prefix import id_is
from ._key_digest import key_seen, record_key
from ._name_index import index_fields, index_name
from ._new_edges import Counted, edge_routes, fast_pairs, write_edges
from ._new_rows import insert_row, observation_id
from ._reducer import ObservationMeta, SnapshotChange, SnapshotState, fold, source_rank
from ._rename import rederive_name
from ._restatement import marked
from ._row_metas import BY_SEQ
from ._rows import (
    dumps_acyclic,
    encode_entity,
    encode_id,
    encode_opt_time,
    encode_state,
    encode_time,
    encode_word,
    entity_row,
    load_rows,
    load_state,
    observation_seq,
)
from ._search import index_search
from ._shared_fields import fields_column, settle_fields
from ._store_answer import Written, answer, replay
from ._store_source import element_jsons_of, fields_json_of, source_id_from
from ._summaries import SUMMARIZED_TYPES, summarize
from ._turn_names import MESSAGE, TURN, index_turn_names
from ._type_plan import write_new
from ._validate import check_entities, check_relationships

__all__ = ["store", "write", "write_time"]


_STRICT_OK_RULES = ("name_key:canonical_name", "name_key:email", "id_key:")


def write_time() -> str:
    """The time a write stamps: this module's ``now_iso`` (the one clock every write action
    reads, ``correct``'s too, so that fixing it here fixes them all)."""
    return now_iso()


class _Planned:
    """One request element after validation and identity resolution, before any write.

    ``fields_json``: the JSON of ``fields`` (hashed into the observation id, stored as it
    is); ``state``: the entity's snapshot state before this store (None: new, or first seen
    in this batch); ``message_count``: the stored message count (conversations; 0 for a new
    entity).
    """

    # A plain class, not attrs: every store on the file plans its elements (a coding-agent
    # hook's among them, in a fresh process per event).
    __slots__ = (
        "action",
        "close",
        "entity_type",
        "exists",
        "fields",
        "fields_json",
        "first",
        "identity",
        "index",
        "message_count",
        "names",
        "state",
    )

    def __init__(
        self,
        index: int,
        entity_type: str,
        fields: dict[str, Any],
        fields_json: str,
        identity: Identity,
        exists: bool,
        action: str,
        state: SnapshotState | None = None,
        message_count: int = 0,
        first: tuple[int, Any] | None = None,
        names: tuple[str, str] | None = None,
        close: tuple[Any, ...] | None = None,
    ) -> None:
        self.index = index
        self.entity_type = entity_type
        self.fields = fields
        self.fields_json = fields_json
        self.identity = identity
        self.exists = exists
        self.action = action
        self.state = state
        self.message_count = message_count
        self.first = first
        #: the row's ``canonical_name`` and ``aliases`` as loaded (an entity that exists)
        self.names = names
        #: a turn record's row's close and first (``_rows.CLOSE_HELD``), as loaded
        self.close = close


def _plan(
    conn: sqlite3.Connection,
    entities: list[Mapping[str, Any]],
    element_jsons: Sequence[str],
    strict: bool,
) -> list[_Planned]:
    planned: list[_Planned] = []
    issues: list[dict[str, Any]] = []
    batch_roles: dict[str, object] = {}
    # Resolve every identity first, so that all the rows are read with one statement.
    resolved: list[tuple[str, dict[str, Any], Identity | IdentityError | None]] = []
    tenant = _scope.tenant()
    for element in entities:
        etype = resolve_entity_type(str(element["entity_type"]).strip())
        fields = {
            k: v for k, v in element.items() if k not in ("entity_type", "intent", "target_id")
        }
        outcome: Identity | IdentityError | None = None
        if not isinstance(element.get("target_id"), str):
            try:
                outcome = resolve_identity_cached(etype, fields).in_tenant(tenant)
            except IdentityError as exc:
                outcome = exc
        resolved.append((etype, fields, outcome))
    rows = load_rows(conn, [o.entity_id for _, _, o in resolved if isinstance(o, Identity)])
    for index, element in enumerate(entities):
        etype, fields, outcome = resolved[index]
        fields_json = fields_json_of(element, element_jsons[index], fields)
        target = element.get("target_id")
        if isinstance(target, str):
            row = entity_row(conn, target)
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
            planned.append(_Planned(index, etype, fields, fields_json, identity, True, "extended"))
            batch_roles.setdefault(target, fields.get("role"))
            continue
        if isinstance(outcome, IdentityError):
            issues.append(
                {
                    "observation_index": index,
                    "entity_type": etype,
                    "code": outcome.code,
                    "message": outcome.message,
                    "details": outcome.details,
                }
            )
            continue
        assert outcome is not None  # resolved above: an element without a target_id
        identity = outcome
        eid = identity.entity_id
        in_batch = eid in batch_roles
        loaded = None if in_batch else rows.get(eid)
        state, message_count, rowid, first_id, names, restate, close = (
            loaded if loaded is not None else (None, 0, 0, None, None, (), None)
        )
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
            _Planned(
                index,
                etype,
                fields,
                fields_json,
                identity,
                exists,
                action,
                state,
                message_count,
                None if loaded is None else (rowid, first_id, *restate),
                names,
                close,
            )
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
    written = write(conn, body)
    return written if isinstance(written, dict) else answer(conn, written)  # dict: a replay


def write(conn: sqlite3.Connection, body: Mapping[str, Any]) -> Written | dict[str, Any]:
    """``store``'s checks and writes: what a fresh store wrote, or a replay's answer."""
    entities = check_entities(body.get("entities"))
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
    element_jsons = element_jsons_of(entities)
    source_id = source_id_from(element_jsons)

    seen = key_seen(conn, key)
    if seen.source is not None:
        if seen.source != encode_id(source_id):
            raise idempotency_mismatch(key)
        return replay(conn, source_id, key)

    relationships = check_relationships(body.get("relationships"), len(entities))
    planned = _plan(conn, entities, element_jsons, bool(body.get("strict", False)))

    now = now_iso()
    packed_source = encode_id(source_id)

    ids_by_index: dict[int, str] = {}
    types_by_id: dict[str, str] = {}
    # What the edges' fast path needs before the writes: every planned element's id and
    # type (the last one's, as the loop below would leave them).
    for item in planned:
        ids_by_index[item.index] = item.identity.entity_id
        types_by_id[item.identity.entity_id] = item.entity_type
    fresh = {p.identity.entity_id for p in planned if not p.exists}  # created from source_id
    mine = {  # the conversations this store writes, resolved by identity
        p.identity.entity_id
        for p in planned
        if p.entity_type == "conversation" and p.identity.identity_basis != "target_id"
    }
    routes, counted = edge_routes(relationships, ids_by_index, types_by_id, fresh, mine)
    # The conversations restated beside a message (``_derived_restatement``), and the
    # (message, conversation) pairs whose restatement is derived.
    restating = derived.planned(planned, fast_pairs(relationships, routes, ids_by_index), mine)
    restated: set[tuple[str, str]] = set()
    # Each entity's row's first observation, as loaded (or as created below).
    firsts = {p.identity.entity_id: p.first for p in planned if p.first is not None}
    created = 0
    states: dict[str, SnapshotState] = {}
    new_ids: set[str] = set()
    written: list[int] = []  # the seqs of the observations this store wrote or found
    entries: list[tuple[_Planned, str, dict[str, Any] | None]] = []
    turn_rows: list[_Planned] = []  # the messages and turn records it creates
    for item in planned:
        ident = item.identity
        if not item.exists:
            new_ids.add(ident.entity_id)
            created += 1
            if item.entity_type in (MESSAGE, TURN) and ident.entity_id not in firsts:
                turn_rows.append(item)
        elif item.action == "extended":
            created += 1
        # Positional, in the signature's order: the one call made per element of a store.
        obs_id, snapshot = _observe(
            conn,
            ident.entity_id,
            item.entity_type,
            item.fields,
            source_id,
            priority,
            obs_source,
            ident,
            now,
            item.fields_json,
            None,
            None,
            states,
            item.state if item.exists else SnapshotState(),
            ident if ident.entity_id in new_ids else None,
            written,
            packed_source,
            firsts,
            counted,
            None if ident.entity_id not in restating else (restating[ident.entity_id], restated),
            item.close,
        )
        new_ids.discard(ident.entity_id)
        entries.append((item, obs_id, snapshot))

    if turn_rows:
        index_turn_names(conn, turn_rows, firsts, planned)
    written.reverse()  # a replay lists a source's observations newest first
    record_key(conn, key, packed_source, written, now, seen.slot)

    counts: dict[str, int] = {}
    created_edges = write_edges(
        conn,
        relationships,
        routes,
        counted,
        ids_by_index,
        types_by_id,
        fresh,
        source_id,
        now,
        counts,
        firsts,
        restated,
    )
    return Written(source_id, priority, created, entries, created_edges, counts)


#: an observation's row: its fields' text marked where it restates its entity's first
#: observation's (``_restatement``)
_INSERT_ROW = (
    "INSERT OR IGNORE INTO observations (id, entity_row, entity_type, source_id, "
    "observed_at, source_priority, observation_source, specificity_score, "
    "fields, idempotency_key, identity_basis, identity_rule) "
    f"VALUES (?1, (SELECT rowid FROM entities WHERE {id_is('?2')}), ?3, ?4, ?5, ?6, ?7, ?8, "
    f"{marked('?9', id_is('?2'))}, ?10, ?11, ?12)"
)


#: the ``UPDATE`` of an entity row after a fold (``?1`` to ``?4``: its state and time,
#: ``?5`` its rowid where the store holds it, else its id), by whether it takes a turn
#: record's close into the row (``?6`` and ``?7``: ``_close_row``), adds messages to its
#: count (the last parameter) and finds it by rowid. By rowid, SQLite knows it writes one
#: row; by the id's non-unique index it opens a statement journal, whose savepoint makes
#: each full-text index flush its pending terms into a segment of their own (a store in a
#: shared transaction would write three segments).
_UPDATES: Final = {
    (close, counted, by_rowid): f"UPDATE entities SET {STATE_SET}{CLOSE_SET if close else ''}"
    + (f", message_count = message_count + ?{8 if close else 6}" if counted else "")
    + (" WHERE rowid = ?5" if by_rowid else f" WHERE {id_is('?5')}")
    for close in (False, True)
    for counted in (False, True)
    for by_rowid in (False, True)
}


def _observe(
    conn: sqlite3.Connection,
    entity_id: str,
    entity_type: str,
    fields: dict[str, Any],
    source_id: str | None,
    priority: int,
    obs_source: str | None,
    identity: Identity | None,
    now: str,
    fields_json: str | None = None,
    obs_id: str | None = None,
    idempotency_key: str | None = None,
    states: dict[str, SnapshotState] | None = None,
    known_state: SnapshotState | None = None,
    create: Identity | None = None,
    seqs: list[int] | None = None,
    packed_source: str | bytes | None = None,
    firsts: dict[str, tuple[int, Any]] | None = None,
    counted: Counted | None = None,
    restates: tuple[str, set[tuple[str, str]]] | None = None,
    close: tuple[Any, ...] | None = None,
) -> tuple[str, dict[str, Any] | None]:
    """Append one observation and fold it into the snapshot; return its id and the snapshot.

    With ``create``, the entity is new: its row is inserted with the folded snapshot.
    ``seqs`` collects the seq of the observation (written now, or found already there).
    ``firsts``: the rowid and ``first_id`` of the entity rows the store loaded or created
    (an entity not in it is read); ``counted``: the messages to add to a conversation's
    row as it is written. A new message or turn record of the shape a turn writes is
    written by its plan (``_type_plan``). ``restates``: the message that follows this
    conversation in the store, and the pairs (message, conversation) whose restatement is
    derived (``_derived_restatement``): this one is added where it is. ``close``: a turn
    record's row's close and first as loaded (``_rows.CLOSE_HELD``): a close the row can
    hold is written into it (``_close_row``).
    """
    if create is not None and obs_id is None and idempotency_key is None and fields_json:
        made = write_new(
            conn, entity_type, fields, fields_json, create, source_id, priority, obs_source,
            now, packed_source, known_state, states, seqs, firsts, counted,
        )  # fmt: skip
        if made is not None:
            return made
    if fields_json is None:
        fields_json = js_json(fields)
    packed_id: str | bytes | None
    first_id: str | bytes | None  # (derived where it is this digest: ``_first_id``)
    if obs_id is None:
        obs_id, packed_id = observation_id(source_id, entity_id, fields_json)
        first_id = DERIVED_ID
    else:
        packed_id = first_id = encode_id(obs_id)
    # Reuse the state this store already read or wrote instead of reading the row again.
    if states is not None and entity_id in states:
        state: SnapshotState | None = states[entity_id]
    elif known_state is not None:
        state = known_state
    else:
        state = load_state(conn, entity_id)
    stored_fields = fields_column(state, fields_json, fields)
    at = encode_time(now)
    source = encode_id(source_id) if packed_source is None else packed_source
    basis = encode_word(identity.identity_basis if identity else None)
    rule = encode_word(identity.identity_rule if identity else None)
    in_row = False
    if create is None:
        # A new entity's first observation goes into its row (``_first``); any other is a
        # row of its own, unless it repeats the first one or a row.
        first = None if firsts is None else firsts.get(entity_id)
        osource = encode_word(obs_source)
        # (A turn record observed after its close: its row may hold it, ``first_of`` reads.)
        if first is None or (entity_type == TURN and state and state.observation_count > 1):
            held = first_of(conn, entity_id, packed_id)
        else:
            held = -first[0] if first[1] == packed_id else None
        how = None
        if held is None and restates is not None and firsts is not None and state is not None:
            how = derived.outcome(
                conn, firsts[entity_id], firsts.get(restates[0]), fields_json, basis, rule, now,
                state, source,
            )  # fmt: skip
            if how is derived.FOUND:  # (a store of the same source: the message is held)
                if seqs is not None:
                    seqs.append(derived.ENTRY)
                return obs_id, dict(state.fields)
        restated = how is derived.DERIVED
        if not restated and held is None and entity_type == "conversation" and state is not None:
            derived.settle_tie(conn, entity_id, at, now, state.last_observation_at)
        # A turn record's close is held in its row where the row gives the rest back
        # (``_close_row``).
        rest = (priority, osource, 1.0, basis, rule)
        in_row = held is None and holds(close, state, idempotency_key, source, rest)
        # (a close its row holds goes to a row first: ``_close_row.materialize``)
        later = state is not None and state.observation_count == 2 and entity_type == TURN
        if later and not in_row and held is None:
            assert state is not None  # (for mypy)
            materialize(conn, encode_entity(entity_id), state)
        cur = (
            None
            if held is not None or restated or in_row
            else (
                conn.execute(
                    _INSERT_ROW,
                    (
                        packed_id,
                        encode_entity(entity_id),
                        encode_word(entity_type),
                        source,
                        at,
                        priority,
                        osource,
                        1.0,
                        stored_fields,
                        idempotency_key,
                        basis,
                        rule,
                    ),
                )
            )
        )
        seq: float
        if restated:
            assert restates is not None
            restates[1].add((restates[0], entity_id))
            seq = derived.SEQ
            if seqs is not None:
                seqs.append(derived.ENTRY)
        elif in_row:
            assert first is not None  # (a row loaded with its first: ``holds``)
            seq = CLOSE_SEQ
            stored_fields = None  # (its row's close_fields: NULL until settled below)
            if seqs is not None:
                seqs.append(-int(first[0]))  # in a key's list as its row's first is
        elif cur is None or cur.rowcount == 0:
            # The same fields from the same source are already recorded: nothing new to fold.
            if seqs is not None:
                found = held if held is not None else observation_seq(conn, entity_id, obs_id)
                if found is not None:
                    seqs.append(found)
            return obs_id, dict(state.fields) if state else None
        else:
            seq = int(cur.lastrowid or 0)
            if seqs is not None:
                seqs.append(seq)
    else:
        seq = FIRST_SEQ
    if state is None:
        state = SnapshotState()
    old_fields = dict(state.fields)
    old_deleted = state.deleted
    meta = ObservationMeta(obs_id, seq, now, priority, source_rank(obs_source))
    changed = fold(state, meta, fields, schema_for(entity_type))
    first_fields: str | None = None
    if create is None:
        name = row_name(conn, entity_type, encode_entity(entity_id))
        fields_text = settle_fields(
            conn,
            state,
            old_fields,
            meta.seq,
            fields_json,
            stored_fields,
            changed,
            entity_id,
            entity_type,
            name,
        )
    else:
        name = create.canonical_name
        fields_text = dumps_acyclic(state.fields)
        if fields_json == fields_text:
            state.shared = FIRST_SEQ
        else:
            first_fields = encode_fields(entity_type, fields, fields_json, name)
    if states is not None:
        states[entity_id] = state
    coded = encode_fields(entity_type, state.fields, fields_text, name, exact=True)
    doc = encode_state(state, coded, entity_type == BY_SEQ)
    messages = 0 if counted is None else counted.take(entity_id)
    known = None if firsts is None else firsts.get(entity_id)
    rowid = None if known is None else int(known[0])  # the entity row's, if held
    if create is not None:
        columns = (first_id, source, idempotency_key, priority, encode_word(obs_source), 1.0)
        rowid = insert_row(
            conn,
            entity_id,
            create,
            at,
            doc,
            state.observation_count,
            state.last_observation_at,
            messages,
            (*columns, basis, rule, first_fields),
            room_for(entity_type, fields, None if first_fields is not None else coded),
        )
        if seqs is not None:
            seqs.append(-rowid)
        if firsts is not None:
            firsts[entity_id] = (rowid, packed_id)
        index_name(
            conn,
            create.canonical_name,
            entity_id,
            create.entity_type,
            rowid,
        )
    else:
        last = encode_opt_time(state.last_observation_at)
        row = encode_entity(entity_id) if rowid is None else rowid
        params = [doc, state.observation_count, last, at, row]
        if in_row:
            params += (packed_id, source)
        if messages:
            params.append(messages)
        conn.execute(_UPDATES[in_row, bool(messages), rowid is not None], params)
    moved = changed or state.deleted != old_deleted
    if moved or entity_type in SUMMARIZED_TYPES:
        change = SnapshotChange(
            entity_id,
            entity_type,
            old_fields,
            old_deleted,
            state.fields,
            state.deleted,
            state.last_observation_at,
        )
        if moved:
            # (Unmoved, each of these finds nothing to do: e.g. a conversation restated.)
            index_fields(conn, entity_id, old_fields, state.fields)
            index_search(conn, change, rowid)
            rederive_name(
                conn, entity_id, entity_type, old_fields, state.fields, now, create, fields
            )
        if entity_type in SUMMARIZED_TYPES:
            summarize(conn, change)
    return obs_id, dict(state.fields)
