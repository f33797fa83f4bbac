"""Argument checks the public API shares: one wording for one rule.

Each ``check_*`` takes the value and the argument's name, returns the value, and raises a
``ValueError`` naming the argument. :func:`validator` makes an attrs validator of one (the
name is the field's ``__init__`` argument), so settings records declare their checks as
``attrs.field(validator=validator(check_positive_int))`` (:func:`checked_by` for a check
that names its argument itself).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

__all__ = [
    "check_count",
    "check_fraction",
    "check_non_negative",
    "check_optional_count",
    "check_positive",
    "check_positive_int",
    "check_seconds",
    "checked_by",
    "validator",
]

_Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def validator(check: Callable[..., object], **options: Any) -> _Validator:
    """An attrs validator running ``check(value, name, **options)`` on a field."""

    def run(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check(value, attribute.alias or attribute.name, **options)

    return run


def checked_by(check: Callable[[Any], object]) -> _Validator:
    """An attrs validator running ``check(value)``, a check that names its argument itself
    (the id checks of ``_records.keys``)."""

    def run(_instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
        check(value)

    return run


def check_count(value: object, name: str) -> int:
    """``value`` if it is an ``int >= 0`` (not a bool), else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {_shown(value)}")
    return value


def check_optional_count(value: object, name: str) -> int | None:
    """:func:`check_count` that also lets ``None`` through."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0 or None, got {_shown(value)}")
    return value


def check_positive_int(value: object, name: str) -> int:
    """``value`` if it is an ``int >= 1`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {_shown(value)}")
    return value


def check_positive(value: object, name: str) -> float:
    """``value`` if it is a number ``> 0`` (``inf`` included, NaN refused)."""
    # `not value > 0` also refuses NaN.
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be > 0, got {_shown(value)}")
    return value


def check_non_negative(value: object, name: str) -> float:
    """``value`` if it is a number ``>= 0`` (NaN refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {_shown(value)}")
    return value


def check_fraction(value: object, name: str) -> float:
    """``value`` if it is a number in ``[0, 1]`` (NaN refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {_shown(value)}")
    return value


def check_seconds(
    value: object, name: str, *, optional: bool = False, finite: bool = False
) -> float | None:
    """``value`` if it is a positive number of seconds (``None`` too when ``optional``).

    ``finite`` refuses ``inf``: a deadline a shielded cleanup runs under must end.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {_shown(value)}")
    if finite and math.isinf(value):
        raise ValueError(f"{name} must be finite")
    return value


def _shown(value: object) -> str:
    # Numbers are shown; anything else only by type, as a mistaken argument may be content.
    return repr(value) if isinstance(value, int | float) else f"a {type(value).__name__}"
