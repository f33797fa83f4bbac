"""``forward``: a read-only attribute of a sync wrapper that reads its async object's own.

The sync facade restates many read-only attributes of the async object it wraps
(``SyncTurn.state`` is ``Turn.state``). Each is one line in the wrapper's class body,
annotated with its type and followed by its docstring (what type checkers and the API
reference read)::

    state: TurnState = forward("_turn", Turn)
    \"\"\"The turn's current state.\"\"\"

At run time the attribute reads ``self._turn.state``; it cannot be assigned, and
``help()`` shows the wrapped attribute's docstring.
"""

from __future__ import annotations

from typing import Any

__all__ = ["forward"]


class _Forward:
    """A data descriptor: ``obj.name`` is ``getattr(getattr(obj, via), name)``."""

    def __init__(self, via: str, source: type) -> None:
        self._via = via
        self._source = source
        self._name = ""
        self.__doc__ = None

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        wrapped = getattr(self._source, name)  # a misspelt name fails at import
        self.__doc__ = f"As :attr:`{self._source.__name__}.{name}`: {wrapped.__doc__ or ''}"

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self._via), self._name)

    def __set__(self, obj: object, value: object) -> None:
        raise AttributeError(f"{type(obj).__name__}.{self._name} is read-only")


def forward(via: str, source: type) -> Any:
    """A read-only attribute forwarded to the same-named attribute of ``getattr(self, via)``
    (an instance of ``source``); its type is the annotation it is assigned to."""
    return _Forward(via, source)
