"""Argument checks the public API shares (one wording for one rule)."""

from __future__ import annotations

__all__ = ["check_count", "check_optional_count"]


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


def _shown(value: object) -> str:
    # Numbers are shown; anything else only by type, as a mistaken argument may be content.
    return repr(value) if isinstance(value, int | float) else f"a {type(value).__name__}"
