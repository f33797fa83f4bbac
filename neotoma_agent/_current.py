"""``current_turn()``: the turn whose body runs in this context.

A framework hook often gets only a tool's name and arguments, not the turn; a context
variable hands it over, as ``structlog.contextvars`` does for the turn's log fields. Asyncio
and trio copy the context into a task when it starts, so tasks the body starts see the turn.
The variable lives in ``_turn``, beside the one thing that sets it (this module reads it).
"""

from __future__ import annotations

from ._turn import CURRENT_TURN, Turn

__all__ = ["current_turn"]


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
    return CURRENT_TURN.get()
