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
from typing import Any, Final, cast

from ..exceptions import ValidationError

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
    ``TypeError`` / ``ValueError`` / :class:`ValidationError`, quoting no content.

    The result is a copy (new lists and dicts): changing ``value`` afterwards changes
    nothing already checked. Tuples become lists.
    """
    try:
        return _fast(name, value, 0)
    except _Unusual:
        pass
    # Something the fast walk does not handle (a tuple, a subclass, a surrogate pair, a
    # refusal): the full walk from the top, which gives the same value or error as ever
    # (raised here, not inside the except: no _Unusual chained to it).
    return _plain(name, value, 0)


class _Unusual(Exception):
    """Raised by the fast walk to hand a value to the full one."""


# The exact types the fast walk passes through as they are (bool and int subclasses, e.g.
# enums, go the full way: it keeps them as given).
_AS_IS: Final = frozenset({int, bool, type(None)})
_isfinite: Final = math.isfinite


def _fast(name: str, value: object, depth: int) -> Any:
    # The common case at a fraction of the full walk's cost (one call per container, not
    # per value; exact types; ASCII text needs no surrogate test). Any deviation hands the
    # whole value to the full walk, so errors and results are exactly its own.
    kind = type(value)
    if kind is dict:
        if depth >= MAX_DEPTH:
            raise _Unusual
        out: dict[str, Any] = {}
        for key, item in cast("dict[Any, Any]", value).items():
            if type(key) is not str or not (key.isascii() or is_storable(key)):
                raise _Unusual
            of = type(item)
            if of is str:
                if not (item.isascii() or is_storable(item)):
                    raise _Unusual
                out[key] = item
            elif of in _AS_IS or (of is float and _isfinite(item)):
                out[key] = item
            else:
                out[key] = _fast(name, item, depth + 1)
        return out
    if kind is list:
        if depth >= MAX_DEPTH:
            raise _Unusual
        items: list[Any] = []
        append = items.append
        for item in cast("list[Any]", value):
            of = type(item)
            if of is str:
                if not (item.isascii() or is_storable(item)):
                    raise _Unusual
                append(item)
            elif of in _AS_IS or (of is float and _isfinite(item)):
                append(item)
            else:
                append(_fast(name, item, depth + 1))
        return items
    if kind is str:
        text = cast(str, value)
        if not (text.isascii() or is_storable(text)):
            raise _Unusual
        return text
    if kind in _AS_IS or (kind is float and _isfinite(cast(float, value))):
        return value
    raise _Unusual


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
