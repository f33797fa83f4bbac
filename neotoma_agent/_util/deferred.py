"""Fields of a frozen record computed on first read: what most readers never look at.

A history page carries each earlier turn's tool calls, and every turn reads the last few
turns' pages; yet a turn rarely reads ``HistoryTurn.tools`` (nor the page's
``RecentConversation.tool_calls``). Building those records eagerly was most of what a call
cost the library. So such a field's slot is left empty when the record is built, with the
function that computes it; the first read computes it, stores it in the slot and drops the
function. Every later read, ``==``, ``hash``, ``repr``, :func:`attrs.asdict`,
:func:`attrs.evolve`, pickling and copying see an ordinary field with the same value, so
the record's type, fields and values are exactly those of an eager one.

This is the mechanism attrs itself uses for ``functools.cached_property`` on slotted
classes (an empty slot, and ``__getattr__``, which Python calls only when the slot is
empty), applied to a field. ``__getattr__`` is hidden from type checkers, so a misspelt
attribute of these records is still a type error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["Deferring", "defer"]

_R = TypeVar("_R", bound="Deferring")


class Deferring:
    """Base of a frozen slotted attrs record whose instances may defer fields (see
    :func:`defer`). It adds one slot (outside the record's attrs fields, so the fields,
    ``asdict`` and equality are untouched): the pending functions, by field name."""

    __slots__ = ("_pending",)

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # Called only when normal lookup failed: here, an empty slot of a deferred field.
            try:
                pending = object.__getattribute__(self, "_pending")
            except AttributeError:
                pending = {}  # nothing deferred
            compute = pending.get(name)
            if compute is None:
                # Not deferred, or another thread has just filled it (then this reads it).
                return object.__getattribute__(self, name)
            value = compute()  # should it raise, the field stays deferred
            object.__setattr__(self, name, value)
            pending.pop(name, None)  # what it read (a page) is no longer held
            return value


def defer(record: _R, name: str, compute: Callable[[], Any]) -> _R:
    """``record`` with field ``name`` left to ``compute()`` on its first read (``record``
    was just built, with any placeholder value for it; returned for chaining).

    ``compute`` must be pure and cheap to keep: it may run in any thread that reads the
    field first (two threads reading at once may both run it, and store equal values).
    """
    try:
        pending = object.__getattribute__(record, "_pending")
    except AttributeError:
        pending = {}
        object.__setattr__(record, "_pending", pending)
    object.__delattr__(record, name)
    pending[name] = compute
    return record
