"""Room a turn record's row keeps for its close (a schema step: ``CLOSE_ROOM``).

A turn record is written at its turn's enter and written again at its close, larger: its
snapshot gains the close's fields and observation, its row the open state's fields
(``first_fields``, once the snapshot no longer repeats them), its times and its count. Entity
rows are appended in rowid order, so the page a turn record is on is usually full by its
close, and a row that grows in a full page splits it: SQLite shares the cells out between
the two pages, and the room the split leaves on the left one is never filled again (rows
are only appended to the right). In a file of short turns, 3% to 18% of the entity
table's leaves was such room, as the rows' exact sizes fell.

So a turn record is written at its enter with the room its close takes, in a column of its
own that no read reads (``room``: a blob of zeros, :func:`room_for`). Its close writes the
row twice: its open fields into ``first_fields`` (``FIRST_SET``), which spends the room on
them byte for byte (:func:`spend_sql`: the bytes each value takes in the row's record,
:func:`record_size`, computed in SQL: :func:`text_size`), then its state (snapshot, count,
times: ``STATE_SET``), which takes the rest of the room and lets go of what it did not
need (a few bytes, left to the page). The row never grows, so SQLite rewrites it in its
page, with no split. A close larger than the room (a long list of retrieved ids, say)
grows the row by what is left over only. A row with no room (NULL: every other entity, and
every row an older version wrote) is written as before; a rename or a migration's rewrite
leaves the room as it is.

The room is sized at the enter from what a plain close adds (:data:`CLOSE_GROWTH`, below)
and the size of the open fields the close moves into ``first_fields``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ._close_row import CLOSE_SEQ
from ._row_codes import set_time

__all__ = [
    "CLOSE_ROOM",
    "FIRST_SET",
    "STATE_SET",
    "record_size",
    "room_for",
    "spend_sql",
    "text_size",
]

# The migration: an empty column at the end of each entity row's record (NULL, one byte of
# its header); the rows an older version wrote keep none.
CLOSE_ROOM: Final = "ALTER TABLE entities ADD COLUMN room BLOB"

_TURN: Final = "conversation_turn"

#: What a plain close adds to a turn record's row, beyond the open fields it moves into
#: ``first_fields`` and the digits of its observation's seq (bytes of the SQLite record;
#: tests/transport/embedded/test_close_room.py holds it to a close's exact growth). In the
#: snapshot: the close's fields (the mask's width, the end time's 13 digits, the tool count
#: and two empty lists: 24 bytes), its observation listed by its seq where the open one's
#: was ``0`` (since schema version 25, ``_row_metas``: its digits less one) and the seq of
#: the observation whose fields the snapshot's are (``"s"``: 0 before, the close's seq
#: after: its digits less one). In the row: its count (1 to 2: a byte) and its two times
#: (NULL to integer milliseconds, 6 bytes each).
CLOSE_GROWTH: Final = 24 - 1 - 1 + 1 + 2 * 6

#: What the close adds to the row that holds it (since schema version 32, ``_close_row``):
#: its id's and its source's 16 bytes and its time's (milliseconds after the row's
#: ``created_at``: 2 bytes to 32 seconds; the four columns' header bytes are the enter's,
#: NULL), and its seq, ``0.5``, where the snapshot lists it (its metas and ``"s"``: twice). A
#: close its row does not hold (a row of ``observations``: a record written again, say) is
#: listed by a seq of more digits but adds none of those 34 bytes.
_HELD: Final = 16 + 16 + 2 + 2 * len(str(CLOSE_SEQ))


def _varint(value: int) -> int:
    size = 1
    while value >= 0x80 and size < 9:
        value >>= 7
        size += 1
    return size


#: the bytes of an integer's data by the bound it is below (and at or above minus it)
_INT_BYTES: Final = ((1 << 7, 1), (1 << 15, 2), (1 << 23, 3), (1 << 31, 4), (1 << 47, 6))


def record_size(value: Any) -> int:
    """The bytes ``value`` takes in a SQLite record: its header's serial type and its data."""
    kind = type(value)
    if kind is str:
        n = len(value) if value.isascii() else len(value.encode())
        return n + (1 if n <= 57 else _varint(2 * n + 13))
    if value is None:
        return 1
    if kind is bytes:
        n = len(value)
        return n + (1 if n <= 57 else _varint(2 * n + 12))
    if kind is int or kind is bool:
        if 0 <= value <= 1:
            return 1
        for bound, size in _INT_BYTES:
            if -bound <= value < bound:
                return 1 + size
        return 9
    return 9  # a float


def _room_bytes(size: int) -> bytes:
    """A room blob that takes as close to ``size`` record bytes as can be, never more (one
    byte at least: an empty blob)."""
    n = size - 1
    while n > 0 and n + _varint(2 * n + 12) > size:  # its serial type: 1 byte to 57, then 2
        n -= 1
    return bytes(max(0, n))


def text_size(x: str) -> str:
    """SQL of :func:`record_size` of the value of ``x``, a TEXT, a BLOB or NULL: its bytes (a
    cast to BLOB copies nothing) and its serial type's."""
    n = f"length(CAST({x} AS BLOB))"
    return f"coalesce({n} + 1 + ({n} > 57) + ({n} > 8185), 1)"


def spend_sql(*sizes: tuple[str, str]) -> str:
    """The ``SET`` of ``room`` in an ``UPDATE`` of entity rows whose each column of
    ``sizes`` (SQL of its old size and its new one: :func:`text_size`) changes: the room
    spent on what the row gains, an empty blob once it is spent (a row with no room keeps
    none). The room's blob takes a byte of the row's header for its size to 57 bytes, two
    beyond: a room spent below 58 bytes leaves the row a byte smaller."""
    gain = " + ".join(f"{n} - {o}" for o, n in sizes)
    return f"room = CASE WHEN room IS NULL THEN NULL ELSE zeroblob(length(room) - ({gain})) END"


#: The ``SET`` of a store's ``UPDATE`` of an entity row's state: its snapshot (``?1``), count
#: (``?2``), last observation and update times (``?3``, ``?4``, coded), and the room let go.
#: A turn record's state is written once after its enter, by its close: what the close did
#: not need of the room (usually a few bytes) is left to the page. (Spent byte for byte, as
#: ``FIRST_SET`` spends it, the sizes of the four columns computed in SQL cost a close about
#: 50,000 instructions: 0.7% of a turn.)
STATE_SET: Final = (
    f"snapshot = ?1, observation_count = ?2, {set_time('last_observation_at', 3)}, "
    f"{set_time('updated_at', 4)}, room = NULL"
)

#: The ``SET`` of an ``UPDATE`` of an entity row's first fields (``?1``), its room spent.
FIRST_SET: Final = "first_fields = ?1, " + spend_sql((text_size("first_fields"), text_size("?1")))


def room_for(entity_type: str, fields: Mapping[str, Any], moved: str | None) -> bytes | None:
    """The room a new row keeps: a turn record written open (its enter), the room of its
    close (``moved``: its snapshot's fields as stored when the close moves them to
    ``first_fields``, else None), the close held in the row; any other row, none."""
    if entity_type != _TURN or fields.get("status") != "open":
        return None
    return _room_bytes(record_size(moved) - 1 + CLOSE_GROWTH + _HELD)
