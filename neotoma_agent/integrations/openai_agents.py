"""OpenAI Agents SDK: every ``Runner`` run is one stored turn, streamed or not.

``run(agent, input, memory=...)`` wraps ``Runner.run`` and ``run_streamed(...)`` wraps
``Runner.run_streamed`` in ``memory.turn(...)``::

    from agents import Agent
    from neotoma_agent.integrations.openai_agents import run, run_streamed

    ran = await run(agent, "What do we know about Acme Corp?", memory=memory)
    print(ran.final_output, ran.turn.result.assistant_message_id)

    async with run_streamed(agent, "And their address?", memory=memory) as stream:
        async for delta in stream.text():
            print(delta, end="")
    print(stream.result.final_output)

The three rules hold: the user message is stored before the first model request (the turn
opens before the SDK starts its run); the exact final output is stored once as the reply; a
run that raises (model, tool, guardrail, ``MaxTurnsExceeded``), is cancelled (task cancel,
``asyncio.timeout``, leaving the ``async with`` block by an exception) or ends without a final
output (``stream.cancel()``: the SDK's own stop, which raises nothing; tool calls waiting for
approval: ``result.interruptions``) is stored ``abandoned`` with the text the user was shown,
and the caller gets the SDK's own exception, cancellation or result unchanged.

What is stored, by rule:

- **The user message**: a ``str`` input as it is. A list of input items (the caller keeps the
  conversation itself, e.g. ``result.to_input_list()`` plus a new message): the text of its
  last user message, one line per text part, ``[input_image]``/``[input_file]`` for other
  parts. A ``RunState`` (resuming after approvals): the last user message of the state's
  original input; pass ``turn_id=`` the interrupted run's turn id so the resumed run completes
  that turn.
- **The reply**: ``result.final_output``; a structured ``output_type`` is stored as its JSON.
  The turn record's ``model`` is the run's model name (the ``RunConfig``'s, else the starting
  agent's), when a string names it.
  Handoffs stay one turn: the reply is the final output of the agent that answered.
- **Tool calls**: every function tool the SDK runs is recorded on the turn, and each handoff
  as a call named after it (``transfer_to_<agent>``, ``{"from": ..., "to": ...}``).

Context: :meth:`~neotoma_agent.Turn.context` (the retrieved entities) is appended to the
agent's instructions through ``RunConfig.call_model_input_filter`` (chained after the
caller's own filter); ``context=False`` turns it off, ``context_chars`` is its budget. The
conversation's stored history is sent as input items before the user message when the run
does not carry its own (a ``str`` input and no ``session``, ``conversation_id`` or
``previous_response_id``); ``history=False`` never sends it. Tools reach the turn with
:func:`neotoma_agent.current_turn`.

Tracing: the SDK's own trace of a run (its tracing is not OpenTelemetry) is grouped by the
conversation (``RunConfig.group_id``, unless the caller set one) and carries the turn's ids
in its metadata (``neotoma.conversation_id``, ``neotoma.turn_id``), so the SDK's traces
and the turn's can be joined. With OpenTelemetry on (``neotoma-agent[otel]``), the run
happens inside the turn's span: spans that the application's OpenTelemetry instrumentation
starts during the run (a model client's, a tool's own) are descendants of the turn span,
in its trace.

asyncio only (as the SDK is).
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

import attrs

from ._common import (
    NoFinalReply,
    TurnBlock,
    args_of,
    missing_framework,
    parts_text,
    record_call,
    reply_text,
)

try:
    from agents import (
        Agent,
        RunConfig,
        RunHooks,
        Runner,
        RunResult,
        RunResultStreaming,
        RunState,
        StreamEvent,
    )
    from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
    from openai.types.responses import ResponseTextDeltaEvent
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise missing_framework(__name__, "the OpenAI Agents SDK", "openai-agents") from exc

from neotoma_agent import NeotomaMemory, Turn, TurnState

__all__ = ["AgentsRun", "AgentsStream", "run", "run_streamed"]

_CARRIERS = ("session", "conversation_id", "previous_response_id", "auto_previous_response_id")
#: The keys of the SDK trace's metadata that name the turn (``RunConfig.trace_metadata``).
TRACE_CONVERSATION_ID = "neotoma.conversation_id"
TRACE_TURN_ID = "neotoma.turn_id"


@attrs.frozen
class AgentsRun:
    """One recorded run: the SDK's ``RunResult`` and the :class:`~neotoma_agent.Turn`."""

    result: RunResult
    turn: Turn

    @property
    def final_output(self) -> Any:
        """The run's final output (``None`` when it ended without one)."""
        return self.result.final_output


