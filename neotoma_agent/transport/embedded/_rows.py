"""Row <-> JSON: the shapes a server answers for entities, snapshots, edges and observations.

Readers of an entity row (its JSON, its snapshot state) live here too, so that every module
that answers with a row builds it the same way.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..._neotoma.identity import ENTITY_ID_RE, schema_version
from ..._neotoma.js import compact_encoder
from . import _codec, _first_id, _restatement, _scope
from ._first_id import first_id_sql
from ._id_prefix import id_among, id_is
from ._ids import decode_id, encode_id
from ._reducer import ObservationMeta, SnapshotState
from ._row_metas import (
    FIRST_META,
    SEQ_META,
    FirstMetaNeeded,
    Rows,
    decode_meta,
    encode_meta,
)
from ._times import decode_time, encode_time
from ._words import decode_word, encode_word

__all__ = [
    "DIRECT_COLUMNS",
    "FIRST_META",
    "LIVE",
    "OBSERVATION_FIELDS",
    "QUERY_COLUMNS",
    "SEQ_META",
    "FirstMetaNeeded",
    "decode_doc_fields",
    "decode_entity",
    "decode_id",
    "decode_opt_time",
    "decode_seen",
    "decode_state",
    "decode_time",
    "decode_word",
    "direct_item",
    "dumps",
    "dumps_acyclic",
    "encode_entity",
    "encode_id",
    "encode_opt_time",
    "encode_seen",
    "encode_state",
    "encode_time",
    "encode_word",
    "entity_exists",
    "entity_json",
    "entity_row",
    "entity_text",
    "install",
    "live_state",
    "load_row",
    "load_rows",
    "load_state",
    "observation_json",
    "observation_seq",
    "owned_entity",
    "query_item",
    "snapshot_record",
    "time_text",
]


dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

#: :data:`dumps` without the cycle check, and so without ``encode``'s per-call set-up: for
#: what the write path builds from values it already serialised once (never circular).
dumps_acyclic = compact_encoder(allow_nan=True, check_circular=False)


# -- compact columns -----------------------------------------------------------------------
#
# Observation and source ids are sha256 digests laid out as UUIDs: stored as their 16
# bytes. Timestamps the store writes (ISO 8601, milliseconds, "Z") are stored as integer
# milliseconds. A value that would not come back as the same text is stored as it is
# (the columns are untyped), so decoding never guesses.


def encode_opt_time(value: str | None) -> str | int | None:
    return None if value is None else encode_time(value)


def decode_opt_time(value: str | int | None) -> str | None:
    return None if value is None else decode_time(value)


def time_text(column: str) -> str:
    """SQL for a time column as the text it encodes, for filters that compare it as text."""
    return (
        f"(CASE typeof({column}) WHEN 'integer' THEN "
        f"strftime('%Y-%m-%dT%H:%M:%fZ', {column} / 1000.0, 'unixepoch') ELSE {column} END)"
    )


# Entity ids ("ent_" and 24 hex digits) are stored as their 12 bytes in the entity rows and
# their unique index (schema version 12) and in the observations (the conversation index
# holds entity row numbers since version 18); any other id as it is. Edges, field
# values, summaries and the name index hold the text. ``entity_text`` is the SQL that turns
# such a column back into the id; the SQL function ``entity_key`` (``install``) packs one.


@functools.lru_cache(maxsize=4096)  # a turn binds its entities' ids several times each
def encode_entity(value: str) -> str | bytes:
    return bytes.fromhex(value[4:]) if ENTITY_ID_RE.match(value) else value


def decode_entity(value: str | bytes) -> str:
    return "ent_" + value.hex() if isinstance(value, bytes) else value


def entity_text(column: str) -> str:
    """SQL for an ``encode_entity`` column as the entity id it holds."""
    return (
        f"(CASE typeof({column}) WHEN 'blob' THEN 'ent_' || lower(hex({column})) ELSE {column} END)"
    )


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function ``entity_key`` (``encode_entity``), for statements
    that find entity rows from ids held as text (edges, JSON lists, parameters); and bind
    ``bytes`` parameters without a failed adaptation (below)."""
    conn.create_function("entity_key", 1, encode_entity, deterministic=True)
    _codec.install(conn)
    _first_id.install(conn)
    _bind_bytes()


