"""Schema version 16's step: the protocol records' fields rewritten in the field codec.

Every ``conversation_message`` and ``conversation_turn`` row's snapshot "f", and its
``first_fields``, are written again as :mod:`._codec` codes them (where decoding gives
them back exactly; any other stays as it was), in the migration's one transaction.
Nothing else changes: every reader takes both forms.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Final

from ._codec import CODED_TYPES, encode_fields, recode_doc
from ._type_index import type_in

__all__ = ["FIELD_CODEC", "code_fields"]

FIELD_CODEC: Final = """
-- version 16: the protocol records' fields in a positional codec (_codec)
"""


def _first_fields(text: str | None, entity_type: str, name: str | None) -> str | None:
    if text is None or not text.startswith("{"):
        return text
    return encode_fields(entity_type, json.loads(text), text, name)


def code_fields(conn: sqlite3.Connection) -> None:
    """Each coded type's rows' snapshot "f" and ``first_fields`` in the codec."""
    conn.create_function("codec_doc", 3, recode_doc, deterministic=True)
    conn.create_function("codec_first", 3, _first_fields, deterministic=True)
    where, codes = type_in(sorted(CODED_TYPES))
    conn.execute(
        "UPDATE entities SET snapshot = codec_doc(snapshot, entity_type, canonical_name), "
        f"first_fields = codec_first(first_fields, entity_type, canonical_name) WHERE {where}",
        codes,
    )
