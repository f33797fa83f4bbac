"""The name of a decoded JSON value's type, as JavaScript's validators (Zod) say it."""

from __future__ import annotations

__all__ = ["json_type"]


def json_type(value: object) -> str:
    """``null``, ``boolean``, ``number``, ``string``, ``array`` or ``object`` (anything else)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
