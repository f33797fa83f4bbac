"""Fields an entity's type does not declare: named, with the declared one they may mean.

A store (embedded or a real server) keeps an undeclared field on the observation only, so
it never reaches the snapshot, retrieval or the context block. ``remember`` says so at the
call, from the schema table every backend shares (:mod:`neotoma_agent._schema_table`).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from types import FrameType

from ._identity import schema_for
from .exceptions import UndeclaredFieldWarning

__all__ = ["undeclared_fields", "warn_undeclared"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep

# How close a declared field must be to be offered as the one meant (`note` -> `notes`).
_CUTOFF = 0.7


def undeclared_fields(
    entity_type: str, fields: Iterable[str]
) -> tuple[tuple[str, str | None], ...]:
    """Each field ``entity_type`` does not declare, with its closest declared field (or None).

    A type without a schema keeps every field: nothing is undeclared.
    """
    schema = schema_for(entity_type)
    if schema is None or schema.fields is None:
        return ()
    missing = [field for field in fields if field not in schema.fields]
    if not missing:
        return ()
    import difflib  # only for a call that has a field to name

    declared = sorted(schema.fields)
    return tuple(
        (field, next(iter(difflib.get_close_matches(field, declared, 1, _CUTOFF)), None))
        for field in missing
    )


def warn_undeclared(entity_type: str, fields: Iterable[str]) -> None:
    """Warn (:class:`UndeclaredFieldWarning`, at the application's line) when ``fields``
    hold any that ``entity_type`` does not declare."""
    missing = undeclared_fields(entity_type, fields)
    if not missing:
        return
    # Point at the first frame outside this package: the application's call, whichever of
    # remember, t.remember or the sync wing it went through.
    level = 1
    caller: FrameType | None = sys._getframe(0)
    while caller is not None and caller.f_code.co_filename.startswith(_PACKAGE):
        caller = caller.f_back
        level += 1
    warnings.warn(UndeclaredFieldWarning(entity_type, missing), stacklevel=level)
