"""A conversation's restatement derived from the message its store created, not a row (a
schema step: ``DERIVED_RESTATEMENTS``).

Every turn's enter stores its conversation again beside the user message it creates
(``_restatement``: since schema version 26 that row's fields are a mark, its conversation
row's ``first_fields``; or, where the conversation's first observation still shares its
fields with the snapshot, the snapshot's, as a plain store of the same conversation
writes it). Everything else such a row holds is the new message row's own
first observation's: its source, its time (``created_at``), its priority and observation
source; its identity basis and rule are the conversation row's first observation's, its
specificity 1.0, its key none. So the store writes no row for it: the conversation index's
row of that message in that conversation says so (``restated`` = 1), and every read
derives the observation from the two entity rows (its id is the digest of its source, its
conversation and the fields' text, as a row's: :func:`derived_id`).

- *Its seq*: within its conversation :data:`SEQ` (-1): below the first observation's (0)
  and every row's. A derived restatement is the newest of its conversation's observations
  and alone at its millisecond when written (:func:`outcome`: later than the
  conversation's last observation), and stays alone there: a row of the conversation
  written at the same millisecond writes it as a row first (:func:`settle_tie`), so no
  order by time then seq (a list, the reducer's recency) ever compares its seq with
  another's. In a key's list it is :data:`ENTRY` (0, a number no other entry holds) right
  after its message's own (minus the message's rowid): the store that derives it names
  the conversation just before the message it created (:func:`planned`), and a key's list
  is newest first.
- *Found again*: a store of the same source (the same entities, so the same message and
  its first observation) finds it through that message (:func:`found`), as a row's unique
  index finds a row.
- *Written as a row* (:func:`materialize`) where it can no longer be derived or would
  share its millisecond: a purge of its message alone, a row of its conversation at its
  time; the row holds what the reads derived (its snapshot's meta keeps seq -1, which
  orders the same: nothing else is at its time).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ._first import FIRST_SEQ
from ._first_id import first_id_sql
from ._id_prefix import id_is
from ._key_rows import SOURCE_PREFIX, key_seqs, pack_seqs
from ._new_rows import observation_id
from ._reducer import SnapshotState, renumber
from ._restatement import MARK
from ._row_metas import FIRST_META
from ._rows import (
    decode_entity,
    decode_id,
    decode_state,
    decode_word,
    dumps_acyclic,
    encode_entity,
    encode_state,
    encode_word,
)

__all__ = [
    "COUNT",
    "DERIVED",
    "DERIVED_RESTATEMENTS",
    "ENTRY",
    "FOUND",
    "OBSERVATIONS",
    "SEQ",
    "derive_rows",
    "derived_id",
    "found",
    "materialize",
    "outcome",
    "planned",
    "replayed",
    "settle_tie",
]

#: a derived restatement's seq within its conversation
SEQ: Final = -1
#: a derived restatement in a key's list: the one derived from the message the entry
#: before names (minus its rowid)
ENTRY: Final = 0

_CONVERSATION: Final = "conversation"
_MESSAGE: Final = "conversation_message"

#: the fields' text of the first observation of the conversation row ``c`` (its
#: ``first_fields``, or its snapshot's where it shares them), as ``_first.OBSERVATIONS``
#: reads it (a conversation's are never the field codec's): a derived restatement's
_FIELDS: Final = "coalesce(c.first_fields, json_extract(c.snapshot, '$.f'))"

#: the derived restatements of the entity whose packed id is ``?1``, as the rows of
#: ``_first.OBSERVATIONS`` (their id NULL: :func:`derived_id` of the source, the entity
#: and the fields' text)
OBSERVATIONS: Final = (
    "SELECT NULL, ?1, c.entity_type, m.first_source, m.created_at, m.first_priority, "
    f"m.first_osource, 1.0, {_FIELDS}, NULL, c.first_basis, c.first_rule, -1 "
    "FROM entities c JOIN conversation_messages cm ON cm.conversation_row = c.rowid "
    f"JOIN entities m ON m.rowid = cm.message_row WHERE {id_is('?1', 'c.id')} "
    "AND cm.restated = 1"
)
#: how many derived restatements the entity whose packed id is ``?1`` has
COUNT: Final = (
    "(SELECT count(*) FROM conversation_messages WHERE restated = 1 "
    f"AND conversation_row = (SELECT rowid FROM entities WHERE {id_is('?1')}))"
)

#: the migration's script (:func:`derive_rows` runs right after it)
DERIVED_RESTATEMENTS: Final = """
ALTER TABLE conversation_messages ADD COLUMN restated INTEGER;
"""


def derived_id(source: Any, entity_id: str, fields: str) -> str:
    """The id of an observation of the fields' text ``fields`` on ``entity_id`` from the
    source ``source`` (as rows hold it)."""
    return observation_id(decode_id(source), entity_id, fields)[0]


def planned(
    items: Sequence[Any], fast: Iterable[tuple[str, str]], mine: Iterable[str]
) -> dict[str, str]:
    """A store's conversations whose restatement may be derived, or found derived, each
    with its message: an element resolved to a conversation the store writes once,
    followed by a message it names once, which it creates and places in that conversation
    by a fast PART_OF edge (``fast``: (message, conversation) pairs, ``_new_edges``;
    ``mine``: the conversations counted in their row's write), or which exists (a store
    of the same source may find the restatement derived from it: :func:`found`).
    ``items``: the store's planned elements (``_write._Planned``)."""
    if not any(item.entity_type == _CONVERSATION for item in items[:-1]):
        return {}  # (most stores: nothing to count)
    ids = [p.identity.entity_id for p in items]
    named = Counter(ids)
    pairs = set(fast)
    counted = set(mine)
    out: dict[str, str] = {}
    for at, item in enumerate(items[:-1]):
        nxt = items[at + 1]
        c, m = ids[at], ids[at + 1]
        if (
            item.entity_type == _CONVERSATION
            and item.action == "matched_existing"
            and nxt.index == item.index + 1
            and nxt.entity_type == _MESSAGE
            and (nxt.exists or ((m, c) in pairs and c in counted))
            and named[c] == 1
            and named[m] == 1
        ):
            out[c] = m
    return out


