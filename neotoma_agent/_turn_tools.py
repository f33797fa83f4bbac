"""The tool-call part of :class:`~neotoma_agent.Turn` (a mixin: ``Turn`` holds the state).

Kept apart so that ``_turn`` stays the turn's life cycle; the records, their checks and what
is stored are in :mod:`neotoma_agent._records.tools`.
"""

from __future__ import annotations

from typing import Any

from ._records.tools import ActiveToolCall, ToolCall, ToolLog
from ._util.signature import args_of

__all__ = ["TurnTools"]


class TurnTools:
    """``t.tool``, ``t.record_tool``, ``t.tools`` and ``t.model`` of a turn."""

    __slots__ = ()

    # Turn's own state, which these methods read.
    _model: str | None
    _tools: ToolLog

    def _require_open(self, action: str) -> None:
        raise NotImplementedError  # Turn's

    @property
    def model(self) -> str | None:
        """The model the caller named (``memory.turn(..., model=...)``), if any."""
        return self._model

    @property
    def tools(self) -> tuple[ToolCall, ...]:
        """The tool calls recorded so far, ordered by ``invoked_at``."""
        return self._tools.calls

    def tool(self, name: str, args: Any = None, *, call_id: str | None = None) -> ActiveToolCall:
        """Time and record one tool call: ``async with t.tool(name, args) as call:`` (or ``with``).

        Set ``call.result`` in the body. ``invoked_at`` is read once, when the body starts;
        the call ends ``ok``, ``error`` (an exception: its class is kept) or ``cancelled``
        (a cancellation, ``KeyboardInterrupt``), and the body's exception or cancellation
        propagates unchanged. The call is written in the turn's closing store (no extra
        round trip), completed or abandoned, as a ``tool_invocation`` entity the turn record
        REFERS_TO. Entities the tool's result names or produces go through :meth:`remember`
        or :meth:`cite`, as before::

            async with t.tool("search_flights", {"to": "LIS"}) as call:
                call.result = await search_flights(to="LIS")

        Bad input (an empty or non-str name, args that are not plain JSON) raises here,
        before the call runs; :class:`~neotoma_agent.TurnStateError` unless the turn is open.
        """
        self._require_open("record a tool call")
        return ActiveToolCall(self._add_tool, name, args, call_id)

    @args_of(ToolCall.create)
    def record_tool(self, *args: Any, **kwargs: Any) -> ToolCall:
        """Record a call a framework already made; return the record kept.

        ``status`` is ``"ok"``, ``"error"`` or ``"cancelled"``; ``invoked_at`` a timezone-
        aware ``datetime`` or an ISO 8601 string (``None``: now), stored as UTC with
        milliseconds. The framework's own ``call_id`` (e.g. a ``tool_use_id``) makes a
        repeated record of the same call a no-op (the earlier record is returned), and the
        same id with other content raises :class:`~neotoma_agent.ToolCallConflictError`.
        Two calls of one tool on the same millisecond are kept apart (the later moves on by
        one millisecond), so they never merge. Checked before any I/O (``TypeError``,
        ``ValueError``, :class:`~neotoma_agent.ValidationError`); written in the closing
        store, like :meth:`tool`::

            t.record_tool("search_flights", args={"to": "LIS"}, result=offers,
                          call_id=block.id, duration_ms=312.5)
        """
        self._require_open("record a tool call")
        return self._tools.record(*args, **kwargs)

    def _add_tool(self, call: ToolCall) -> ToolCall:
        # Where an ActiveToolCall records itself when it ends (timed now, not given).
        self._require_open("record a tool call")
        return self._tools.add(call, clock_given=False)
