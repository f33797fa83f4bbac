"""Pydantic AI: every agent run is one stored turn, on every entry point.

``NeotomaCapability(memory)`` on ``Agent(..., capabilities=[...])`` (or on one run's
``capabilities=[...]``) wraps each run (``run``, ``run_sync``, ``run_stream``, ``iter``,
``run_stream_events``) in ``memory.turn(...)`` through Pydantic AI's ``wrap_run`` seam::

    from pydantic_ai import Agent
    from neotoma_agent.integrations.pydantic_ai import NeotomaCapability

    agent = Agent("openai:gpt-5", capabilities=[NeotomaCapability(memory)])
    result = await agent.run("What do we know about Acme Corp?")

The three rules hold: the user message is stored before the first model request; the exact
final output is stored once as the reply; a run that raises (model, tool, output
validation), is cancelled (task cancel, ``asyncio.timeout``, Pydantic AI's
``CancellationToken`` or ``timeout=``, leaving ``iter()`` or a stream early) or ends without a
final reply (tool calls waiting for approval: a ``DeferredToolRequests`` output) is stored
``abandoned`` with the text the user was shown, and the caller gets the run's own exception,
cancellation or result unchanged.

What is stored, by rule:

- **The user message**: a ``str`` prompt as it is; a list of parts as its text parts, one per
  line, each non-text part (an image, a document, audio) as a ``[kind]`` placeholder such as
  ``[image-url]`` (never its bytes or URL); no prompt (``None``: a run continued from
  ``message_history``, or resumed with ``deferred_tool_results``) continues the turn of the
  last user prompt in the history, under that run's turn id, so a resumed run completes the
  turn its deferred run left abandoned. A run with no user prompt anywhere is not recorded.
- **The reply**: ``result.output`` when it is a ``str``; a structured ``output_type`` is
  stored as its JSON (see :func:`neotoma_agent.integrations._common.reply_text`).
- **The turn id**: the run's ``run_id`` unless ``turn_id=`` (a function of the run context)
  says otherwise; the turn record's ``model`` is the run model's ``model_name``.
- **Tool calls**: every tool the agent runs is recorded on the turn (name, arguments, result,
  status, duration, the model's call id); a call deferred for approval is not a call yet.

Context: :meth:`~neotoma_agent.Turn.context` reaches the model as instructions (``context``
on by default, ``context_chars`` its budget); the conversation's stored history is left out
of it when the run starts from earlier messages (``message_history``, or a ``conversation=``
that loads them), so it is never fed twice. Tools reach the turn with
:func:`neotoma_agent.current_turn`.

Partial text comes from the run's event stream; watching it makes every ``run()`` use
streamed model requests (Pydantic AI's rule for capabilities that watch events), so a
``FunctionModel`` needs a ``stream_function``. ``partial_text=False`` turns that off: the
partial reply is then the text of the model responses that completed.

asyncio only (as Pydantic AI is). Needs Python >= 3.11 (Pydantic AI's floor; the core of
neotoma-agent runs on 3.10).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ._common import NoFinalReply, missing_framework, parts_text, record_call, reply_text

try:
    from pydantic_ai import (
        ApprovalRequired,
        CallDeferred,
        DeferredToolRequests,
        RunContext,
        SkipToolExecution,
    )
    from pydantic_ai.capabilities import (
        AbstractCapability,
        ValidatedToolArgs,
        WrapRunHandler,
        WrapToolExecuteHandler,
    )
    from pydantic_ai.messages import (
        AgentStreamEvent,
        ModelRequest,
        ModelResponse,
        PartDeltaEvent,
        PartStartEvent,
        TextContent,
        TextPart,
        TextPartDelta,
        ToolCallPart,
        UserPromptPart,
    )
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise missing_framework(__name__, "Pydantic AI", "pydantic-ai", " (Python >= 3.11)") from exc

from neotoma_agent import NeotomaMemory, Turn, TurnState

__all__ = ["NeotomaCapability"]

_log = logging.getLogger(__name__)

TurnIdFunc = Callable[["RunContext[Any]"], "str | None"]


@dataclass
class NeotomaCapability(AbstractCapability[Any]):
    """Store every run of the agent as one turn of ``memory``'s conversation.

    ``memory`` is the conversation's :class:`~neotoma_agent.NeotomaMemory` (one per
    conversation: its ``conversation_id`` names it). Options:

    - ``context`` (default ``True``): give the model :meth:`~neotoma_agent.Turn.context` as
      instructions; ``context_chars`` (default 4000) is its budget.
    - ``partial_text`` (default ``True``): keep the streamed text the user saw, for a run
      that is abandoned (this makes every request streamed; see the module docstring).
    - ``turn_id``: a function of the ``RunContext`` giving the turn id (``None``: the
      default, the run's ``run_id``).
    - ``on_turn_end``: called with the :class:`~neotoma_agent.Turn` once it is stored
      (completed or abandoned), where ``turn.result`` says what was stored.

    One capability serves any number of runs at once: each run's turn is kept by its run id.
    """

    memory: NeotomaMemory
    _: KW_ONLY
    context: bool = True
    context_chars: int = 4000
    partial_text: bool = True
    turn_id: TurnIdFunc | None = None
    on_turn_end: Callable[[Turn], object] | None = None
    # Each run's turn, by run id: the hooks get the run's context, so they find their run
    # here. Not a copy per run (``for_run``): a capability that returns a new instance makes
    # Pydantic AI resolve the agent's capabilities anew on every run (about 0.8 ms).
    _runs: dict[str | None, _Run] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.memory, NeotomaMemory):
            raise TypeError(f"memory must be a NeotomaMemory, not {type(self.memory).__name__}")
        if isinstance(self.context_chars, bool) or not isinstance(self.context_chars, int):
            raise TypeError("context_chars must be an int")
        if self.context_chars < 0:
            raise ValueError("context_chars must be >= 0")

    @property
    def has_wrap_run_event_stream(self) -> bool:
        # Pydantic AI streams every request for a capability that watches events; only
        # watch them when the partial text is wanted.
        return self.partial_text

    def get_instructions(self) -> Callable[[RunContext[Any]], Awaitable[str | None]] | None:
        if not self.context:
            return None
        return self._instructions

    async def _instructions(self, ctx: RunContext[Any]) -> str | None:
        # async: Pydantic AI runs a plain function in a worker thread (about 1 ms a run).
        run = self._runs.get(ctx.run_id)
        if run is None:
            return None
        history = not run.carries_history
        return run.turn.context(max_chars=self.context_chars, history=history) or None

    # ------------------------------------------------------------------ the run

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        user = _user_message(ctx)
        if user is None:
            _log.warning("pydantic_ai.run_not_recorded: the run has no user prompt")
            return await handler()
        text, history_run_id = user
        turn_id = self.turn_id(ctx) if self.turn_id is not None else None
        if turn_id is None:
            turn_id = history_run_id or ctx.run_id
        # The run carries its own history when it starts from earlier messages.
        carries_history = any(_is_earlier(m, ctx.run_id) for m in ctx.messages)
        no_reply: NoFinalReply | None = None
        result: AgentRunResult[Any] | None = None
        run: _Run | None = None
        try:
            async with self.memory.turn(text, turn_id=turn_id, model=_model_name(ctx)) as turn:
                run = self._runs[ctx.run_id] = _Run(turn, carries_history)
                result = await handler()
                output = result.output
                if isinstance(output, DeferredToolRequests) or output is None:
                    no_reply = NoFinalReply(
                        "the run ended waiting for deferred tool calls"
                        if output is not None
                        else "the run ended with no output"
                    )
                    raise no_reply
                turn.reply = reply_text(output)
        except NoFinalReply as exc:
            if exc is not no_reply or result is None:
                raise
        finally:
            if run is not None:
                self._runs.pop(ctx.run_id, None)
                # After the async with, an entered turn is stored (or failed to be: FAILED).
                if self.on_turn_end is not None:
                    self.on_turn_end(run.turn)
        assert result is not None
        return result

    async def wrap_run_event_stream(
        self, ctx: RunContext[Any], *, stream: AsyncIterable[AgentStreamEvent]
    ) -> AsyncIterator[AgentStreamEvent]:
        try:
            run = self._runs.get(ctx.run_id)
            if run is None:
                async for event in stream:
                    yield event
            else:
                # The partial reply: the text shown as it streamed (the exact reply comes from
                # the result, so a replaced part, a repeated PartStartEvent index, costs
                # nothing). Per event only the type tests: the turn is found once per stream.
                turn = run.turn
                async for event in stream:
                    if isinstance(event, PartDeltaEvent):
                        delta = event.delta
                        if isinstance(delta, TextPartDelta) and turn.state is TurnState.OPEN:
                            turn.append(delta.content_delta)
                    elif (
                        isinstance(event, PartStartEvent)
                        and isinstance(event.part, TextPart)
                        and turn.state is TurnState.OPEN
                    ):
                        turn.append(event.part.content)
                    yield event
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        invoked_at = datetime.datetime.now(datetime.timezone.utc)
        started = time.perf_counter()
        try:
            result = await handler(args)
        except (CallDeferred, ApprovalRequired, SkipToolExecution):
            raise  # deferred or skipped: the tool did not run, so there is no call yet
        except BaseException as exc:
            self._record(ctx, call, args, None, exc, invoked_at, started)
            raise
        self._record(ctx, call, args, result, None, invoked_at, started)
        return result

    def _record(
        self,
        ctx: RunContext[Any],
        call: ToolCallPart,
        args: ValidatedToolArgs,
        result: Any,
        failure: BaseException | None,
        invoked_at: datetime.datetime,
        started: float,
    ) -> None:
        run = self._runs.get(ctx.run_id)
        record_call(
            None if run is None else run.turn,
            call.tool_name,
            args=args,
            result=result,
            failure=failure,
            invoked_at=invoked_at,
            duration_ms=(time.perf_counter() - started) * 1000,
            call_id=call.tool_call_id,
        )

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, response: ModelResponse
    ) -> ModelResponse:
        if not self.partial_text:
            run = self._runs.get(ctx.run_id)
            if run is not None and run.turn.state is TurnState.OPEN:
                text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
                run.turn.append(text)
        return response


@dataclass(slots=True)
class _Run:
    """One run's turn, and whether the run brings its own earlier messages."""

    turn: Turn
    carries_history: bool


def _model_name(ctx: RunContext[Any]) -> str | None:
    # The turn record's ``model``: the name Pydantic AI gives the run's model.
    name = getattr(ctx.model, "model_name", None)
    return name if isinstance(name, str) and name.strip() else None


def _describe_part(part: object) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, TextContent):
        return part.content
    kind = getattr(part, "kind", None)
    if kind == "cache-point":
        return None  # a caching marker, not content
    return f"[{kind or type(part).__name__}]"


def _prompt_text(prompt: str | Sequence[Any]) -> str:
    if isinstance(prompt, str):
        return prompt
    return parts_text(prompt, _describe_part)


def _user_message(ctx: RunContext[Any]) -> tuple[str, str | None] | None:
    """The user text to store, and the run id of the history's prompt when it comes from there."""
    if ctx.prompt is not None:
        return _prompt_text(ctx.prompt), None
    for message in reversed(ctx.messages):
        if not isinstance(message, ModelRequest):
            continue
        prompts = [p for p in message.parts if isinstance(p, UserPromptPart)]
        if prompts:
            text = "\n".join(_prompt_text(p.content) for p in prompts)
            return text, message.run_id
    return None


def _is_earlier(message: ModelRequest | ModelResponse, run_id: str | None) -> bool:
    return getattr(message, "run_id", None) != run_id