# ---------------------------------------------------------------------------- the plan


@attrs.frozen
class _Plan:
    """One run's arguments, checked: the agent, the user text, the settings, the SDK's
    ``run_config`` and ``hooks`` and the other ``Runner`` keywords."""

    agent: Agent[Any]
    memory: NeotomaMemory
    raw_input: Any
    user_text: str
    turn_id: str | None
    context: bool
    context_chars: int
    send_history: bool
    run_config: RunConfig | Mapping[str, Any] | None
    hooks: RunHooks[Any] | None
    kwargs: dict[str, Any]

    @classmethod
    def make(
        cls,
        agent: Agent[Any],
        input: str | list[Any] | RunState[Any, Any],
        *,
        memory: NeotomaMemory,
        turn_id: str | None = None,
        context: bool = True,
        context_chars: int = 4000,
        history: bool = True,
        run_config: RunConfig | Mapping[str, Any] | None = None,
        hooks: RunHooks[Any] | None = None,
        **runner_kwargs: Any,
    ) -> _Plan:
        """The parameters of :func:`run` and :func:`run_streamed` (stated here, once)."""
        if not isinstance(memory, NeotomaMemory):
            raise TypeError(f"memory must be a NeotomaMemory, not {type(memory).__name__}")
        if isinstance(context_chars, bool) or not isinstance(context_chars, int):
            raise TypeError("context_chars must be an int")
        if context_chars < 0:
            raise ValueError("context_chars must be >= 0")
        kwargs = dict(runner_kwargs)
        if "run_context" in kwargs:
            kwargs["context"] = kwargs.pop("run_context")
        carried = any(kwargs.get(name) for name in _CARRIERS)
        return cls(
            agent,
            memory,
            input,
            _user_text(input),
            turn_id,
            context,
            context_chars,
            history and isinstance(input, str) and not carried,
            run_config,
            hooks,
            kwargs,
        )

    def turn(self) -> Turn:
        model = _model_name(self.agent, self.run_config)
        return self.memory.turn(self.user_text, turn_id=self.turn_id, model=model)

    def input(self, turn: Turn) -> Any:
        if not self.send_history or not turn.history:
            return self.raw_input
        items: list[dict[str, str]] = []
        for earlier in turn.history:
            items.append({"role": "user", "content": earlier.user})
            if earlier.reply is not None:
                items.append({"role": "assistant", "content": earlier.reply})
        items.append({"role": "user", "content": self.user_text})
        return items

    def config(self, turn: Turn) -> RunConfig:
        given = self.run_config
        base = (
            given
            if isinstance(given, RunConfig)
            else RunConfig(**dict(given))
            if given is not None
            else RunConfig()
        )
        # The SDK's own trace (not OpenTelemetry) names the turn it belongs to: grouped by
        # conversation (unless the caller grouped it), the turn's ids in its metadata. One
        # replace for every change: each copy of a RunConfig re-runs its validation.
        changes: dict[str, Any] = {
            "group_id": base.group_id or turn.conversation_id,
            "trace_metadata": {
                **(base.trace_metadata or {}),
                TRACE_CONVERSATION_ID: turn.conversation_id,
                TRACE_TURN_ID: turn.turn_id,
            },
        }
        if self.context:
            changes["call_model_input_filter"] = _with_context(
                turn, base.call_model_input_filter, self.context_chars
            )
        return dataclasses.replace(base, **changes)


@args_of(_Plan.make)
async def run(*args: Any, **kwargs: Any) -> AgentsRun:
    """``Runner.run(agent, input, ...)`` as one turn of ``memory``'s conversation.

    The other keywords go to ``Runner.run`` unchanged (``context``, the SDK's run context,
    is ``run_context=`` here, since ``context`` is the Neotoma context switch). Returns an
    :class:`AgentsRun`; a run that ended without a final output returns too (its turn
    abandoned), so an interrupted run can be approved and resumed.
    """
    plan = _Plan.make(*args, **kwargs)
    no_reply: NoFinalReply | None = None
    result: RunResult | None = None
    turn = plan.turn()
    try:
        async with turn:
            recorder = _Recorder(turn, plan.hooks)
            try:
                result = await Runner.run(
                    plan.agent,
                    plan.input(turn),
                    run_config=plan.config(turn),
                    hooks=recorder,
                    **plan.kwargs,
                )
            except BaseException as exc:
                recorder.flush(exc)
                raise
            recorder.flush(None)
            no_reply = _no_reply(result)
            if no_reply is not None:
                raise no_reply
            turn.reply = reply_text(result.final_output)
    except NoFinalReply as exc:
        if exc is not no_reply or result is None:
            raise
    assert result is not None
    return AgentsRun(result, turn)


