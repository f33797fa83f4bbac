"""Observation and source ids as their 16 bytes (schema version 12's compact columns).

Observation and source ids are sha256 digests laid out as UUIDs: stored as their 16 bytes;
an id that is not a UUID is stored as its text, so decoding never guesses. ``_rows``
re-exports both beside the other compact columns; ``_row_metas`` codes a snapshot's metas'
ids with them. An observation's id is derived here too (:func:`observation_id`).
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["decode_id", "encode_id", "hash_id", "observation_id"]

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


def observation_id(source_id: str | None, entity_id: str, fields_json: str) -> tuple[str, bytes]:
    """The server's id of an observation of ``fields_json`` (the fields' JSON, keys in
    their order) on ``entity_id`` from ``source_id``, and its 16 bytes (``encode_id`` of
    it), from one digest."""
    # A hash of this exact JSON. Both ids are hex digests with fixed prefixes and dashes:
    # quoting is their JSON.
    text = (
        '{"source_id":'
        + ("null" if source_id is None else f'"{source_id}"')
        + ',"interpretation_id":"none","entity_id":"'
        + entity_id
        + '","fields":'
        + fields_json
        + "}"
    )
    return hash_id(text)


def hash_id(text: str) -> tuple[str, bytes]:
    """``hash_uuid`` of ``text`` and its 16 bytes (``encode_id`` of it), from one digest."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    h = digest[:16].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", digest[:16]
