"""Text and values a store can hold, checked at the library's boundary.

Values are plain JSON (``None``, ``bool``, ``int``, finite ``float``, ``str``, lists, and
objects with ``str`` keys, at most 100 levels deep, as a server accepts). Text is
well-formed Unicode:

A Python ``str`` may hold lone UTF-16 surrogates (``"x\\udfff"``, what a JSON stream cut
mid-emoji or a careless decoder gives); UTF-8, SQLite and a Neotoma server cannot store them.
They are refused where text enters the library, with a typed error that quotes no content, so
nothing half-written reaches a store. A surrogate *pair* (``"\\ud83d\\ude00"``) is the one
character it encodes and is stored as that character.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from .exceptions import ValidationError

__all__ = ["MAX_DEPTH", "SURROGATE_RE", "check_plain", "check_text", "is_storable", "split_pending"]

#: Any UTF-16 surrogate code point (a str holds them only when half-decoded).
SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")
_HIGH: Final = range(0xD800, 0xDC00)


def is_storable(text: str) -> bool:
    """True when ``text`` holds no surrogate, so UTF-8 (and SQLite) can store it as it is."""
    if text.isascii():
        return True
    # Encoding is the fastest test (a regex search is several times slower); the error,
    # which quotes the text, is dropped.
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _join_pairs(text: str) -> str:
    # UTF-16 round trip: pairs become their character, lone surrogates stay as they are.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _refuse(name: str, text: str, index: int) -> ValidationError:
    return ValidationError(
        f"{name} is not storable text: a lone UTF-16 surrogate U+{ord(text[index]):04X} at "
        f"index {index} (well-formed Unicode only; pair surrogates or decode with errors=)",
        status=400,
        code="INVALID_TEXT",
    )


def split_pending(name: str, text: str) -> tuple[str, str]:
    """``(storable, pending)``: ``text`` with pairs joined, and a trailing high surrogate.

    A stream cut mid-character ends with the first half of a pair; ``pending`` holds it for
    the next chunk. Any other lone surrogate raises :class:`ValidationError`.
    """
    if is_storable(text):
        return text, ""
    joined = _join_pairs(text)
    pending = ""
    if ord(joined[-1]) in _HIGH:
        joined, pending = joined[:-1], joined[-1]
    found = SURROGATE_RE.search(joined)
    if found is not None:
        raise _refuse(name, joined, found.start())
    return joined, pending


def check_text(name: str, value: object) -> str:
    """Return ``value`` as storable text (pairs joined) or raise ``TypeError`` /
    :class:`ValidationError` before any I/O."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    text, pending = split_pending(name, value)
    if pending:
        raise _refuse(name, value, len(value) - 1)
    return text


#: How deep a value may nest (a server refuses deeper JSON).
MAX_DEPTH: Final = 100


def check_plain(name: str, value: object) -> Any:
    """Return ``value`` (text pairs joined) if it is plain, storable JSON, else raise
    ``TypeError`` / ``ValueError`` / :class:`ValidationError`, quoting no content."""
    return _plain(name, value, 0)


def _plain(name: str, value: object, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError(f"{name} nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number (JSON has no NaN or Infinity)")
        return value
    if isinstance(value, str):
        return check_text(name, value)
    if isinstance(value, (list, tuple)):
        return [_plain(name, v, depth + 1) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{name} has a key that is not a str ({type(key).__name__})")
            # Paths are left out of messages: keys of arbitrary objects can be content.
            out[check_text(f"a key of {name}", key)] = _plain(name, v, depth + 1)
        return out
    raise TypeError(f"{name} is not plain JSON ({type(value).__name__})")
