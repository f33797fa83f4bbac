"""check_plain's fast walk gives exactly what the full walk gives: the same value (a copy,
tuples as lists, surrogate pairs joined) or the same error, for any value at all."""

from __future__ import annotations

import enum
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neotoma_agent._records.text import MAX_DEPTH, _plain, check_plain


class Colour(enum.IntEnum):
    RED = 1


class Text(str):
    pass


# Any code point (lone surrogates and pairs too: st.text() would drop them).
_CHARS = st.one_of(
    st.characters(codec=None, categories=None),
    st.sampled_from(["\ud83d", "\ude00", "\udfff", "\x00", "\u202e", "é", "🙂"]),
)
_TEXT = st.lists(_CHARS, max_size=12).map("".join) | st.text(max_size=12)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities included
    _TEXT,
    st.sampled_from([Colour.RED, Text("sub"), b"bytes", {1, 2}, object()]),
)
_KEYS = _TEXT | st.sampled_from([1, None, 2.5, True, Text("k")])
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=25,
)


def _outcome(value: Any, walk: Any) -> tuple[str, Any]:
    try:
        return "value", walk("v", value)
    except Exception as exc:  # TypeError, ValueError, ValidationError
        return type(exc).__name__, str(exc)


def _shape(value: Any) -> Any:
    # The value with every type spelled out (== alone takes 1 == True == 1.0, [] == ()).
    if isinstance(value, dict):
        return ("dict", [(type(k), _shape(k), _shape(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value), value)


def _same(value: Any) -> None:
    fast, full = _outcome(value, check_plain), _outcome(value, lambda n, v: _plain(n, v, 0))
    assert fast[0] == full[0]
    if fast[0] == "value":
        assert _shape(fast[1]) == _shape(full[1])
    else:
        assert fast[1] == full[1]


@settings(max_examples=150)
@given(value=_VALUES)
def test_the_fast_walk_agrees_with_the_full_one(value: Any) -> None:
    _same(value)


def _nested(levels: int, inner: Any, kind: str) -> Any:
    value = inner
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize("kind", ["list", "dict"])
@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2])
@pytest.mark.parametrize("inner", [1, "x", [], {}])
def test_depth_at_the_limit_agrees(kind: str, levels: int, inner: Any) -> None:
    _same(_nested(levels, inner, kind))


def test_the_result_is_a_copy() -> None:
    given_value = {"rows": [{"id": 1}], "tags": ["a"]}
    checked = check_plain("v", given_value)
    given_value["rows"][0]["id"] = 2
    given_value["tags"].append("b")
    assert checked == {"rows": [{"id": 1}], "tags": ["a"]}


def test_a_cycle_is_refused_as_too_deep() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nests deeper"):
        check_plain("v", loop)
