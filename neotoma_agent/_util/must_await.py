"""A coroutine that says so loudly when it is never awaited.

``memory.remember(...)`` stores at once, so it is async; written without ``await`` it would
store nothing, and Python's only sign is a ``RuntimeWarning`` at garbage collection that
most programs never show. :class:`MustAwait` wraps the coroutine: it is a real
``collections.abc.Coroutine`` (``await``, ``asyncio.create_task``, anyio and trio task
groups, ``asyncio.gather`` all take it), but

- used as a value (``str()``, an f-string), it raises ``TypeError`` saying to await it,
  instead of putting ``<coroutine object ...>`` into a reply;
- dropped without being awaited, it logs ``<what>.not_awaited`` at ERROR, which shows on
  stderr even when the application configured no logging (nothing was stored: data lost).
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

from .log import get_logger

__all__ = ["MustAwait"]

T = TypeVar("T")

logger = get_logger()


class MustAwait(Coroutine[Any, Any, T], Generic[T]):
    """``coro`` (the coroutine of ``what``, e.g. ``memory.remember``), loud if not awaited."""

    __slots__ = ("_coro", "_fields", "_started", "_what")

    def __init__(self, coro: Coroutine[Any, Any, T], what: str, **fields: Any) -> None:
        self._coro = coro
        self._what = what
        self._fields = fields
        self._started = False

    def __await__(self) -> Generator[Any, None, T]:
        self._started = True
        return self._coro.__await__()

    def send(self, value: Any) -> Any:
        """Coroutine protocol: forwarded (a task runs it this way)."""
        self._started = True
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Coroutine protocol: forwarded."""
        self._started = True
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        """Coroutine protocol: forwarded (a deliberate close is not a mistake)."""
        self._started = True
        self._coro.close()

    def _misuse(self) -> TypeError:
        return TypeError(
            f"{self._what}(...) is a coroutine: write `await {self._what}(...)` "
            "(without await, nothing is stored)"
        )

    def __str__(self) -> str:
        raise self._misuse()

    def __format__(self, spec: str) -> str:
        raise self._misuse()

    def __repr__(self) -> str:
        return f"<{self._what}(...) coroutine: await it>"

    def __del__(self) -> None:
        if self._started:
            return
        try:
            self._coro.close()  # no second, vaguer RuntimeWarning from the inner coroutine
            logger.error(
                f"{self._what.rsplit('.', 1)[-1]}.not_awaited",
                call=self._what,
                hint=f"write `await {self._what}(...)`: nothing was stored",
                **self._fields,
            )
        except Exception:  # interpreter shutdown: nothing left to report to
            pass