@args_of(_Plan.make)
def run_streamed(*args: Any, **kwargs: Any) -> AgentsStream:
    """``Runner.run_streamed(agent, input, ...)`` as one turn, used as ``async with``.

    The turn opens (the user message stored) on enter, before the SDK starts its run. In the
    block, ``stream.text()`` yields the text deltas (each added to the partial reply first),
    ``stream.events()`` every SDK stream event, ``stream.cancel()`` stops the run. Leaving
    the block normally waits for the run to finish (reading the events nobody read) and
    stores its final output; leaving it by an exception cancels the run and abandons the
    turn. Afterwards ``stream.result`` is the SDK's ``RunResultStreaming``.
    """
    return AgentsStream(_Plan.make(*args, **kwargs))


class AgentsStream(TurnBlock):
    """One streamed run as a turn; from :func:`run_streamed`."""

    def __init__(self, plan: _Plan) -> None:
        self._plan = plan
        self._turn = plan.turn()
        self._recorder = _Recorder(self._turn, plan.hooks)
        self._result: RunResultStreaming | None = None
        self._events: AsyncIterator[StreamEvent] | None = None

    @property
    def turn(self) -> Turn:
        """The turn (``retrieved``, ``reply`` so far, ``result`` after the block)."""
        return self._turn

    @property
    def result(self) -> RunResultStreaming:
        """The SDK's streaming result (``final_output``, ``new_items``, ``interruptions``)."""
        if self._result is None:
            raise RuntimeError("the run starts when the async with block is entered")
        return self._result

    def cancel(self, mode: Literal["immediate", "after_turn"] = "immediate") -> None:
        """Stop the run (the SDK's ``cancel``): ``"immediate"`` ends it without a final output
        (the turn is abandoned with the text shown), ``"after_turn"`` lets the current model
        turn finish (its final output, if it gives one, is stored)."""
        self.result.cancel(mode=mode)

    async def events(self) -> AsyncIterator[StreamEvent]:
        """Every SDK stream event, in order (text deltas are added to the reply first)."""
        source = self._source()
        async for event in source:
            self._see(event)
            yield event

    async def text(self) -> AsyncIterator[str]:
        """The text deltas of the run, in order, each added to the reply before it is yielded.

        Deltas span every model call of the run (text before a tool call too): the stored
        reply is the final output, the deltas are what the user saw.
        """
        async for event in self.events():
            delta = _text_delta(event)
            if delta:
                yield delta

    def _source(self) -> AsyncIterator[StreamEvent]:
        if self._events is None:
            self._events = self.result.stream_events()
        return self._events

    def _see(self, event: StreamEvent) -> None:
        delta = _text_delta(event)
        if delta and self._turn.state is TurnState.OPEN:
            self._turn.append(delta)

    async def __aenter__(self) -> AgentsStream:
        turn = await self._turn.__aenter__()
        try:
            self._result = Runner.run_streamed(
                self._plan.agent,
                self._plan.input(turn),
                run_config=self._plan.config(turn),
                hooks=self._recorder,
                **self._plan.kwargs,
            )
        except BaseException as exc:
            await self._close_turn(exc)
            raise
        return self

    async def _exit(self, exc: BaseException | None) -> None:
        result = self.result
        failure = exc
        no_reply: NoFinalReply | None = None
        if failure is None:
            try:
                async for event in self._source():  # what nobody read: the run goes on
                    self._see(event)
                self._recorder.flush(None)
                no_reply = _no_reply(result)
                if no_reply is None:
                    self._turn.reply = reply_text(result.final_output)
            except BaseException as error:
                failure = error
        else:
            result.cancel()
        self._recorder.flush(failure)
        ending = failure if failure is not None else no_reply
        await self._close_turn(ending)
        if failure is not None and failure is not exc:
            raise failure
        # None: the block's own exception (or cancellation) propagates unchanged.


