"""The plan per type of the protocol's own records: a new message or turn record written
from its payload in one pass.

Every turn creates two ``conversation_message`` entities and a ``conversation_turn``
record, each from a payload of a fixed shape: a few known fields, each a text (a message's
``turn_number`` an int; :data:`SHAPES`). The general write (``_write._observe``) takes
such a payload through every step any store needs: it folds the observation into an empty
snapshot, field by field; compares the snapshot's fields with the observation's; checks
whether the name index, the lookup indexes of the searched fields, or a rename has work;
and builds the change record each derived table follows. For a new entity of these types
and this shape, each of those decisions is known from the shape: the observation wins
every field as given (``_reducer.sets_as_given``, checked), its fields are the snapshot's
and the observation's row shares them, no searched field is set, the name its identity
gave is the one its snapshot gives, and its name is indexed by the store with its turn's
(``_turn_names``). :func:`write_new` writes it so, through the same layout functions the
general write calls (``_new_rows``, ``_rows.encode_state``, ``_codec``, ``_search``,
``_summaries``), and answers what the general write answers.

Any other payload (another field, a value of another type, an entity that
exists or is named twice in the store, a fields' JSON that is not the snapshot's) returns
``None``, and the general write takes it. The rows and answers are the same either way,
field for field (``tests/transport/embedded/test_type_plan.py`` compares both paths on
any payload of these types).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from ..._neotoma.identity import Identity, schema_for, undeclared_identity_keys
from ._close_room import room_for
from ._codec import code_message, encode_fields
from ._first import FIRST_SEQ
from ._first_id import DERIVED as DERIVED_ID
from ._new_edges import Counted
from ._new_rows import insert_row, observation_id
from ._reducer import ObservationMeta, SnapshotChange, SnapshotState, sets_as_given, source_rank
from ._rows import dumps_acyclic, encode_state, encode_time
from ._search import index_search
from ._summaries import SUMMARIZED_TYPES, summarize
from ._turn_names import MESSAGE, TURN
from ._words import encode_word

__all__ = ["SHAPES", "write_new"]

#: The payloads of a new entity written by the plan, by type: the fields it may hold, and
#: the type of each one's value (a turn record's ``started_at`` as its open gives it, its
#: ``harness`` and ``model`` as an integration does). None is a searched field
#: (``_name_index.SEARCH_FIELDS``).
SHAPES: Final[dict[str, dict[str, type]]] = {
    MESSAGE: {"role": str, "sender_kind": str, "content": str, "turn_key": str, "turn_number": int},
    TURN: {
        "session_id": str,
        "turn_id": str,
        "turn_key": str,
        "status": str,
        "harness": str,
        "model": str,
        "started_at": str,
        "ended_at": str,
    },
}


def write_new(
    conn: sqlite3.Connection,
    entity_type: str,
    fields: dict[str, Any],
    fields_json: str,
    identity: Identity,
    source_id: str | None,
    priority: int,
    obs_source: str | None,
    now: str,
    packed_source: str | bytes | None,
    known_state: SnapshotState | None,
    states: dict[str, SnapshotState] | None,
    seqs: list[int] | None,
    firsts: dict[str, tuple[int, Any]] | None,
    counted: Counted | None,
) -> tuple[str, dict[str, Any]] | None:
    """Write a new entity of ``entity_type`` and ``identity`` from ``fields`` (their JSON
    ``fields_json``), a message or turn record of a shape in :data:`SHAPES`, as the general
    write would (``_write._observe`` with these arguments, and ``create=identity``) on the
    empty state ``known_state``: its observation id and snapshot; or ``None``, having
    written nothing, when it is not one."""
    shape = SHAPES.get(entity_type)
    if (
        shape is None
        or not fields
        or states is None
        or seqs is None
        or firsts is None
        or counted is None
        or source_id is None
        or obs_source is None
        or not _empty(known_state)
    ):
        return None
    for name, value in fields.items():
        if type(value) is not shape.get(name):
            return None
    entity_id = identity.entity_id
    if (
        entity_id in states
        or entity_id in firsts
        or identity.identity_basis == "heuristic_fallback"
        or not undeclared_identity_keys(entity_type).isdisjoint(fields)
        or not sets_as_given(schema_for(entity_type), fields)
    ):
        return None
    if dumps_acyclic(fields) != fields_json:
        return None  # its observation's JSON is not its snapshot's: stored apart
    obs_id, packed_id = observation_id(source_id, entity_id, fields_json)
    # The fold of a first observation that wins every field as given (``fold``).
    meta = ObservationMeta(obs_id, FIRST_SEQ, now, priority, source_rank(obs_source))
    row = meta.to_json()
    state = SnapshotState(
        dict(fields),
        dict.fromkeys(fields, obs_id),
        dict.fromkeys(fields, row),
        meta,
        False,
        1,
        now,
        FIRST_SEQ,  # the row's first observation shares the snapshot's fields
    )
    states[entity_id] = state
    name = identity.canonical_name
    coded = None
    if entity_type == MESSAGE:
        coded = code_message(fields, name)
    if coded is None:
        coded = encode_fields(entity_type, fields, fields_json, name, exact=True)
    at = encode_time(now)
    rowid = insert_row(
        conn,
        entity_id,
        identity,
        at,
        encode_state(state, coded),
        1,
        now,
        counted.take(entity_id),
        (
            DERIVED_ID,  # (its id is the digest of the fields its row gives back: _first_id)
            packed_source,
            None,
            priority,
            encode_word(obs_source),
            1.0,
            encode_word(identity.identity_basis),
            encode_word(identity.identity_rule),
            None,
        ),
        room_for(entity_type, fields, coded),  # (its first fields are shared)
    )
    seqs.append(-rowid)
    firsts[entity_id] = (rowid, packed_id)
    change = SnapshotChange(entity_id, entity_type, {}, False, state.fields, False, now)
    index_search(conn, change, rowid)
    if entity_type in SUMMARIZED_TYPES:
        summarize(conn, change)
    return obs_id, dict(fields)


def _empty(state: SnapshotState | None) -> bool:
    """Whether ``state`` is a new entity's, before its first fold (``SnapshotState()``)."""
    return (
        state is not None
        and state.top is None
        and not state.fields
        and not state.provenance
        and not state.winners
        and not state.deleted
        and state.observation_count == 0
        and state.last_observation_at is None
        and state.shared is None
    )