def _bind_bytes() -> None:
    """Python's ``sqlite3`` binds ``str``, ``int``, ``float`` and ``bytearray`` directly,
    but looks a ``bytes`` parameter up as a type to adapt first, and its lookup fails by
    raising and clearing two ``AttributeError``\\ s (about 1 µs a parameter: the ids,
    digests and source ids this store binds as their bytes, dozens a turn). An adapter of
    ``bytes`` to itself answers that lookup, and binds the same value: registered once per
    process, unless the application registered one of its own (``sqlite3``'s adapters are
    the process's)."""
    if (bytes, sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(bytes, bytes)


def encode_seen(ids: Sequence[str]) -> str | bytes:
    """An edge's observation ids: their 16 bytes each, end to end (else JSON text)."""
    packed = [encode_id(i) for i in ids]
    if all(isinstance(p, bytes) for p in packed):
        return b"".join(p for p in packed if isinstance(p, bytes))
    return dumps(list(ids))


def decode_seen(value: str | bytes) -> list[str]:
    if isinstance(value, str):
        loaded: list[str] = json.loads(value)
        return loaded
    return [str(decode_id(value[i : i + 16])) for i in range(0, len(value), 16)]


# -- the snapshot doc ---------------------------------------------------------------------
#
# An entity's snapshot state is stored compactly: each observation that wins a field (or
# decides deletion) is listed once in "o" ([id, seq, observed_at, priority, source rank,
# specificity], the last dropped when 1.0; the id as the base64 of its 16 bytes, the time
# as ``encode_time``; since schema version 13 the entity row's own first observation, seq
# 0, as the number 0 alone: its meta is the row's ``FIRST_META`` columns, read beside the
# snapshot; since schema version 25 a turn record's observation rows as their seq alone,
# a positive number: their metas are read beside the snapshot too, ``SEQ_META``,
# ``_row_metas``), and per-field winners are indexes into it. The provenance map is
# rebuilt on read (a field's provenance is its winner's id, or a merged array's ids), so
# the observation id is not repeated per field, twice:
#
#   {"f": fields, "o": [meta, ...], "w": {field: index | array winner}, "t": null,
#    "d": 1 when deleted, "p": provenance (only when it is not the winners' ids),
#    "s": the seq of the observation stored without its fields (they are "f")}
#
# o[0] is the observation that decides deletion ("t": null when there is none); "w" is left
# out when o[0] wins every field of "f", in the order of "f".
# A message's and a turn record's "f" is, since schema version 16, their type's field codec
# (a JSON array, ``_codec``) where it gives them back exactly: decoded with the row's name.
# Older formats are still read: version 3's (the same, with ids and times as text), and the
# first one ({"f", "p", "w", "top", "del"}, metas per field).


def _winner_id(winner: Any) -> str:
    return str(winner[0]) if isinstance(winner, list) else ",".join(winner["ids"])


def encode_state(state: SnapshotState, fields_text: str | None = None, by_seq: bool = False) -> str:
    """The stored form of ``state`` (see above); :func:`decode_state` is its inverse.

    ``fields_text``: ``dumps(state.fields)`` when the caller has it already; ``by_seq``:
    its observation rows listed by seq (a turn record's, ``_row_metas.BY_SEQ``).
    """
    fields = dumps_acyclic(state.fields) if fields_text is None else fields_text
    alone = _one_winner(state)
    if alone is not None:
        # The common case (a new entity): o[0] wins every field of "f", in its order,
        # and is each field's provenance: the doc is "o" alone, with "d" and "s".
        text = '{"f":' + fields + ',"o":[' + dumps_acyclic(encode_meta(alone, by_seq)) + "]"
        if state.deleted:
            text += ',"d":1'
        if state.shared is not None:
            text += ',"s":' + dumps_acyclic(state.shared)
        return text + "}"
    top = state.top.to_json() if state.top is not None else None
    metas: list[list[Any]] = [] if top is None else [top]
    seen: dict[tuple[Any, Any], int] = {} if top is None else {(top[0], top[1]): 0}
    winners: dict[str, Any] = {}
    # Trivial: o[0] wins every field of "f", in the order of "f" ("w" is left out).
    trivial = top is not None and list(state.winners) == list(state.fields)
    for name, winner in state.winners.items():
        if isinstance(winner, list):
            key = (winner[0], winner[1])  # id and seq name one observation
            at = seen.get(key)
            if at is None:
                at = seen[key] = len(metas)
                metas.append(winner)
            winners[name] = at
            trivial = trivial and at == 0
        else:
            winners[name] = winner
            trivial = False
    doc: dict[str, Any] = {"o": [encode_meta(m, by_seq) for m in metas]}
    if not trivial:
        doc["w"] = winners
    if top is None and metas:
        doc["t"] = None
    if state.deleted:
        doc["d"] = 1
    if trivial:  # each field's provenance should be o[0]'s id: no per-field rebuild
        top_id = str(metas[0][0])
        rebuilt = list(state.provenance) == list(state.winners) and all(
            v == top_id for v in state.provenance.values()
        )
    else:
        expected = [(n, _winner_id(w)) for n, w in state.winners.items()]
        rebuilt = list(state.provenance.items()) == expected
    if not rebuilt:
        doc["p"] = state.provenance  # not the winners' ids: kept as it is
    if state.shared is not None:
        doc["s"] = state.shared
    # "f" first, then the rest: dumps({"f": ..., **doc}) without encoding the fields twice.
    return '{"f":' + fields + "," + dumps_acyclic(doc)[1:]


def _one_winner(state: SnapshotState) -> list[Any] | None:
    """The top observation's meta (``to_json``) when it wins every field of ``state.fields``,
    in their order, and is each one's provenance, and nothing else is listed; else None
    (:func:`encode_state` then builds its doc in full)."""
    top = state.top
    if top is None or list(state.winners) != list(state.fields):
        return None
    for winner in state.winners.values():
        if type(winner) is not list or winner[0] != top.id or winner[1] != top.seq:
            return None
    if list(state.provenance) != list(state.fields):
        return None
    for source in state.provenance.values():
        if source != top.id:
            return None
    return top.to_json()


def decode_doc_fields(text: str, name: str | None = None) -> tuple[dict[str, Any], bool]:
    """A stored snapshot doc's fields and whether it is deleted, in every format, without
    its metas (a reader of fields only: it needs no ``FIRST_META``); ``name``: the row's
    canonical name (``_codec``)."""
    doc = json.loads(text)
    if "o" in doc:
        fields = doc["f"]
        if type(fields) is list:
            fields = _codec.decode_fields(fields, name)
        return fields, bool(doc.get("d", False))
    state = SnapshotState.from_json(doc, 0, None)
    return state.fields, state.deleted


def decode_state(
    text: str,
    observation_count: int,
    last_observation_at: str | int | None,
    first: Sequence[Any] | None,
    name: str | None = None,
    rows: Rows | None = None,
) -> SnapshotState:
    """The snapshot state stored by :func:`encode_state` (or in an older format), with the
    entity row's count and last observation time (as stored: :func:`encode_time`) and its
    ``FIRST_META`` columns (``None`` only where the row holds no first observation), and
    its canonical name (what a coded "f" may derive a value from: ``_codec``); ``rows``:
    its ``SEQ_META`` column (a turn record's: ``None`` where it lists no row by seq)."""
    doc = json.loads(text)
    last_observation_at = decode_opt_time(last_observation_at)
    if "o" not in doc:
        return SnapshotState.from_json(doc, observation_count, last_observation_at)
    metas = [decode_meta(m, first, rows) for m in doc["o"]]
    fields = doc["f"]
    if type(fields) is list:
        fields = _codec.decode_fields(fields, name)
    w = doc.get("w")
    winners: dict[str, Any] = (
        dict.fromkeys(fields, metas[0])
        if w is None
        else {k: metas[v] if isinstance(v, int) else v for k, v in w.items()}
    )
    provenance = doc.get("p")
    if provenance is None and w is None:
        provenance = dict.fromkeys(fields, str(metas[0][0]))  # o[0] wins every field
    elif provenance is None:
        provenance = {name: _winner_id(winner) for name, winner in winners.items()}
    top = doc.get("t", 0)
    return SnapshotState(
        fields=fields,
        provenance=provenance,
        winners=winners,
        top=ObservationMeta.from_json(metas[top]) if metas and top is not None else None,
        deleted=bool(doc.get("d", False)),
        observation_count=observation_count,
        last_observation_at=last_observation_at,
        shared=doc.get("s"),
    )


# -- shared fields ---------------------------------------------------------------------------
#
# Most observations carry exactly the fields their entity's snapshot holds (a message is
# written once; a turn record's closing observation restates it whole), so one observation
# per entity may be stored without its fields (NULL): they are the snapshot's "f", and the
# snapshot names it ("s"). When a later fold changes "f", that observation gets its fields
# back first (``_shared_fields``). Readers select ``OBSERVATION_FIELDS`` instead of the column.

OBSERVATION_FIELDS = _restatement.fields_sql()  # (and a row that restates the first's)


# -- idempotency keys ------------------------------------------------------------------------
#
# A key's row holds its source id (16 bytes: a digest of the hash of the entities it stored,
# so an equal id is an equal hash) and the seqs of the observations it wrote, newest first;
# a replay reads each observation's entity, type and id from its row. The row is found by
# a digest of the key (``_key_digest``), so the key's text is stored once, in its row (an
# observation's ``source`` reads it back), not again in every index entry.


def observation_seq(conn: sqlite3.Connection, entity_id: str, obs_id: str) -> int | None:
    """The seq of an entity's observation as a key's list names it (minus the entity's
    rowid for the ones its row holds: its first, a turn record's close), or None when it
    has no such observation."""
    packed = encode_id(obs_id)
    row = conn.execute(
        "SELECT seq FROM observations "
        f"WHERE entity_row = (SELECT rowid FROM entities WHERE {id_is('?1')}) AND id = ?2 "
        f"UNION ALL SELECT -rowid FROM entities WHERE {id_is('?1')} "
        f"AND ({first_id_sql()} = ?2 OR close_id = ?2)",
        (encode_entity(entity_id), packed),
    ).fetchone()
    return None if row is None else int(row[0])


def owned_entity(conn: sqlite3.Connection, columns: str, entity_id: str) -> tuple[Any, ...] | None:
    """The ``columns`` (SQL) of entity ``entity_id`` if the running user's, else None."""
    sql = f"SELECT {columns} FROM entities WHERE {id_is('?1')} AND {_scope.owned()}"
    row: tuple[Any, ...] | None = conn.execute(sql, (encode_entity(entity_id),)).fetchone()
    return row


def entity_row(conn: sqlite3.Connection, entity_id: str) -> dict[str, Any] | None:
    columns = "id, entity_type, canonical_name, aliases, created_at, updated_at"
    row = owned_entity(conn, columns, entity_id)
    return entity_json(row) if row else None


def entity_json(row: Sequence[Any]) -> dict[str, Any]:
    """An entity's answer from its row's (id, type, name, aliases, created, updated)."""
    return {
        "id": decode_entity(row[0]),
        "entity_type": row[1],
        "canonical_name": row[2],
        "aliases": [] if row[3] == "[]" else json.loads(row[3]),  # most have none
        "created_at": decode_time(row[4]),
        "updated_at": decode_time(row[5]),
        "user_id": _scope.user_id(),
        "first_seen_at": None,
        "last_seen_at": None,
        "merged_to_entity_id": None,
        "merged_at": None,
        "merged_into": None,
    }


# What decodes an entity row's snapshot state, after one column of the reader's own.
_STATE_COLUMNS = f"snapshot, observation_count, last_observation_at, canonical_name, {FIRST_META}"


def _row_state(
    conn: sqlite3.Connection, entity_id: str, row: Sequence[Any], first: Sequence[Any]
) -> SnapshotState:
    """The state of an entity row read for a write (``row``: snapshot, count, last, name;
    ``first``: its ``FIRST_META``). The write path's statements leave ``SEQ_META`` out: the
    row a turn folds is a turn record at its close, whose snapshot lists no row by seq, or
    a conversation, which lists none; a turn record written again after its close reads it
    then, with one more statement."""
    try:
        return decode_state(row[0], row[1], row[2], first, row[3])
    except FirstMetaNeeded:
        found = owned_entity(conn, SEQ_META, entity_id)
        return decode_state(
            row[0], row[1], row[2], first, row[3], None if found is None else found[0]
        )


def _owned_state(
    conn: sqlite3.Connection, entity_id: str, column: str
) -> tuple[SnapshotState, Any] | None:
    """An entity's snapshot state and its ``column``, or None if there is no such entity."""
    row = owned_entity(conn, f"{column}, {_STATE_COLUMNS}", entity_id)
    if row is None:
        return None
    return _row_state(conn, entity_id, row[1:5], row[5:]), row[0]


def load_row(conn: sqlite3.Connection, entity_id: str) -> tuple[SnapshotState, int] | None:
    """An entity's snapshot state and message count, or None if there is no such entity."""
    loaded = _owned_state(conn, entity_id, "message_count")
    return None if loaded is None else (loaded[0], int(loaded[1]))


#: what :func:`load_rows` reads of an entity
Loaded = tuple[
    SnapshotState, int, int, Any, tuple[str, str], tuple[Any, Any, Any], tuple[Any, ...] | None
]


def load_rows(
    conn: sqlite3.Connection, entity_ids: Sequence[str]
) -> dict[
    str,
    tuple[
        SnapshotState, int, int, Any, tuple[str, str], tuple[Any, Any, Any], tuple[Any, ...] | None
    ],
]:
    """:func:`load_row` of several entities with one statement (missing ones left out),
    with each one's rowid, ``first_id`` (what ``_first.first_of`` reads), names (its
    ``canonical_name`` and ``aliases``, what ``_turn_names`` reads of a turn record),
    first observation's fields, identity basis and rule (``_derived_restatement``) and,
    for a turn record, what its row holds of a close (``_close_row``: :data:`CLOSE_HELD`)."""
    if not entity_ids:
        return {}
    rows = conn.execute(
        "SELECT id, snapshot, observation_count, last_observation_at, message_count, rowid, "
        f"canonical_name, aliases, first_fields, first_basis, first_rule, {FIRST_META}, "
        f"{CLOSE_HELD} FROM entities WHERE {id_among(len(entity_ids))} "
        f"AND {_scope.owned()}",
        [encode_entity(i) for i in entity_ids],
    ).fetchall()
    # FIRST_META leads with first_id, what ``_first.first_of`` reads.
    out = {}
    for r in rows:
        entity_id = decode_entity(r[0])
        state = _row_state(conn, entity_id, (r[1], r[2], r[3], r[6]), r[11:16])
        # (the close's marker, the first's source, priority, source word, specificity,
        # basis and rule: what a close must share with the first to be held in its row)
        close = None if r[16] is None else (r[16], r[17], *r[13:16], r[9], r[10])
        out[entity_id] = (state, int(r[4]), r[5], r[11], (r[6], r[7]), r[8:11], close)
    return out


#: what :func:`load_rows` reads of a turn record's row for its close (``_close_row``): its
#: ``close_id`` (``b''`` where it holds none), the first's source, basis and rule (NULL for
#: any other type); with the first's priority, source word and specificity (``FIRST_META``)
#: what a close must share with the first to be held in the row
CLOSE_HELD: Final = (
    "CASE WHEN entity_type = 'conversation_turn' AND first_id IS NOT NULL "
    "THEN coalesce(close_id, x'') END, first_source"
)


def load_state(conn: sqlite3.Connection, entity_id: str) -> SnapshotState | None:
    """An entity's snapshot state, or None if there is no such entity."""
    loaded = load_row(conn, entity_id)
    return None if loaded is None else loaded[0]


def live_state(conn: sqlite3.Connection, entity_id: str) -> tuple[str, SnapshotState] | None:
    """An entity's type and snapshot state; None when it is unknown or deleted (a 404)."""
    loaded = _owned_state(conn, entity_id, "entity_type")
    return None if loaded is None or loaded[0].deleted else (str(loaded[1]), loaded[0])


def entity_exists(conn: sqlite3.Connection, entity_id: str) -> bool:
    return owned_entity(conn, "1", entity_id) is not None


def _display_name(fields: Mapping[str, Any]) -> str | None:
    for key in ("name", "title", "full_name"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def snapshot_record(entity_id: str, entity_type: str, state: SnapshotState) -> dict[str, Any]:
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
        "schema_version": schema_version(entity_type),
        "canonical_name": _display_name(fields),
        "snapshot": fields,
        "computed_at": last_observation_at,
        "observation_count": observation_count,
        "last_observation_at": last_observation_at,
        "provenance": provenance,
        "user_id": _scope.user_id(),
    }


# An entity row and what its snapshot record needs, read together: a direct hit costs one
# statement, not an entity read plus a snapshot read.
#: the SQL condition of an entity row that is not soft-deleted (the snapshot's deletion mark,
#: ``"d":1``, or ``"del":true`` in a file an older release wrote). ``instr`` first: the JSON
#: is parsed only for the rare row whose text holds the mark.
LIVE = (
    "NOT (instr(snapshot, '\"d\":1') > 0 AND json_extract(snapshot, '$.d') = 1) AND "
    "NOT (instr(snapshot, '\"del\":true') > 0 AND json_extract(snapshot, '$.del') = 1)"
)


DIRECT_COLUMNS = (
    "id, entity_type, canonical_name, aliases, created_at, updated_at, "
    f"snapshot, observation_count, last_observation_at, {FIRST_META}, {SEQ_META}"
)

#: the columns of a :func:`query_item` row
QUERY_COLUMNS = (
    f"id, entity_type, canonical_name, snapshot, observation_count, last_observation_at, "
    f"{FIRST_META}, {SEQ_META}"
)


def direct_item(row: Sequence[Any]) -> dict[str, Any]:
    """A pass-1/2 item from a ``DIRECT_COLUMNS`` row: the entity and its snapshot record."""
    item = entity_json(row)
    # Only fields and provenance: the winners and deletion order are the store's business.
    state = decode_state(row[6], row[7], row[8], row[9:14], row[2], row[14])
    item["snapshot"] = snapshot_record(item["id"], row[1], state)
    return item


def query_item(row: Sequence[Any]) -> dict[str, Any]:
    """An ``entities/query`` item from a ``QUERY_COLUMNS`` row (id, type, canonical name,
    snapshot doc, count, last, ``FIRST_META``, ``SEQ_META``)."""
    entity_id, entity_type, canonical_name = decode_entity(row[0]), row[1], row[2]
    state = decode_state(row[3], row[4], row[5], row[6:11], canonical_name, row[11])
    return {
        "entity_id": entity_id,
        "entity_type": entity_type,
        "canonical_name": canonical_name,
        "schema_version": schema_version(entity_type),
        "snapshot": state.fields,
        "observation_count": row[4],
        "last_observation_at": state.last_observation_at,
        "provenance": state.provenance,
        "computed_at": state.last_observation_at,
        "merged_to_entity_id": None,
        "merged_at": None,
    }


def observation_json(row: Sequence[Any]) -> dict[str, Any]:
    observed_at = decode_time(row[4])
    return {
        "id": decode_id(row[0]),
        "entity_id": decode_entity(row[1]),
        "entity_type": decode_word(row[2]),
        "schema_version": "1.0",  # observations say 1.0 even where snapshots say 1.4 (e5)
        "source_id": decode_id(row[3]),
        "interpretation_id": None,
        "observed_at": observed_at,
        "specificity_score": row[7],
        "source_priority": row[5],
        "observation_source": decode_word(row[6]),
        "fields": json.loads(row[8]),
        "created_at": observed_at,
        "user_id": _scope.user_id(),
        "idempotency_key": row[9],
        "canonical_hash": None,
        "identity_basis": decode_word(row[10]),
        "identity_rule": decode_word(row[11]),
        "provenance": None,
        "source_peer_id": None,
        "canonical_key": None,
        "sighting_source_id": None,
    }
