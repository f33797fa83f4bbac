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
from typing import Any, Final

from ._rows import decode_state, snapshot_record

__all__ = ["MESSAGE_KEYS", "decode_fields", "forget", "message_fields", "turn_record"]

#: a message's fields that a page lists, in this order
MESSAGE_KEYS: Final = ("role", "sender_kind", "content", "turn_key", "turn_number")
_SCALARS: Final = frozenset((str, int, float, bool, type(None)))
_MAX_TEXT: Final = 4096
_MAX_ENTRIES: Final = 4096

# json.loads without its trailing-whitespace check: SQLite's JSON text has none.
_decode_json = json.JSONDecoder().raw_decode

_messages: dict[str, tuple[Any, ...]] = {}
_records: dict[tuple[str, str, int, Any], dict[str, Any]] = {}


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


def turn_record(
    entity_id: str, entity_type: str, snapshot: str, count: int, observed: str | int | None
) -> dict[str, Any] | None:
    """The snapshot record of a turn record's row (``_rows.snapshot_record``); ``None`` when
    it is deleted."""
    key = (entity_id, snapshot, count, observed)
    record = _records.get(key)
    if record is None:
        state = decode_state(snapshot, count, observed)
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
