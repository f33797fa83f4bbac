"""The entity type as its word code (schema version 14), in the entity row and its index.

``entities.type_code`` holds the entity type as :func:`~._words.encode_word` codes it (a
byte or none for a known type, the text for any other), and ``entities.entity_type`` is a
virtual generated column (computed on read, never stored) giving the text back by a
``CASE`` over the same word list: every statement that reads a row's type reads it as
before. The type index holds ``(uid, type_code, id)``: a statement that reads by type
compares ``type_code`` with the code (:func:`of_type`, :func:`type_in`), which is what
seeks the index; a row is written with its code. The word list is append only
(``_words``): a word appended after a file was written is text in that file's rows and a
code in a statement, so appending one needs a migration that rewrites those rows.
"""

from __future__ import annotations

from typing import Final

from ._words import WORDS, encode_word

__all__ = ["TYPE_CODES", "WORD_SQL", "of_type", "type_in"]


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "''") + "'"


_CODE: Final = (
    "CASE entity_type "
    + " ".join(f"WHEN {_quoted(word)} THEN {code}" for code, word in enumerate(WORDS))
    + " ELSE entity_type END"
)

#: SQL giving an entity row's type back from its ``type_code``
WORD_SQL: Final = (
    "CASE type_code "
    + " ".join(f"WHEN {code} THEN {_quoted(word)}" for code, word in enumerate(WORDS))
    + " ELSE type_code END"
)
_COLUMNS = (
    "canonical_name, aliases, created_at, updated_at, snapshot, observation_count, "
    "last_observation_at, message_count, uid, first_id, first_source, first_key, "
    "first_priority, first_osource, first_specificity, first_basis, first_rule, first_fields"
)
# The migration to version 14: the table rebuilt (rowids kept: the name and search
# indexes number their rows by them) with the code stored, and the index on it.
TYPE_CODES: Final = f"""
CREATE TABLE entities_v14 (
    id TEXT PRIMARY KEY,
    type_code NOT NULL,
    canonical_name TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '[]',
    created_at NOT NULL,
    updated_at NOT NULL,
    snapshot TEXT NOT NULL,
    observation_count INTEGER NOT NULL,
    last_observation_at,
    message_count INTEGER NOT NULL DEFAULT 0,
    uid INTEGER NOT NULL DEFAULT 0,
    first_id, first_source, first_key, first_priority INTEGER, first_osource,
    first_specificity REAL, first_basis, first_rule, first_fields TEXT,
    entity_type AS ({WORD_SQL}) VIRTUAL
);
INSERT INTO entities_v14 (rowid, id, type_code, {_COLUMNS})
    SELECT rowid, id, {_CODE}, {_COLUMNS} FROM entities ORDER BY rowid;
DROP TABLE entities;
ALTER TABLE entities_v14 RENAME TO entities;
CREATE INDEX entities_by_type ON entities (uid, type_code, id);
"""


def of_type(word: str, column: str = "type_code") -> str:
    """``column = <the code of word>`` as SQL (a known type's literal)."""
    code = encode_word(word)
    return f"{column} = {code if isinstance(code, int) else _quoted(word)}"


def type_in(types: list[str] | tuple[str, ...]) -> tuple[str, list[str | int | None]]:
    """``type_code IN (?, ...)`` and its parameters: the codes of ``types``."""
    return f"type_code IN ({','.join('?' * len(types))})", [encode_word(t) for t in types]