#: what :func:`outcome` finds: the restatement derived, or found derived
DERIVED: Final = "derived"
FOUND: Final = "found"


def outcome(
    conn: sqlite3.Connection,
    row: Sequence[Any],
    message: Sequence[Any] | None,
    fields: str,
    basis: Any,
    rule: Any,
    at: str,
    state: SnapshotState,
    source: Any,
) -> str | None:
    """What a store's restatement of a conversation is (``row``: the conversation row's
    rowid, ``first_id`` and, as loaded with the plan, its ``first_fields``, ``first_basis``
    and ``first_rule``; ``state``: its snapshot state before the store), beside the message
    that follows it (``message``: its rowid and ``first_id`` where it exists, None where
    the store creates it next): :data:`DERIVED` where its fields' text ``fields`` is the
    first observation's (the row's ``first_fields``, or the snapshot's where it shares
    them: the text ``first_fields`` takes when the snapshot moves on), its identity basis
    and rule (as rows hold them) the first observation's and its time ``at`` later than
    the conversation's last observation; :data:`FOUND` where the message's store, of the
    same ``source``, derived it (:func:`found`); else None (a row)."""
    if message is not None:
        return FOUND if found(conn, int(row[0]), int(message[0]), source) else None
    last = state.last_observation_at
    if len(row) != 5 or (last is not None and not at > last):
        return None
    if row[3] != basis or row[4] != rule:
        return None
    first = row[2]
    if first is None and state.shared == FIRST_SEQ:
        first = dumps_acyclic(state.fields)
    return DERIVED if first == fields else None


def found(conn: sqlite3.Connection, row: int, message_row: int, source: Any) -> bool:
    """Whether the conversation row ``row`` holds a restatement derived from the message
    row ``message_row`` whose source (as rows hold it) is ``source``."""
    return (
        conn.execute(
            "SELECT 1 FROM conversation_messages cm JOIN entities m ON m.rowid = cm.message_row "
            "WHERE cm.message_row = ?1 AND cm.conversation_row = ?2 AND cm.restated = 1 "
            "AND m.first_source = ?3",
            (message_row, row, source),
        ).fetchone()
        is not None
    )


def settle_tie(conn: sqlite3.Connection, entity_id: str, at: Any, now: str, last: Any) -> None:
    """Before a row of ``entity_id``'s observations at ``now`` (``at`` as rows hold it;
    ``last``: the entity's last observation's time): its restatement derived at that time,
    if any, written as a row (:func:`materialize`). Only a time not after the last can be
    one's."""
    if last is None or now > last:
        return
    ties = conn.execute(
        "SELECT cm.conversation_row, cm.message_row FROM conversation_messages cm "
        "JOIN entities m ON m.rowid = cm.message_row WHERE cm.restated = 1 "
        f"AND cm.conversation_row = (SELECT rowid FROM entities WHERE {id_is('?1')}) "
        "AND m.created_at = ?2",
        (encode_entity(entity_id), at),
    ).fetchall()
    for row, message_row in ties:
        materialize(conn, row, message_row)


