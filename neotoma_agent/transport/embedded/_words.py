"""The words an observation row repeats, stored as small integer codes (schema version 4).

Part of the file format: ``_rows`` re-exports ``encode_word`` and ``decode_word`` beside
the other compact columns.
"""

from __future__ import annotations

__all__ = ["WORDS", "decode_word", "encode_word"]

# The words an observation row repeats (its entity type, observation source, identity basis
# and rule) are stored as their index in this tuple, any other text as it is. It is part of
# the file format: append only, never reorder.
WORDS = (
    "conversation",
    "conversation_message",
    "conversation_turn",
    "person",
    "company",
    "contact",
    "task",
    "note",
    "human",
    "import",
    "llm_summary",
    "sensor",
    "sync",
    "workflow_state",
    "schema_rule",
    "heuristic_name",
    "heuristic_fallback",
    "target_id",
    "composite:conversation_id",
    "composite:session_id",
    "composite:turn_key",
    "composite:session_id+turn_id",
    "name_key:name",
    "name_key:canonical_name",
    "name_key:email",
)
_WORD_CODES = {word: code for code, word in enumerate(WORDS)}


def encode_word(value: str | None) -> str | int | None:
    return None if value is None else _WORD_CODES.get(value, value)


def decode_word(value: str | int | None) -> str | None:
    return WORDS[value] if isinstance(value, int) else value
