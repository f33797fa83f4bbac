"""Hypothesis strategies for plain JSON values (what tool arguments and results may be, what
a store answers), for the property tests that need them."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: the largest integer JavaScript keeps exactly (what a real server's JSON keeps)
SAFE_INT = 2**53 - 1

#: JSON's scalars, integers within what JavaScript keeps, finite floats, any text
SCALARS: st.SearchStrategy[Any] = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE_INT, SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)


def json_values(
    scalars: st.SearchStrategy[Any] = SCALARS,
    keys: st.SearchStrategy[str] | None = None,
    *,
    size: int = 4,
    max_leaves: int = 20,
) -> st.SearchStrategy[Any]:
    """Nested lists and objects (at most ``size`` items each) of ``scalars``, object keys
    from ``keys`` (any text by default)."""
    key = st.text() if keys is None else keys
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=size) | st.dictionaries(key, inner, max_size=size),
        max_leaves=max_leaves,
    )
