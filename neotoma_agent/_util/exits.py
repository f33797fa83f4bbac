"""One exit for ``async with x:`` / ``with x:`` whose object needs only the body's exception."""

from __future__ import annotations

__all__ = ["ExitWith", "raised"]


def raised(exc_info: tuple[object, ...]) -> BaseException | None:
    """The exception of an exit's ``(exc_type, exc, tb)``: ``None`` after a clean body."""
    exc = exc_info[1] if len(exc_info) > 1 else None
    return exc if isinstance(exc, BaseException) else None


class ExitWith:
    """The exit of ``async with x:`` for an object whose exit needs only the exception.

    One signature for every such exit: a subclass writes ``_exit(exc)`` (``None`` after a
    body that raised nothing); returning lets the body's exception propagate unchanged. A
    ``with x:`` exit is ``def __exit__(self, *exc_info: object)`` over :func:`raised`.
    """

    __slots__ = ()

    async def __aexit__(self, *exc_info: object) -> None:
        await self._exit(raised(exc_info))

    async def _exit(self, exc: BaseException | None) -> None:
        raise NotImplementedError
