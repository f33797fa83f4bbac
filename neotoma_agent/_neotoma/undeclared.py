"""Fields an entity's type does not declare: named, with the declared one they may mean.

A store (embedded or a real server) keeps an undeclared field on the observation only, so
it never reaches the snapshot, retrieval or the context block. ``remember`` says so at the
call, from the schema table every backend shares (:mod:`neotoma_agent._neotoma.schema_table`).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType

from ..exceptions import UndeclaredFieldWarning
from .identity import schema_for

__all__ = ["expect_undeclared_fields", "undeclared_fields", "warn_undeclared"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# Set while the library itself remembers fields it keeps on the observation on purpose (an
# integration's record of an event): the warning is for an application's mistakes. A
# context variable, so one task's call never silences another's.
_ON_PURPOSE: ContextVar[bool] = ContextVar("neotoma_undeclared_on_purpose", default=False)

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
    if _ON_PURPOSE.get():
        return
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


@contextmanager
def expect_undeclared_fields() -> Iterator[None]:
    """Within this block, ``remember`` stores fields its type does not declare without an
    :class:`~neotoma_agent.UndeclaredFieldWarning`.

    For fields kept on the observation on purpose (no store puts them in the snapshot).
    Unlike ``warnings.catch_warnings()``, it is safe with tasks and threads: it silences
    only the calls made inside the block (and in tasks started there), not other tasks'::

        with expect_undeclared_fields():
            await memory.remember("context_event", event="compact", trigger="auto")
    """
    token = _ON_PURPOSE.set(True)
    try:
        yield
    finally:
        _ON_PURPOSE.reset(token)
