"""A search query as plain text: its words and phrases, and how text is matched against them.

A query is never a query language: every character is either part of a word or separates
words, and a pair of double quotes makes the words between them a phrase (the words in that
order, next to each other). ``*``, ``-``, ``:``, parentheses, ``NEAR``, ``AND``, ``OR``, NUL
are separators or plain words; an unpaired quote runs to the end of the query. A word is a run
of letters and digits; matching is whole-word, case- and accent-insensitive.

:func:`parse_query` gives the phrases (a lone word is a phrase of one word);
:func:`fts_query` writes them as an SQLite FTS5 query that can hold no operator (each
phrase in double quotes, made only of letters, digits and their marks); :func:`words` and
:func:`matches` are the same rule in Python, for a store that has no such index (a real
Neotoma server's substring search is narrowed to whole words with them).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._records.payloads import BOOKKEEPING_TYPES
from ..exceptions import EmptySearchQueryError

__all__ = [
    "ENTITY_KIND",
    "MAX_HITS",
    "MESSAGE_KIND",
    "MESSAGE_TYPE",
    "Phrase",
    "check_search",
    "doc_text",
    "fold",
    "fts_query",
    "matches",
    "parse_query",
    "words",
]

#: the entity type whose text is a message's
MESSAGE_TYPE: Final = "conversation_message"
#: the two kinds of hit, as a search's JSON names them (``SearchHitKind``'s values)
MESSAGE_KIND: Final = "message"
ENTITY_KIND: Final = "entity"


def doc_text(entity_type: str, fields: Mapping[str, Any]) -> str | None:
    """What a search looks at in an entity with these snapshot ``fields`` (``None``: nothing).

    A message: its ``content``; an entity of a type the turn protocol does not write: its
    non-blank text fields, one a line, in snapshot order; the protocol's other types (the
    conversation, turn records, tool calls): nothing.
    """
    if entity_type == MESSAGE_TYPE:
        content = fields.get("content")
        return content if isinstance(content, str) and content.strip() else None
    if entity_type in BOOKKEEPING_TYPES:
        return None
    values = [
        v for k, v in fields.items() if isinstance(v, str) and v.strip() and not k.startswith("_")
    ]
    return "\n".join(values) if values else None


#: a phrase: its words in order
Phrase = tuple[str, ...]

# A word: letters and digits (Python's ``isalnum``, as FTS5's unicode61 tokenizer takes
# the L* and N* categories) and the combining marks on them (unicode61 keeps a mark in its
# word, then drops it); everything else separates words.
_ASCII_WORD: Final = re.compile(r"[^\W_]+")


def _split(text: str) -> list[str]:
    """The words of ``text`` as written."""
    if text.isascii():
        return _ASCII_WORD.findall(text)
    found: list[str] = []
    current: list[str] = []
    for char in (*text, " "):
        if char.isalnum() or unicodedata.category(char)[0] == "M":
            current.append(char)
        elif current:
            if any(c.isalnum() for c in current):  # marks alone are no word
                found.append("".join(current))
            current.clear()
    return found


def _check(query: object) -> str:
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    if not query.strip():
        raise EmptySearchQueryError("query is empty: give at least one word to search for")
    return query


#: the most hits one search may ask for
MAX_HITS: Final = 100


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def check_search(query: object, limit: object) -> str:
    """Refuse a search's arguments before any I/O: a query that is no text or is blank
    (:class:`EmptySearchQueryError`), a ``limit`` outside 1–:data:`MAX_HITS`. The query to
    send: a lone surrogate (which separates words, and which no request can carry) as
    U+FFFD, a separator too, so a query of surrogates alone stays a query of no words (it
    finds nothing) rather than turning blank."""
    text = _check(query)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_HITS:
        raise ValueError(f"limit must be between 1 and {MAX_HITS}, not {limit}")
    return _SURROGATE.sub("\ufffd", text)


def parse_query(query: str) -> tuple[Phrase, ...]:
    """The distinct phrases of ``query``, in order; :class:`EmptySearchQueryError` for an
    empty or blank query. A query of separators only (``"***"``) has none, and finds nothing.
    """
    parts = _check(query).split('"')
    out: dict[Phrase, None] = {}
    for index, part in enumerate(parts):
        found = tuple(_split(part))
        if index % 2:  # between quotes (or after an unpaired one): one phrase
            if found:
                out[found] = None
        else:
            out.update(dict.fromkeys((w,) for w in found))
    return tuple(out)


def fts_query(phrases: Sequence[Phrase]) -> str:
    """The FTS5 query that matches a text holding every phrase (words only: no operator)."""
    return " ".join('"' + " ".join(p) + '"' for p in phrases)


def fold(word: str) -> str:
    """A word as matching compares it: lower case, accents removed."""
    if word.isascii():
        return word.lower()
    decomposed = unicodedata.normalize("NFD", word)
    return "".join(c for c in decomposed if unicodedata.category(c)[0] != "M").lower()


def words(text: str) -> list[str]:
    """The folded words of ``text``, in order."""
    return [fold(w) for w in _split(text)]


def _positions(folded: Sequence[str], phrase: Phrase) -> int:
    n = len(phrase)
    return sum(1 for i in range(len(folded) - n + 1) if tuple(folded[i : i + n]) == phrase)


def matches(text_words: Sequence[str], phrases: Sequence[Phrase]) -> list[int]:
    """How often each phrase (folded) occurs in ``text_words``; a 0 means no match."""
    return [_positions(text_words, tuple(fold(w) for w in p)) for p in phrases]
