"""JavaScript value semantics that a Neotoma server's ids depend on.

The server hashes names and payloads as JavaScript sees them: its whitespace (``trim()``,
``\\s``), ``String(value)`` of numbers, ``JSON.stringify`` key order (array-index keys
first, then insertion order) and surrogate escaping. Reproducing them exactly is what makes
the embedded store's ids identical to a real server's; each quirk has test vectors.
"""

from __future__ import annotations

import hashlib
import json.encoder
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from .._records.text import SURROGATE_RE
from ..transport._spliced import EncodedEntity

__all__ = [
    "JS_WS_CHARS",
    "JS_WS_CLASS",
    "compact_encoder",
    "hash_uuid",
    "js_json",
    "js_key_order",
    "js_string",
    "js_trim",
    "utf16_sort_key",
]

# --------------------------------------------------------------------------
# JavaScript string primitives
# --------------------------------------------------------------------------

# The characters JavaScript's String.prototype.trim() and regex \s treat as
# whitespace. Python's str.strip()/\s differ (they include \x1c-\x1f and \x85
# but not \ufeff), which would change ids for such inputs.
JS_WS_CHARS: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
JS_WS_CLASS: Final = (
    "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
)


def js_trim(text: str) -> str:
    """``String.prototype.trim()``: JavaScript's whitespace, not Python's."""
    return text.strip(JS_WS_CHARS)


# Integers beyond 2**53 lose precision in JavaScript; the server only ever sees
# the rounded double, so format them the way JavaScript would.
_MAX_SAFE_INT: Final = 2**53
_MAX_ARRAY_INDEX: Final = 2**32 - 1


def _js_number(value: float) -> str:
    """Format a float like JavaScript's ``Number.prototype.toString()``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"  # also -0, as in JavaScript
    # repr() gives the shortest round-tripping digits, as ECMAScript requires;
    # only the layout (when to use exponents) differs.
    text = repr(abs(value))
    mantissa, _, exp_text = text.partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    all_digits = int_part + frac_part
    stripped = all_digits.lstrip("0")
    point = len(int_part) + (int(exp_text) if exp_text else 0) - (len(all_digits) - len(stripped))
    digits = stripped.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        out = "0." + "0" * -n + digits
    else:
        exp = n - 1
        sign = "+" if exp >= 0 else "-"
        head = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        out = f"{head}e{sign}{abs(exp)}"
    return "-" + out if value < 0 else out


def _js_int(value: int) -> str:
    if -_MAX_SAFE_INT < value < _MAX_SAFE_INT:
        return f"{value:d}"  # also plain digits for int subclasses (IntEnum)
    try:
        return _js_number(float(value))
    except OverflowError:  # JSON.parse turns such literals into +/-Infinity
        return "Infinity" if value > 0 else "-Infinity"


def js_string(value: Any) -> str:
    """``String(value)`` for values that came out of ``JSON.parse``."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _js_int(value)
    if isinstance(value, float):
        return _js_number(value)
    if isinstance(value, list | tuple):
        # Array.prototype.join: null/undefined elements become "".
        return ",".join("" if item is None else js_string(item) for item in value)
    if isinstance(value, Mapping):
        return "[object Object]"
    return str(value)


def _is_array_index(key: str) -> bool:
    return (
        key.isascii()
        and key.isdigit()
        and (key == "0" or key[0] != "0")
        and int(key) < _MAX_ARRAY_INDEX
    )


def js_key_order(keys: Iterable[str]) -> list[str]:
    """Property order of a JavaScript object: array-index keys ascending, then insertion order."""
    keys = list(keys)
    index_keys = [key for key in keys if _is_array_index(key)]
    if not index_keys:
        return keys
    index_keys.sort(key=int)
    return index_keys + [key for key in keys if not _is_array_index(key)]


def utf16_sort_key(key: str) -> bytes:
    # Array.prototype.sort() compares UTF-16 code units, not code points.
    return key.encode("utf-16-be", "surrogatepass")


# --------------------------------------------------------------------------
# JSON.stringify and UUID-shaped hashes
# --------------------------------------------------------------------------

_encode_str: Final = json.encoder.encode_basestring  # C-accelerated, ensure_ascii=False


