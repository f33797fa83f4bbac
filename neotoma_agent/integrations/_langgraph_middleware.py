"""LangChain's side of a LangGraph turn: what runs inside the agent graph.

:class:`NeotomaMiddleware` brings the turn to each model call and records each tool call;
:class:`Run` is what one wrapped run (``langgraph.TurnStream``) shares with it, through a
context variable, so the middleware finds the turn without being handed it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

from langchain_core.messages import SystemMessage, ToolMessage
from langgraph.errors import GraphBubbleUp

from neotoma_agent import Turn, TurnState, current_turn, error_class_name

try:  # the middleware needs the `langchain` package itself; the wrappers need only langgraph
    from langchain.agents.middleware import AgentMiddleware, ModelRequest
    from langgraph.prebuilt.tool_node import ToolCallRequest
except ImportError:  # pragma: no cover - langgraph installed without langchain
    AgentMiddleware = object  # type: ignore[assignment,misc,unused-ignore]

__all__ = ["RUN", "NeotomaMiddleware", "Run", "check_context_chars", "record_ended", "record_tool"]

_logger = logging.getLogger("neotoma_agent.integrations.langgraph")


@dataclasses.dataclass(eq=False)
class Run:
    """What one wrapped run shares with the middleware running inside it."""

    turn: Turn
    context: bool
    context_chars: int
    #: whether the context block shows the earlier turns: only when the run's messages
    #: carry none (no checkpointer and ``history=False``), so they are never fed twice
    context_history: bool = True
    #: ids of the tool calls already recorded in this turn
    recorded: set[str] = dataclasses.field(default_factory=set)
    #: tool calls the model asked for and no result came back for yet: id -> (name, args,
    #: when it was asked, as a Unix time)
    asked: dict[str, tuple[str, Any, float]] = dataclasses.field(default_factory=dict)
    #: the context block, rendered at the run's first model call: what it shows (the
    #: retrieved entities, the history) is fixed for the turn, and an agent calls its
    #: model once per tool round
    block: str | None = None

    def context_block(self) -> str:
        """The turn's context block for this run's model calls (rendered once)."""
        if self.block is None:
            self.block = (
                self.turn.context(max_chars=self.context_chars, history=self.context_history)
                if self.context
                else ""
            )
        return self.block


RUN: ContextVar[Run | None] = ContextVar("neotoma_langgraph_run", default=None)


def record_tool(run: Run | None, turn: Turn, call_id: str | None, **fields: Any) -> None:
    """Record one tool call in ``turn``, once per call id in ``run``; never raise."""
    # Recording must never break the agent: a value the store cannot hold, a conflicting
    # call id, a turn already closed are logged, and the tool's own outcome stands.
    if call_id is not None and run is not None:
        if call_id in run.recorded:
            return
        run.recorded.add(call_id)
        run.asked.pop(call_id, None)
    try:
        turn.record_tool(call_id=call_id, **fields)
    except Exception as exc:
        # The reason is the exception's class only: its text may quote the tool's arguments.
        _logger.warning(
            "tool.not_recorded tool_status=%s reason=%s", fields.get("status"), type(exc).__name__
        )


def _turn_here() -> tuple[Run | None, Turn | None]:
    run = RUN.get()
    if run is not None:
        return run, run.turn
    return None, current_turn()


def check_context_chars(context_chars: object) -> None:
    """``ValueError`` unless ``context_chars`` is an int >= 0 (a bool is not one)."""
    if isinstance(context_chars, bool) or not isinstance(context_chars, int) or context_chars < 0:
        raise ValueError("context_chars must be an int >= 0")


class NeotomaMiddleware(AgentMiddleware):  # type: ignore[misc,unused-ignore]
    """``create_agent(..., middleware=[NeotomaMiddleware()])``: the turn inside the agent.

    In a turn (one run under :func:`astream_turn` / :func:`ainvoke_turn`, or any run inside
    ``async with memory.turn(...)``), each model call gets ``t.context()`` appended to its
    system message, and each tool call is recorded in the turn with the tool-call API (name,
    arguments, result, ``ok`` / ``error`` / ``cancelled``, duration, the model's call id). A
    tool stopped by ``interrupt()`` is not recorded: it runs again when the thread resumes.
    Outside a turn it does nothing. ``context_chars`` (default 4000) and ``context=False``
    apply when the run is not under :func:`astream_turn` (which passes its own).

    It cannot keep the turn's rules by itself (LangChain runs no middleware on an error or
    a cancellation): run the agent under :func:`astream_turn` or inside ``memory.turn()``.
    """

    __module__ = "neotoma_agent.integrations.langgraph"

    def __init__(self, *, context: bool = True, context_chars: int = 4000) -> None:
        check_context_chars(context_chars)
        super().__init__()
        self._context = context
        self._context_chars = context_chars

    @property
    def name(self) -> str:
        """The middleware's node-name prefix in the agent graph."""
        return "NeotomaMiddleware"

    def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Any],
    ) -> Coroutine[Any, Any, Any]:
        """Add the turn's context to the system message of this model call."""
        # A plain method returning the coroutine, not an ``async def``: ``create_agent``
        # wraps every model-call hook in LangSmith's ``traceable``, whose async wrapper runs
        # its span set-up and tear-down in worker threads and the hook in a new task even
        # with tracing off (about 0.3 ms a model call); its plain wrapper does neither.
        # With LangSmith tracing on, this hook's span then covers only the hand-off.
        return self._model_call(request, handler)

    async def _model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Any],
    ) -> Any:
        run, turn = _turn_here()
        if turn is None or turn.state is not TurnState.OPEN:
            return await handler(request)
        if run is not None:
            block = run.context_block()
        else:
            block = turn.context(max_chars=self._context_chars) if self._context else ""
        if block:
            request = request.override(system_message=_with_block(request.system_message, block))
        return await handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Any],
    ) -> Any:
        """Run the tool and record the call in the current turn."""
        run, turn = _turn_here()
        if turn is None or turn.state is not TurnState.OPEN:
            return await handler(request)
        asked = request.tool_call
        call = (asked.get("id"), asked.get("name") or "tool", asked.get("args"))
        invoked_at = datetime.now(timezone.utc)
        started = time.perf_counter()
        try:
            outcome = await handler(request)
        except GraphBubbleUp:
            raise  # interrupt() or a parent command: not a finished call
        except BaseException as exc:
            record_ended(run, turn, call, invoked_at, failure=exc, duration_ms=_ms(started))
            raise
        message = outcome if isinstance(outcome, ToolMessage) else None
        record_ended(run, turn, call, invoked_at, message=message, duration_ms=_ms(started))
        return outcome


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def record_ended(
    run: Run | None,
    turn: Turn,
    call: tuple[str | None, str, Any],
    invoked_at: datetime,
    *,
    message: ToolMessage | None = None,
    failure: BaseException | None = None,
    duration_ms: float | None = None,
) -> None:
    """Record the tool call ``call`` (its id, name and args) that ended: by ``failure``
    (``error``, or ``cancelled`` for what is no ``Exception``), else by the tool's
    ``message`` (``error`` when it says so; no message: ``ok`` without a result)."""
    call_id, name, args = call
    fields: dict[str, Any]
    if failure is not None:
        status = "error" if isinstance(failure, Exception) else "cancelled"
        fields = {"status": status, "error_class": error_class_name(failure)}
    elif message is not None:
        failed = message.status == "error"
        fields = {"result": message.content, "status": "error" if failed else "ok"}
    else:
        fields = {"result": None, "status": "ok"}
    record_tool(
        run,
        turn,
        call_id,
        name=name,
        args=args,
        invoked_at=invoked_at,
        duration_ms=duration_ms,
        **fields,
    )


def _with_block(system: SystemMessage | None, block: str) -> SystemMessage:
    if system is None:
        return SystemMessage(block)
    content = system.content
    if isinstance(content, str):
        return SystemMessage(f"{content}\n\n{block}" if content else block)
    return SystemMessage([*content, {"type": "text", "text": block}])
