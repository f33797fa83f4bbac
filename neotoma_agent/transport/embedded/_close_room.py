"""Room a turn record's row keeps for its close (schema version 21).

A turn record is written at its turn's enter and written again at its close, larger: its
snapshot gains the close's fields and observation, its row the open state's fields
(``first_fields``, once the snapshot no longer repeats them), its times and its count. Entity
rows are appended in rowid order, so the page a turn record is on is usually full by its
close, and a row that grows in a full page splits it: SQLite shares the cells out between
the two pages, and the room the split leaves on the left one is never filled again (rows
are only appended to the right). In a file of short turns, 3% to 18% of the entity
table's leaves was such room, as the rows' exact sizes fell.

So a turn record is written at its enter with the room its close takes, in a column of its
own that no read reads (``room``: a blob of zeros, :func:`room_for`), and every ``UPDATE``
that rewrites an entity row's snapshot, times, count or first fields spends the room on
what the row gains (:func:`spend_sql`, through the SQL function ``room_left``): the row
keeps its size, byte for byte, and SQLite writes it over itself, in its page, with no
split. A close larger than the room (a long list of retrieved ids, say) grows the row by
what is left over only; a close smaller leaves the difference in the row. A row with no
room (NULL: every other entity, and every row an older version wrote) is written as before.

The room is sized at the enter from what a plain close adds (:data:`CLOSE_GROWTH`, below)
and the size of the open fields the close moves into ``first_fields``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from ._row_codes import set_time, time_sql

__all__ = [
    "CLOSE_ROOM",
    "STATE_SET",
    "install",
    "record_size",
    "room_for",
    "room_left",
    "spend_sql",
]

# The migration: an empty column at the end of each entity row's record (NULL, one byte of
# its header); the rows an older version wrote keep none.
CLOSE_ROOM: Final = "ALTER TABLE entities ADD COLUMN room BLOB"

_TURN: Final = "conversation_turn"

#: What a plain close adds to a turn record's row, beyond the open fields it moves into
#: ``first_fields`` (bytes of the SQLite record; tests/transport/embedded/
#: test_close_room.py holds it to a close's exact growth). In the snapshot: the close's
#: fields (the mask's width, the end time's 13 digits, the tool count and two empty lists:
#: 24 bytes), its observation's meta where the open one's was ``0`` (its 22-character id,
#: its seq, its time's 13 digits, priority and source rank: 46 and the seq's digits) and the
#: seq of the observation whose fields the snapshot's are (``"s"``: 0 before, the close's
#: seq after: its digits less one); seqs counted at 6 digits (a file of up to about 500,000
#: turns; a longer seq grows the row by a byte or two). In the row: its count (1 to 2: a
#: byte) and its two times (NULL to integer milliseconds, 6 bytes each).
_SEQ_DIGITS: Final = 6
CLOSE_GROWTH: Final = 24 + (46 + _SEQ_DIGITS) + (_SEQ_DIGITS - 1) + 1 + 2 * 6


def _varint(value: int) -> int:
    size = 1
    while value >= 0x80 and size < 9:
        value >>= 7
        size += 1
    return size


def record_size(value: Any) -> int:
    """The bytes ``value`` takes in a SQLite record: its header's serial type and its data."""
    if value is None:
        return 1
    if isinstance(value, bool | int):
        v = int(value)
        if 0 <= v <= 1:
            return 1
        for size, bound in ((1, 1 << 7), (2, 1 << 15), (3, 1 << 23), (4, 1 << 31), (6, 1 << 47)):
            if -bound <= v < bound:
                return 1 + size
        return 9
    if isinstance(value, float):
        return 9
    n = len(value.encode()) if isinstance(value, str) else len(value)
    return n + _varint(2 * n + (13 if isinstance(value, str) else 12))


def _room_bytes(size: int) -> bytes:
    """A room blob that takes as close to ``size`` record bytes as can be, never more (one
    byte at least: an empty blob)."""
    n = size - 1
    while n > 0 and record_size(bytes(n)) > size:  # its serial type: 1 byte to 57, then 2
        n -= 1
    return bytes(max(0, n))


def room_left(room: bytes, *pairs: Any) -> bytes:
    """The room a row keeps after an ``UPDATE`` that sets each ``pairs``' old value (0, 2,
    ...) to its new one (1, 3, ...): what it held less what the row gains (an empty blob
    once it is spent)."""
    growth = 0
    for i in range(0, len(pairs), 2):
        growth += record_size(pairs[i + 1]) - record_size(pairs[i])
    return _room_bytes(record_size(room) - growth)


def spend_sql(*pairs: tuple[str, str]) -> str:
    """The ``SET`` of ``room`` in an ``UPDATE`` of entity rows that sets each column of
    ``pairs`` (column, SQL of its new value): the room spent on what the row gains."""
    args = ", ".join(f"{column}, {value}" for column, value in pairs)
    return f"room = CASE WHEN room IS NULL THEN NULL ELSE room_left(room, {args}) END"


#: The ``SET`` of a store's ``UPDATE`` of an entity row's state: its snapshot (``?1``), count
#: (``?2``), last observation and update times (``?3``, ``?4``, coded), and its room spent.
STATE_SET: Final = (
    f"snapshot = ?1, observation_count = ?2, {set_time('last_observation_at', 3)}, "
    f"{set_time('updated_at', 4)}, "
    + spend_sql(
        ("snapshot", "?1"),
        ("observation_count", "?2"),
        ("last_code", time_sql(3)),
        ("updated_code", time_sql(4)),
    )
)


def room_for(entity_type: str, fields: Mapping[str, Any], moved: str | None) -> bytes | None:
    """The room a new row keeps: a turn record written open (its enter), the room of its
    close (``moved``: its snapshot's fields as stored when the close moves them to
    ``first_fields``, else None); any other row, none."""
    if entity_type != _TURN or fields.get("status") != "open":
        return None
    return _room_bytes(record_size(moved) - 1 + CLOSE_GROWTH)


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function ``room_left`` (:func:`spend_sql`'s)."""
    conn.create_function("room_left", -1, room_left, deterministic=True)
