"""``current_turn()``: the turn whose body runs in this context.

A framework hook often gets only a tool's name and arguments, not the turn; a context
variable hands it over, as ``structlog.contextvars`` does for the turn's log fields. Asyncio
and trio copy the context into a task when it starts, so tasks the body starts see the turn.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._turn import Turn

__all__ = ["current_turn", "enter_current", "exit_current"]

_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "neotoma_agent_current_turn", default=None
)


def current_turn() -> Turn | None:
    """The :class:`~neotoma_agent.Turn` whose ``async with`` body runs in this context, else None.

    Set when the body starts, reset when the block exits (the previous value comes back, so
    nested turns nest). Tasks started inside the body see it (asyncio and trio copy the
    context into a child task when it starts); a task started before the turn, or a thread
    not started with the context (``contextvars.copy_context().run``), does not. This is
    how a framework hook that only gets a tool's arguments finds the turn to record on::

        turn = current_turn()
        if turn is not None:
            turn.record_tool("search", args=args, result=result)
    """
    turn: Turn | None = _CURRENT.get()
    return turn


def enter_current(turn: Turn) -> contextvars.Token[Any]:
    """Make ``turn`` the current one; the token resets it."""
    return _CURRENT.set(turn)


def exit_current(turn: Turn, token: contextvars.Token[Any]) -> None:
    """Restore what was current before ``turn`` (its :func:`enter_current` token)."""
    try:
        _CURRENT.reset(token)
    except ValueError:
        # Exited in another context than it was entered in (``__aexit__`` called by hand
        # from another task): clear it there rather than fail the turn's exit.
        if _CURRENT.get() is turn:
            _CURRENT.set(None)