def _with_context(
    turn: Turn, inner: CallModelInputFilter | None, budget: int
) -> CallModelInputFilter:
    """The input filter that appends the turn's context to the instructions, after the
    caller's own ``inner`` filter."""

    async def with_context(data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        if inner is not None:
            filtered = inner(data)
            model_data = await filtered if inspect.isawaitable(filtered) else filtered
        # History reaches the model as input items (or the caller's own), never here.
        block = turn.context(max_chars=budget, history=False)
        if not block:
            return model_data
        instructions = model_data.instructions
        return ModelInputData(
            input=model_data.input,
            instructions=f"{instructions}\n\n{block}" if instructions else block,
        )

    return with_context


def _model_name(agent: Agent[Any], run_config: RunConfig | Mapping[str, Any] | None) -> str | None:
    """The turn record's ``model``: the run's model name (the RunConfig's, else the
    starting agent's), when it is named by a string (a Model object names none we can read)."""
    given = (
        run_config.model
        if isinstance(run_config, RunConfig)
        else run_config.get("model")
        if run_config is not None
        else None
    )
    for model in (given, agent.model):
        if isinstance(model, str) and model.strip():
            return model
        name = getattr(model, "model", None)
        if isinstance(name, str) and name.strip():
            return name
    return None


def _user_text(input: Any) -> str:
    if isinstance(input, str):
        return input
    if isinstance(input, RunState):
        original = input.to_json().get("original_input")
        if isinstance(original, str):
            return original
        input = original if isinstance(original, list) else []
    if isinstance(input, Sequence):
        for item in reversed(input):
            if isinstance(item, Mapping) and item.get("role") == "user":
                return _content_text(item.get("content"))
        raise ValueError("the input holds no user message to record")
    raise TypeError(
        f"input must be a str, a list of input items or a RunState, not {type(input).__name__}"
    )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return parts_text(content, _describe_part)
    return ""


def _describe_part(part: object) -> str | None:
    if isinstance(part, Mapping):
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            return str(part.get("text", ""))
        return f"[{kind}]"
    return f"[{type(part).__name__}]"


def _text_delta(event: StreamEvent) -> str:
    if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
        return event.data.delta
    return ""


def _no_reply(result: RunResult | RunResultStreaming) -> NoFinalReply | None:
    if result.interruptions:
        return NoFinalReply("the run ended waiting for tool approvals")
    if result.final_output is None:
        return NoFinalReply("the run ended without a final output")
    return None


# ---------------------------------------------------------------------------- tool calls


@attrs.frozen
class _Started:
    name: str
    args: Any
    call_id: str | None
    invoked_at: datetime.datetime
    started: float


class _Recorder(RunHooks[Any]):
    """The SDK's run hooks: records tool calls and handoffs, then calls the caller's hooks.

    A function tool's error that the SDK turns into a message for the model (its default
    ``failure_error_function``) reaches ``on_tool_end`` as that message: it is recorded as
    the call's result, status ``ok``; an error that escapes the tool ends the run, and the
    call is recorded ``error`` (``cancelled`` for a cancellation).
    """

    def __init__(self, turn: Turn, inner: RunHooks[Any] | None) -> None:
        self._turn = turn
        self._inner = inner
        self._running: dict[int, _Started] = {}

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        if self._inner is not None:
            await self._inner.on_llm_start(context, agent, *args)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        if self._inner is not None:
            await self._inner.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        if self._inner is not None:
            await self._inner.on_agent_end(context, agent, output)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        record_call(
            self._turn,
            f"transfer_to_{to_agent.name}",
            args={"from": from_agent.name, "to": to_agent.name},
            invoked_at=_now(),
            duration_ms=0.0,
            call_id=None,
        )
        if self._inner is not None:
            await self._inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self._running[id(context)] = _Started(
            str(getattr(tool, "name", type(tool).__name__)),
            _arguments(getattr(context, "tool_arguments", None)),
            getattr(context, "tool_call_id", None),
            _now(),
            time.perf_counter(),
        )
        if self._inner is not None:
            await self._inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call = self._running.pop(id(context), None)
        if call is not None:
            self._record(call, result, None)
        if self._inner is not None:
            await self._inner.on_tool_end(context, agent, tool, result)

    def flush(self, failure: BaseException | None) -> None:
        """Record the calls that never ended: the run failed (or was cancelled) in them."""
        running, self._running = self._running, {}
        for call in running.values():
            self._record(call, None, failure or NoFinalReply("the run ended during the call"))

    def _record(self, call: _Started, result: Any, failure: BaseException | None) -> None:
        record_call(
            self._turn,
            call.name,
            args=call.args,
            result=result,
            failure=failure,
            invoked_at=call.invoked_at,
            duration_ms=(time.perf_counter() - call.started) * 1000,
            call_id=call.call_id,
        )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _arguments(raw: object) -> Any:
    # The SDK hands a tool its arguments as the model's JSON text.
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
