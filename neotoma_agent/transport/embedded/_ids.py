"""Observation and source ids as their 16 bytes (schema version 12's compact columns).

Observation and source ids are sha256 digests laid out as UUIDs: stored as their 16 bytes;
an id that is not a UUID is stored as its text, so decoding never guesses. ``_rows``
re-exports both beside the other compact columns; ``_row_metas`` codes a snapshot's metas'
ids with them.
"""

from __future__ import annotations

import re

__all__ = ["decode_id", "encode_id"]

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def encode_id(value: str | None) -> str | bytes | None:
    if value is None or not _UUID_RE.fullmatch(value):
        return value
    return bytes.fromhex(value.replace("-", ""))


def decode_id(value: str | bytes | None) -> str | None:
    if not isinstance(value, bytes):
        return value
    h = value.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
