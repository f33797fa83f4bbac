"""The rows of a history page, decoded once per stored state.

A turn reads the last few turns of its conversation (``history_turns``), so each message and
turn record is on the page of the next several turns, unchanged: decoding it again each
time is most of what the store's thread spends on the read. These memos key on the stored
text itself (and the row's other columns that the decode reads), so a row that changes is
a new key: a hit is exactly what decoding would give.

Only what cannot be changed through an answer is kept: messages whose page fields are all
scalars, and turn records whose fields are scalars or lists of scalars (a record's entity-id
lists) and whose provenance is text; each answer gets its own dicts and lists.
Texts past :data:`_MAX_TEXT` characters (a long message) are decoded every time, so the
memos stay small (at most :data:`_MAX_ENTRIES` each, emptied when full).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ._codec import decode_fields as decode_fields_of
from ._row_metas import Rows
from ._rows import FirstMetaNeeded, decode_state, decode_time, snapshot_record

__all__ = [
    "MESSAGE_KEYS",
    "activity",
    "conversation_item",
    "decode_fields",
    "display",
    "forget",
    "message_fields",
    "page_entry",
    "related_entry",
    "turn_record",
]

#: a message's fields that a page lists, in this order
MESSAGE_KEYS: Final = ("role", "sender_kind", "content", "turn_key", "turn_number")
_SCALARS: Final = frozenset((str, int, float, bool, type(None)))
_MAX_TEXT: Final = 4096
_MAX_ENTRIES: Final = 4096

# json.loads without its trailing-whitespace check: SQLite's JSON text has none.
_decode_json = json.JSONDecoder().raw_decode

# Keyed by a message's ``$.f`` text (message_fields: its values), or by its row's columns
# in a tuple (page_entry: its item): the two kinds of key never meet.
_messages: dict[Any, Any] = {}
_records: dict[tuple[str, str, int, Any, tuple[Any, ...] | None, Rows | None], dict[str, Any]] = {}


def decode_fields(text: str | None) -> dict[str, Any]:
    """A ``json_extract(snapshot, '$.f')`` column as a dict (``{}`` for none)."""
    return _decode_json(text)[0] if text else {}


def forget() -> None:
    """Empty the memos (a store closing: its texts are not kept past it)."""
    _messages.clear()
    _records.clear()


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    # Several stores' threads may share a memo: each step here is atomic under the GIL.
    if len(memo) >= _MAX_ENTRIES:
        memo.clear()
    memo[key] = value


def message_fields(text: str | None) -> tuple[Any, ...]:
    """The :data:`MESSAGE_KEYS` values of a message's ``$.f`` text (``None`` where absent)."""
    if not text:
        return (None,) * len(MESSAGE_KEYS)
    values = _messages.get(text)
    if values is None:
        get = decode_fields(text).get
        values = tuple([get(k) for k in MESSAGE_KEYS])
        if len(text) <= _MAX_TEXT and all(type(v) in _SCALARS for v in values):
            _remember(_messages, text, values)
    return values


def page_entry(
    message_id: str,
    canonical_name: str,
    created: str | int,
    updated: str | int,
    observed: str | int | None,
    snapshot: str,
) -> tuple[dict[str, Any], tuple[Any, ...]] | None:
    """A message row as a history page lists it (``related_entities`` left ``None`` for the
    caller to fill), read from the row's whole ``snapshot`` text: no JSON taken apart in SQL;
    ``None`` when the message is deleted. The item (a fresh dict each time), with the
    values its typed message is made of (``_typed_page``): ``message_id``, ``role``,
    ``content``, ``turn_key``, ``activity_at`` and ``turn_number`` as
    ``ConversationMessage.from_json`` reads them from the item (a value of another type as
    ``None``)."""
    key = (message_id, canonical_name, created, updated, observed, snapshot)
    memo = _messages.get(key)
    if memo is None:
        doc = _decode_json(snapshot)[0]
        if doc.get("d"):
            return None
        fields = doc.get("f")
        if type(fields) is list:
            fields = decode_fields_of(fields, canonical_name)
        get = fields.get if isinstance(fields, dict) else {}.get
        role, sender_kind, content, turn_key, turn_number = [get(k) for k in MESSAGE_KEYS]
        at = activity(created, updated, observed)
        item = {
            "message_id": message_id,
            "canonical_name": canonical_name,
            "role": role,
            "sender_kind": sender_kind,
            "content": content,
            "turn_key": turn_key,
            "activity_at": at,
            "related_entities": None,
            "hook_summary": None,
            "turn_number": turn_number,
        }
        typed = (
            message_id or "",
            role if type(role) is str else None,
            content if type(content) is str else None,
            turn_key if type(turn_key) is str else None,
            at or "",
            turn_number if type(turn_number) is int else None,
        )
        memo = (item, typed)
        if len(snapshot) <= _MAX_TEXT and all(type(v) in _SCALARS for v in item.values()):
            _remember(_messages, key, memo)
    return memo[0].copy(), memo[1]