def _js_json_parts(value: Any, out: list[str], active: set[int]) -> None:
    if isinstance(value, str):
        out.append(_encode_str(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        text = _js_int(value)
        if text[-1] == "y":  # "Infinity" / "-Infinity"
            raise ValueError(f"integer {value} is out of range for JSON")
        out.append(text)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not valid JSON")
        out.append(_js_number(value))
    elif isinstance(value, Mapping | list | tuple):
        marker = id(value)
        if marker in active:
            raise ValueError("circular reference in JSON value")
        active.add(marker)
        if isinstance(value, Mapping):
            for key in value:
                if not isinstance(key, str):
                    raise ValueError(f"JSON object keys must be str, got {type(key).__name__}")
            out.append("{")
            for i, key in enumerate(js_key_order(value)):
                if i:
                    out.append(",")
                out.append(_encode_str(key))
                out.append(":")
                _js_json_parts(value[key], out, active)
            out.append("}")
        else:
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(",")
                _js_json_parts(item, out, active)
            out.append("]")
        active.discard(marker)
    else:
        raise ValueError(f"{type(value).__name__} values cannot be carried by JSON")


def compact_encoder(*, allow_nan: bool, check_circular: bool) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), ...).encode``: the same
    text and errors. Without the cycle check it is built once, sparing ``encode``'s per-call
    set-up (a closure and a new C encoder per call: a tenth of a store's time); with it, or
    without the C accelerator, it is ``encode`` itself."""
    reference = json.JSONEncoder(
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=allow_nan,
        check_circular=check_circular,
    )
    make = getattr(json.encoder, "c_make_encoder", None)  # absent without the C accelerator
    if make is None:
        return reference.encode
    args = (
        reference.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        allow_nan,
    )
    if check_circular:
        # The markers of a cycle check are per call (a failed call can leave some behind),
        # and so is the C encoder that holds them: nothing to save.
        return reference.encode
    encode_str = json.encoder.encode_basestring
    try:
        shared = make(None, *args)
    except TypeError:  # the C encoder's signature changed: see below
        return reference.encode

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return encode_str(value)  # as JSONEncoder.encode
        return "".join(shared(value, 0))

    # The C encoder's arguments are the standard library's own business: should they ever
    # change, fall back rather than write different text.
    probe = {"a": [1, 2.5, None, True, "\u00e9"], "b": {"c": -0.0}}
    try:
        same = encode(probe) == reference.encode(probe)
    except Exception:  # a changed signature or behaviour: not ours to diagnose
        same = False
    return encode if same else reference.encode


_dumps_plain: Final = compact_encoder(allow_nan=False, check_circular=False)


_LEAF_TYPES: Final = frozenset((str, bool, type(None)))


def _positional(value: float) -> bool:
    """Whether ``repr(value)`` is JavaScript's ``String(value)``: a finite float that is not
    integral (``7.0`` is ``"7"`` there) and that both write without an exponent. Python's
    ``repr`` uses one below 1e-4 and from 1e16 on, JavaScript below 1e-6 and from 1e21 on;
    between, both write the shortest digits that round-trip, positionally."""
    return 1e-4 <= abs(value) < 1e16 and not value.is_integer()


def _is_plain(value: Any, depth: int) -> bool:
    """True for strings, safe ints, bools, None, positional floats (see
    :func:`_positional`), lists and dicts whose keys are no array indexes: the values whose
    JSON is the same from Python and from JavaScript.

    Iterative (every stored payload goes through it): a stack of containers instead of a
    call per value.
    """
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        kind = type(item)
        if kind in _LEAF_TYPES:
            continue
        if kind is int:
            if not -_MAX_SAFE_INT < item < _MAX_SAFE_INT:
                return False
            continue
        if kind is float:
            if not _positional(item):
                return False
            continue
        if level > 64:  # deep or circular: let the careful path decide
            return False
        if kind is dict or kind is EncodedEntity:
            for key, child in item.items():
                if type(key) is not str or key[:1].isdigit():
                    return False
                child_kind = type(child)
                if child_kind in _LEAF_TYPES:
                    continue
                if child_kind is int:  # decided here: a turn number is in most payloads
                    if not -_MAX_SAFE_INT < child < _MAX_SAFE_INT:
                        return False
                    continue
                if child_kind is float:  # and a duration in every tool call
                    if not _positional(child):
                        return False
                    continue
                stack.append((child, level + 1))
        elif kind is list:
            stack.extend((child, level + 1) for child in item)
        else:
            return False
    return True


def js_json(value: Any) -> str:
    """Serialize ``value`` exactly as JavaScript's ``JSON.stringify`` would.

    The value is taken as what the server holds after ``JSON.parse``: compact
    separators, non-ASCII characters kept, integral floats written as integers
    (``7.0`` -> ``7``), other numbers in JavaScript's shortest form (``1e+21``,
    ``1.5e-7``; integers beyond 2**53 rounded to the nearest double), lone
    surrogates escaped, and keys in insertion order except that array-index
    keys (``"0"``, ``"12"``) come first in ascending order, as JavaScript
    objects order them. Lists and tuples become arrays.

    Raises:
        ValueError: for NaN/Infinity, non-str keys, circular references and
            values JSON cannot carry (sets, bytes, arbitrary objects).
    """
    if _is_plain(value, 0):
        # Fast path: nothing here serialises differently in JavaScript, so the C encoder
        # gives the same text (stores hash every payload; this is on the hot path).
        kept = value.json if type(value) is EncodedEntity else None
        # An element that kept its JSON (a tool call's): that text, by the same encoder.
        text = _dumps_plain(value) if kept is None else kept
    else:
        out: list[str] = []
        _js_json_parts(value, out, set())
        text = "".join(out)
    # isascii() reads a flag of the string: most payloads need no search for surrogates.
    if not text.isascii() and SURROGATE_RE.search(text):
        text = SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def hash_uuid(text: str) -> str:
    """Neotoma's UUID-shaped id: sha256 hex of ``text`` laid out 8-4-4-4-12.

    Used for source ids (``"source:<user_id>:<content_hash>"``) and
    observation ids; the result is not an RFC 4122 UUID (no version bits).
    """
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
