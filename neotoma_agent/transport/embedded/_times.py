"""Times as the store keeps them: ISO 8601 text with milliseconds and "Z" as integer ms.

Part of the file format (the entity, observation and key rows' times, and the times a
protocol record's fields hold in the field codec, ``_codec``); ``_rows`` re-exports both.
A time that would not come back as the same text is kept as it is, so decoding never
guesses.
"""

from __future__ import annotations

import functools
from datetime import datetime, timezone

__all__ = ["decode_time", "encode_time"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = datetime.resolution * 1000


@functools.lru_cache(maxsize=256)  # one store stamps all its rows with one `now`
def encode_time(value: str) -> str | int:
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return value
    if at.tzinfo is None:
        return value
    ms = (at - _EPOCH) // _ONE_MS
    return ms if decode_time(ms) == value else value


@functools.lru_cache(maxsize=1024)  # rows read together were mostly written together
def decode_time(value: str | int) -> str:
    if isinstance(value, str):
        return value
    at = datetime.fromtimestamp(value / 1000, timezone.utc)
    return at.isoformat(timespec="milliseconds")[:-6] + "Z"