def materialize(conn: sqlite3.Connection, row: int, message_row: int) -> int:
    """The restatement of the conversation row ``row`` derived from the message row
    ``message_row`` written as a row of ``observations`` (its fields the mark, or their
    text where the first observation shares them with the snapshot, as a store writes it),
    no longer derived, and named by its seq in every key's list that names it; its seq."""
    c_id, etype, fields, shared, basis, rule, source, at, priority, osource = conn.execute(
        f"SELECT c.id, c.type_code, {_FIELDS}, c.first_fields IS NULL, c.first_basis, "
        "c.first_rule, m.first_source, m.created_at, m.first_priority, m.first_osource "
        "FROM entities c, entities m WHERE c.rowid = ? AND m.rowid = ?",
        (row, message_row),
    ).fetchone()
    obs_id = observation_id(decode_id(source), decode_entity(c_id), fields)[1]
    text = fields if shared else None  # (None: the mark)
    seq = conn.execute(
        "INSERT INTO observations (id, entity_row, entity_type, source_id, observed_at, "
        "source_priority, observation_source, specificity_score, fields, idempotency_key, "
        "identity_basis, identity_rule) "
        f"VALUES (?, ?, ?, ?, ?, ?, ?, 1.0, coalesce(?, {MARK}), NULL, ?, ?)",
        (obs_id, row, etype, source, at, priority, osource, text, basis, rule),
    ).lastrowid
    assert seq is not None
    conn.execute(
        "UPDATE conversation_messages SET restated = NULL "
        "WHERE conversation_row = ? AND message_row = ?",
        (row, message_row),
    )
    _rename_entries(conn, source, {message_row: seq})
    return int(seq)


#: the key rows of a source (as rows hold it: ``?1``), each found by the index by source
_KEYS_OF: Final = (
    "SELECT uid, digest, slot, observations FROM idempotency_keys "
    f"WHERE substr(source_id, 1, {SOURCE_PREFIX}) = substr(?1, 1, {SOURCE_PREFIX}) "
    "AND source_id = ?1"
)
_SET_LIST: Final = (
    "UPDATE idempotency_keys SET observations = ? WHERE uid = ? AND digest = ? AND slot = ?"
)


def _rename_entries(conn: sqlite3.Connection, source: Any, seqs: Mapping[int, int]) -> None:
    """In each key's list of ``source`` (as rows hold it), the derived restatement of each
    message row of ``seqs`` named by its row's seq there (every key listing it wrote that
    source: the same entities)."""
    for uid, digest, slot, listed in conn.execute(_KEYS_OF, (source,)).fetchall():
        values = key_seqs(listed)
        renamed = [
            seqs.get(-values[i - 1], v) if v == ENTRY and i and values[i - 1] < 0 else v
            for i, v in enumerate(values)
        ]
        if renamed != values:
            conn.execute(_SET_LIST, (pack_seqs(renamed), uid, digest, slot))


def replayed(
    conn: sqlite3.Connection, seqs: Sequence[int], source: Any = None
) -> list[tuple[str, str, str]]:
    """(entity id, entity type, observation id) of each entry of a key's list ``seqs``
    (``source``: the key's, as stored, where the list names an entity row's observation:
    its first, or a turn record's close, ``_close_row``, which the source tells apart)."""
    listed = "[" + ",".join(str(s) for s in seqs) + "]"
    found_rows = {
        r[0]: (decode_entity(r[1]), str(decode_word(r[2])), str(decode_id(r[3])))
        for r in conn.execute(
            "SELECT o.seq, e.id, o.entity_type, o.id FROM observations o "
            "JOIN entities e ON e.rowid = o.entity_row "
            "WHERE o.seq IN (SELECT value FROM json_each(?1)) "
            "UNION ALL SELECT -rowid, id, entity_type, "
            f"CASE WHEN close_source = ?2 THEN close_id ELSE {first_id_sql()} END FROM entities "
            "WHERE rowid IN (SELECT -value FROM json_each(?1) WHERE value < 0) "
            "AND first_id IS NOT NULL",
            (listed, source),
        )
    }
    out = []
    for i, seq in enumerate(seqs):
        if seq == ENTRY and i and seqs[i - 1] < 0:
            out.append(_derived_entry(conn, -seqs[i - 1]))
        else:
            out.append(found_rows[seq])
    return out


