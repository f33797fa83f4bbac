"""The entity type index (schema version 14): an entity's type as its word code.

``entities.type_code`` is a virtual generated column (computed on read, never stored in the
row): the entity type as :func:`~._words.encode_word` codes it, by a ``CASE`` over the same
word list. The type index holds it, ``(uid, type_code, id)``: a code of a byte or two where
version 13 held the type's text (12 to 20 bytes in most rows). The row keeps its type as
text, so every read of a row answers as before; a statement that reads by type compares
``type_code`` with the code (:func:`of_type`, :func:`type_in`), which is what seeks the
index. The word list is append only (``_words``): a word appended after a file was written
is text in that file's column and a code in a statement, so appending one needs a migration
that defines the column again.
"""

from __future__ import annotations

from typing import Final

from ._words import WORDS, encode_word

__all__ = ["TYPE_CODES", "of_type", "type_in"]


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "''") + "'"


_CODE: Final = (
    "CASE entity_type "
    + " ".join(f"WHEN {_quoted(word)} THEN {code}" for code, word in enumerate(WORDS))
    + " ELSE entity_type END"
)

# The migration to version 14 (a column SQLite computes, and the index rebuilt on it).
TYPE_CODES: Final = f"""
ALTER TABLE entities ADD COLUMN type_code AS ({_CODE}) VIRTUAL;
DROP INDEX entities_by_type;
CREATE INDEX entities_by_type ON entities (uid, type_code, id);
"""


def of_type(word: str, column: str = "type_code") -> str:
    """``column = <the code of word>`` as SQL (a known type's literal)."""
    code = encode_word(word)
    return f"{column} = {code if isinstance(code, int) else _quoted(word)}"


def type_in(types: list[str] | tuple[str, ...]) -> tuple[str, list[str | int | None]]:
    """``type_code IN (?, ...)`` and its parameters: the codes of ``types``."""
    return f"type_code IN ({','.join('?' * len(types))})", [encode_word(t) for t in types]
