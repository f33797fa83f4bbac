"""The wall clock as the store's records write it: Unix milliseconds, and their ISO text.

Its own module (``_records.tools`` re-exports both): the closing and opening payloads read the clock
without the tool-call API's classes, which a hook opening a turn does not need.
"""

from __future__ import annotations

import time
from typing import Final

__all__ = ["iso_ms", "now_ms"]


def now_ms() -> int:
    """The wall clock in Unix milliseconds (UTC)."""
    return time.time_ns() // 1_000_000


# Seconds formatted lately (a turn's calls fall in few seconds; strftime is the cost), and
# how many are kept: calls moved past a busy millisecond can run ahead of the clock.
_seconds: dict[int, str] = {}
_KEPT_SECONDS: Final = 64


def iso_ms(ms: int) -> str:
    """Unix milliseconds as ISO 8601 UTC with milliseconds: ``2026-12-01T22:18:05.123Z``."""
    second, milli = divmod(ms, 1000)
    text = _seconds.get(second)
    if text is None:
        if len(_seconds) >= _KEPT_SECONDS:
            _seconds.clear()
        text = _seconds[second] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{text}.{milli:03d}Z"