def _derived_entry(conn: sqlite3.Connection, message_row: int) -> tuple[str, str, str]:
    c_id, etype, fields, source = conn.execute(
        f"SELECT c.id, c.entity_type, {_FIELDS}, m.first_source FROM conversation_messages cm "
        "JOIN entities c ON c.rowid = cm.conversation_row "
        "JOIN entities m ON m.rowid = cm.message_row "
        "WHERE cm.message_row = ? AND cm.restated = 1",
        (message_row,),
    ).fetchone()
    entity_id = decode_entity(c_id)
    return entity_id, str(etype), derived_id(source, entity_id, fields)


def derive_rows(conn: sqlite3.Connection) -> None:
    """The migration's step: each conversation's row restating its first observation
    (marked, or its fields' text the snapshot's where the first observation shares them)
    that the message its store created gives back exactly (its source, time, priority and
    observation source the message row's first observation's, specificity 1.0, no key, its
    identity basis and rule the conversation's first observation's), alone at its
    millisecond among its conversation's observations, and named in every key's list right
    after that message's first observation, derived instead: the row deleted, the index row
    flagged, the entry 0 in the lists and seq -1 in the conversation's snapshot."""
    code = encode_word(_MESSAGE)
    candidates = conn.execute(
        "SELECT o.seq, o.entity_row, m.rowid, o.source_id FROM observations o "
        "JOIN entities c ON c.rowid = o.entity_row "
        "JOIN conversation_messages cm ON cm.conversation_row = o.entity_row "
        "JOIN entities m ON m.rowid = cm.message_row "
        f"WHERE (o.fields = {MARK} OR (c.first_fields IS NULL AND c.first_id IS NOT NULL "
        f"AND json_extract(c.snapshot, '$.s') = {FIRST_SEQ} AND o.fields = {_FIELDS})) "
        "AND c.entity_type = ? AND o.entity_type = c.type_code "
        "AND o.idempotency_key IS NULL AND o.specificity_score = 1.0 "
        "AND o.identity_basis IS c.first_basis AND o.identity_rule IS c.first_rule "
        "AND m.type_code = ? AND m.first_id IS NOT NULL AND m.first_source = o.source_id "
        "AND m.created_at = o.observed_at AND m.first_priority = o.source_priority "
        "AND m.first_osource IS o.observation_source AND c.created_at != o.observed_at "
        "AND cm.restated IS NULL AND NOT EXISTS (SELECT 1 FROM observations t "
        "WHERE t.entity_row = o.entity_row AND t.observed_at = o.observed_at "
        "AND t.seq != o.seq) ORDER BY o.seq",
        (_CONVERSATION, code),
    ).fetchall()
    by_source: dict[Any, list[tuple[int, int, int]]] = {}
    for seq, row, message_row, source in candidates:
        by_source.setdefault(source, []).append((seq, row, message_row))
    taken: set[int] = set()
    renumbered: dict[int, list[int]] = {}
    for source, rows in by_source.items():
        keys = [(r[:3], key_seqs(r[3])) for r in conn.execute(_KEYS_OF, (source,))]
        lists = [values for _, values in keys]
        for seq, row, message_row in rows:
            if message_row in taken or not _named_after(lists, seq, message_row):
                continue
            taken.add(message_row)
            conn.execute("DELETE FROM observations WHERE seq = ?", (seq,))
            conn.execute(
                "UPDATE conversation_messages SET restated = 1 "
                "WHERE conversation_row = ? AND message_row = ?",
                (row, message_row),
            )
            lists = [[ENTRY if v == seq else v for v in values] for values in lists]
            renumbered.setdefault(row, []).append(seq)
        for (key_row, before), values in zip(keys, lists, strict=True):
            if values != before:
                conn.execute(_SET_LIST, (pack_seqs(values), *key_row))
    for row, seqs in renumbered.items():
        _renumber_snapshot(conn, row, seqs)


def _named_after(lists: Sequence[Sequence[int]], seq: int, message_row: int) -> bool:
    """Whether every entry ``seq`` of ``lists`` comes right after ``-message_row``."""
    return all(
        i and values[i - 1] == -message_row
        for values in lists
        for i, v in enumerate(values)
        if v == seq
    )


def _renumber_snapshot(conn: sqlite3.Connection, row: int, seqs: Sequence[int]) -> None:
    doc, count, last, name, *first = conn.execute(
        "SELECT snapshot, observation_count, last_observation_at, canonical_name, "
        f"{FIRST_META} FROM entities WHERE rowid = ?",
        (row,),
    ).fetchone()
    state = decode_state(doc, count, last, first if first[0] is not None else None, name)
    for seq in seqs:
        renumber(state, seq, SEQ)
    text = encode_state(state)
    if text != doc:
        conn.execute("UPDATE entities SET snapshot = ? WHERE rowid = ?", (text, row))