def turn_record(
    entity_id: str,
    entity_type: str,
    snapshot: str,
    count: int,
    observed: str | int | None,
    first: tuple[Any, ...] | Callable[[], tuple[Any, ...]],
    rows: Rows | None = None,
) -> dict[str, Any] | None:
    """The snapshot record of a turn record's row (``_rows.snapshot_record``), with the
    row's ``FIRST_META`` columns, or what reads them and its ``SEQ_META`` when its
    snapshot lists its first observation (a closed turn record does not: its close
    restates every field); ``rows``: its ``SEQ_META`` column; ``None`` when it is
    deleted."""
    given = first if isinstance(first, tuple) else None
    key = (entity_id, snapshot, count, observed, given, rows)
    record = _records.get(key)
    if record is None:
        try:
            state = decode_state(snapshot, count, observed, given, None, rows)
        except FirstMetaNeeded:
            if given is not None or isinstance(first, tuple):
                raise
            read = first()
            return turn_record(entity_id, entity_type, snapshot, count, observed, read[:5], read[5])
        if state.deleted:
            return None
        record = snapshot_record(entity_id, entity_type, state)
        if not (
            len(snapshot) <= _MAX_TEXT
            and all(_kept(v) for v in state.fields.values())
            and all(type(v) is str for v in state.provenance.values())
        ):
            return record
        _remember(_records, key, record)
    # The memo's dicts and lists are never handed out: a caller may change what it was given.
    fields = {k: v[:] if type(v) is list else v for k, v in record["snapshot"].items()}
    return {**record, "snapshot": fields, "provenance": dict(record["provenance"])}


def _kept(value: Any) -> bool:
    # A scalar, or a list of scalars: copied on the way out, a caller cannot change the memo's.
    if type(value) is list:
        return all(type(v) in _SCALARS for v in value)
    return type(value) in _SCALARS


def activity(
    created: str | int | None, updated: str | int | None, observed: str | int | None
) -> str:
    """The latest of an entity row's times (as stored: ``_rows.encode_time``), as text."""
    if type(created) is int and type(updated) is int and type(observed) in (int, type(None)):
        # Times stored as epoch milliseconds order as their text does: decode one of them.
        return decode_time(max(created, updated, observed or created))
    return max(decode_time(t) for t in (created, updated, observed, "") if t is not None)


def display(fields: Mapping[str, Any], fallback: str | None) -> str | None:
    for key in ("title", "name", "full_name"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return fallback


def related_entry(
    relationship_type: str, entity_id: str, entity_type: str, canonical: str | None, fields: Any
) -> dict[str, Any]:
    """A message's related entity as a page lists it: the far end of one of its edges
    (``fields``: the far end's stored fields, undecoded)."""
    return {
        "entity_id": entity_id,
        "entity_type": entity_type,
        "canonical_name": canonical,
        "title": display(decode_fields(fields), canonical),
        "relationship_type": relationship_type,
    }


def conversation_item(
    row: Sequence[Any], messages: list[dict[str, Any]], snapshot: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The conversation's item (``snapshot``: its fields, when the caller decoded them)."""
    cid, canonical, created, updated, observed, fields, _deleted, count = row
    if snapshot is None:
        snapshot = decode_fields(fields)
    latest = max((m["activity_at"] for m in messages), default="")
    title = snapshot.get("title")
    return {
        "conversation_id": cid,
        "canonical_name": canonical,
        "title": title if isinstance(title, str) else None,
        "activity_at": latest or activity(created, updated, observed),
        "message_count": count,
        "latest_write_provenance": None,
        "messages": messages,
    }
