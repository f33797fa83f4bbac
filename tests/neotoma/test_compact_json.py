"""compact_encoder: the standard library's compact JSON, the same text and the same errors."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from neotoma_agent._neotoma.js import compact_encoder

VALUES: list[Any] = [
    {"f": {"a": 1, "b": [1, 2.5, None, True, 'é \u2028 "q" \\']}, "o": [["id", 3, "t", 100, 2]]},
    [],
    {},
    "text",
    -0.0,
    10**30,
    {1: "int key", False: "bool key", None: "null key", 2.5: "float key"},
    [float("inf")],
]


@pytest.mark.parametrize("allow_nan", [True, False])
@pytest.mark.parametrize("value", VALUES)
def test_the_text_is_the_standard_encoders(value: Any, allow_nan: bool) -> None:
    reference = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan)
    fast = compact_encoder(allow_nan=allow_nan, check_circular=False)
    try:
        expected: str | type[BaseException] = reference.encode(value)
    except ValueError:
        expected = ValueError
    if expected is ValueError:
        with pytest.raises(ValueError, match="Out of range float"):
            fast(value)
    else:
        assert fast(value) == expected


def test_values_json_cannot_carry_raise_the_same_type_error() -> None:
    fast = compact_encoder(allow_nan=True, check_circular=False)
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        fast({"x": {1, 2}})


def test_with_the_cycle_check_a_cycle_is_refused() -> None:
    checked = compact_encoder(allow_nan=True, check_circular=True)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        checked(loop)
    assert checked([math.pi]) == json.dumps([math.pi], separators=(",", ":"))
