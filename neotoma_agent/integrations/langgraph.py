"""LangChain / LangGraph: every graph run is one Neotoma turn, however it ends.

Neither LangGraph nor LangChain's middleware keeps the turn's rules by itself: middleware
runs nothing on an error or a cancellation, and a cancelled run leaves only the user message
in its checkpoint. So the turn is held by a wrapper around the run, and the middleware only
brings the turn to the model and records tool calls::

    from langchain.agents import create_agent
    from neotoma_agent.integrations.langgraph import NeotomaMiddleware, astream_turn

    agent = create_agent(model, tools, middleware=[NeotomaMiddleware()])
    async with astream_turn(agent, "What about Acme Corp?", memory=memory) as s:
        async for delta in s.text():
            print(delta, end="")
    print(s.result.stored_status)            # "completed"

The three rules, on :func:`astream_turn` and :func:`ainvoke_turn` alike:

1. the user message is stored (the turn ``open``) before the graph starts;
2. the exact final reply (the text of the last ``AIMessage`` without tool calls that this
   run added, or the JSON of ``structured_response``) is stored once;
3. an error, a cancellation (``Task.cancel``, ``asyncio.timeout``, leaving the ``async with``
   early) or a run that ends without a final reply is stored ``abandoned`` with the partial
   text the user was shown; the caller's exception or cancellation propagates unchanged. A
   run that ends without a reply raises nothing: the turn's error class is
   ``neotoma_agent.integrations.NoFinalReply``.

Human in the loop: a run that stops at ``interrupt()`` is not finished. With a checkpointer
the turn is left open (:meth:`neotoma_agent.Turn.suspend`) and its id is kept in the
checkpoint's metadata (key ``neotoma_turn_id``); a later ``astream_turn(graph,
Command(resume=...), config=same thread)`` continues that turn and closes it when the
resumed run answers. A resume that never comes leaves the turn ``open``, which ``audit``
reports. Tool calls recorded before the interrupt are kept in the same checkpoint (key
``neotoma_tool_calls``: a JSON list of :meth:`~neotoma_agent.ToolCall.to_json` records),
so the resumed run writes them with the turn however it is resumed: another process, a new
:class:`~neotoma_agent.NeotomaMemory`, after a restart. Entities ``remember``-ed and
citations made before the interrupt are not carried (LangGraph re-runs the interrupted
tool from its start).

LangGraph runs on asyncio only. Needs ``pip install 'neotoma-agent[langchain]'`` (Python >= 3.11,
as langchain-core does; the core library stays on 3.10).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Final, Literal

from neotoma_agent import (
    NeotomaMemory,
    ToolCall,
    Turn,
    TurnResult,
    TurnState,
)

from ._common import (
    NoFinalReply,
    StreamedTurn,
    args_of,
    content_text,
    missing_framework,
    reply_text,
)

try:
    from langchain_core.messages import (
        AIMessage,
        AIMessageChunk,
        BaseMessage,
        HumanMessage,
        ToolMessage,
        convert_to_messages,
    )
    from langgraph.types import Command
except ImportError as _missing:  # pragma: no cover - exercised by the missing-extra test
    raise missing_framework(
        __name__, "LangGraph and LangChain", "langchain", " (Python >= 3.11)"
    ) from _missing

from ._langgraph_checkpoint import (
    META_KEY,
    has_checkpointer,
    keep_calls,
    pending_turn,
    saved_state,
    with_turn_metadata,
)
from ._langgraph_middleware import (
    RUN,
    NeotomaMiddleware,
    Run,
    check_context_chars,
    record_ended,
    record_tool,
)

__all__ = [
    "META_KEY",
    "NeotomaMiddleware",
    "NoFinalReply",
    "TurnStream",
    "ainvoke_turn",
    "astream_turn",
]

#: The nodes whose model output is the reply: ``create_agent``'s, and the prebuilt
#: ``create_react_agent``'s.
DEFAULT_MODEL_NODES: Final = ("model", "agent")

_STREAM_MODES: Final = ("messages", "updates", "values")

HistoryMode = Literal["auto"] | bool


# ------------------------------------------------------------------ text of messages


def _chunk_text(message: BaseMessage) -> str:
    # A str content is its text (what ``.text`` returns, without building its accessor).
    content = message.content
    return content if isinstance(content, str) else str(message.text)


# ------------------------------------------------------------------ the stream


class TurnStream(StreamedTurn):
    """One graph run as one turn: ``async with astream_turn(...) as s:``.

    Read it with :meth:`text` (the final answer's text deltas, each appended to the reply
    before it is handed on) or :meth:`parts` (every raw LangGraph v2 stream part, a dict
    ``{"type", "ns", "data"}``); the run goes on to its end when the block exits if the
    caller stopped reading (leaving the block by an exception or a cancellation stops the
    run instead). After the block: :attr:`final_state`, :attr:`reply`, :attr:`interrupts`,
    :attr:`result`.

    Which deltas :meth:`text` yields: ``AIMessageChunk`` text from the top-level graph's
    model nodes (``model_nodes``), not subgraphs, not tool nodes. Text a model streams
    before it starts a tool call in the same message cannot be told apart while it streams
    and is yielded; nothing of that message is yielded after its first tool-call chunk, and
    the partial reply starts again after each message that asked for tools.
    """

    def __init__(
        self,
        graph: Any,
        input: Any,
        *,
        memory: NeotomaMemory,
        config: Mapping[str, Any] | None,
        turn_id: str | None,
        user_message: str | None,
        history: HistoryMode,
        context: bool,
        context_chars: int,
        model_nodes: Sequence[str],
        reply: Callable[[Any], str | None] | None,
        astream_kwargs: Mapping[str, Any],
    ) -> None:
        if not isinstance(memory, NeotomaMemory):
            raise TypeError(f"memory must be a NeotomaMemory, not {type(memory).__name__}")
        if history not in ("auto", True, False):
            raise ValueError("history must be 'auto', True or False")
        check_context_chars(context_chars)
        for reserved in ("stream_mode", "version", "config"):
            if reserved in astream_kwargs:
                raise TypeError(f"astream_turn sets {reserved}= itself")
        super().__init__()
        self._graph = graph
        self._input = input
        self._memory = memory
        self._config: dict[str, Any] = dict(config or {})
        self._turn_id = turn_id
        self._user_message = user_message
        self._history = history
        self._context = context
        self._context_chars = context_chars
        self._model_nodes = tuple(model_nodes)
        self._reply_of = reply
        self._kwargs = dict(astream_kwargs)
        self._run: Run | None = None
        self._token: Any = None
        self._checkpointed = False
        self._start_len = 0
        self._final_state: Any = None
        self._interrupts: tuple[Any, ...] = ()
        self._tool_messages: set[str] = set()  # message ids that asked for tools

    # -------------------------------------------------------------- read-only state

    @property
    def result(self) -> TurnResult:
        """What the turn stored (after the block): ``status`` is ``COMPLETED``,
        ``ABANDONED``, or ``SUSPENDED`` for a run waiting at ``interrupt()``."""
        return self.turn.result

    @property
    def final_state(self) -> Any:
        """The graph's state after the run (its last top-level ``values`` part)."""
        return self._final_state

    @property
    def interrupts(self) -> tuple[Any, ...]:
        """The ``Interrupt`` objects the run stopped at (empty when it did not)."""
        return self._interrupts

    @property
    def interrupted(self) -> bool:
        """True when the run stopped at ``interrupt()``."""
        return bool(self._interrupts)

    # -------------------------------------------------------------- reading

    def parts(self) -> AsyncIterator[Any]:
        """Every raw stream part (LangGraph ``version="v2"`` dicts), in order."""
        return self._reader(self._items())

    def _take(self, part: Any) -> str | None:
        # Everything the turn needs from one part; returns the reply delta it carries.
        # Called for every part of the run (a model's every token among them): the common
        # case, a top-level "messages" part, is tested first, and a dict (what LangGraph
        # yields) is told from other mappings without the slower ABC check.
        if not isinstance(part, (dict, Mapping)) or part.get("ns"):
            return None  # not a v2 part, or a subgraph's
        kind = part.get("type")
        data = part.get("data")
        if kind == "messages":
            if isinstance(data, tuple) and len(data) == 2:
                return self._see_message(*data)
            return None
        if kind == "values":
            self._final_state = data
            if part.get("interrupts"):
                self._interrupts = tuple(part["interrupts"])
            return None
        if kind == "updates" and isinstance(data, Mapping):
            interrupts = data.get("__interrupt__")
            if interrupts:
                self._interrupts = tuple(interrupts)
            self._see_updates(data)
        return None

    def _see_message(self, message: Any, metadata: Any) -> str | None:
        if not isinstance(message, AIMessage):
            return None
        if not isinstance(metadata, (dict, Mapping)):
            return None
        if metadata.get("langgraph_node") not in self._model_nodes:
            return None
        namespace = metadata.get("langgraph_checkpoint_ns")
        if namespace and "|" in str(namespace):
            return None  # a model inside a subgraph
        key = message.id or ""
        if key in self._tool_messages:
            return None
        asks_tools = (
            message.tool_call_chunks if isinstance(message, AIMessageChunk) else message.tool_calls
        )
        if asks_tools:
            self._tool_messages.add(key)
            return None
        delta = _chunk_text(message)
        if not delta:
            return None
        self.turn.append(delta)
        return delta

    def _see_updates(self, data: Mapping[str, Any]) -> None:
        # Tool calls the graph ran, from its node updates: recorded here unless the
        # middleware already recorded them (it also knows their duration and exceptions).
        run = self._run
        for update in data.values():
            messages = update.get("messages") if isinstance(update, Mapping) else None
            if not isinstance(messages, list):
                continue
            for message in messages:
                if isinstance(message, AIMessage) and message.tool_calls:
                    if self.turn.state is TurnState.OPEN and not isinstance(
                        message, AIMessageChunk
                    ):
                        # A message that asked for tools is not the reply.
                        self.turn.reply = ""
                    for call in message.tool_calls:
                        call_id = call.get("id")
                        if call_id and run is not None:
                            run.asked.setdefault(
                                call_id, (call["name"], call.get("args"), time.time())
                            )
                elif isinstance(message, ToolMessage) and run is not None:
                    self._record_tool_message(run, message)

    def _record_tool_message(self, run: Run, message: ToolMessage) -> None:
        call_id = message.tool_call_id or None
        if call_id is None or call_id in run.recorded:
            return
        name, args, asked_at = run.asked.get(call_id, (message.name or "tool", None, time.time()))
        record_ended(
            run,
            run.turn,
            (call_id, name, args),
            datetime.fromtimestamp(asked_at, timezone.utc),
            message=message,
            duration_ms=round((time.time() - asked_at) * 1000, 3),
        )

    # -------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> TurnStream:
        self._enter_once()
        graph, memory = self._graph, self._memory
        checkpointed = has_checkpointer(graph, self._config)
        state = await saved_state(graph, self._config) if checkpointed else None
        continuation = self._input is None or isinstance(self._input, Command)
        carried: tuple[ToolCall, ...] = ()
        turn_id: str | None
        if continuation:
            pending = pending_turn(state, memory)
            if pending is not None:
                turn_id, text, carried = pending
            elif self._user_message is not None:
                turn_id, text = self._turn_id, self._user_message
            else:
                raise ValueError(
                    "this run continues a thread (input is None or a Command) but no open "
                    "Neotoma turn waits on it: pass user_message= to store one"
                )
        else:
            turn_id = self._turn_id
            text = (
                self._user_message if self._user_message is not None else _input_text(self._input)
            )
        turn = memory.turn(text, turn_id=turn_id)
        self._turn = turn
        await turn.__aenter__()
        try:
            inject = not continuation and (
                self._history is True or (self._history == "auto" and not checkpointed)
            )
            run = Run(turn, self._context, self._context_chars, not (inject or checkpointed))
            for call in carried:
                record_tool(run, turn, call.call_id, **_fields_of(call))
            self._run = run
            graph_input = self._input
            if not continuation:
                graph_input = _with_history(graph_input, turn, inject)
            self._start_len = _message_count(state) + (
                0 if continuation else _message_count(graph_input)
            )
            # LangGraph copies the config it is given.
            config = with_turn_metadata(self._config, turn) if checkpointed else self._config
            self._token = RUN.set(run)
            self._checkpointed = checkpointed
            extra_modes = self._kwargs.pop("stream_modes", ())
            modes = list(dict.fromkeys((*_STREAM_MODES, *extra_modes)))
            self._source = graph.astream(
                graph_input, config, stream_mode=modes, version="v2", **self._kwargs
            )
        except BaseException as exc:
            await self._close_turn(exc)
            raise
        return self

    async def _stop(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            with contextlib.suppress(ValueError):  # exited in another context than entered
                RUN.reset(token)
        await super()._stop()

    def _settle(self) -> BaseException | None:
        # After a run that ended by itself: the reply, a suspension, or no reply.
        turn = self.turn
        if self._interrupts:
            if self._checkpointed:
                turn.suspend(tools_kept=True)  # in the checkpoint: see keep_calls
                return None
            return NoFinalReply("the run stopped at interrupt() without a checkpointer")
        reply = self._final_reply()
        if reply is None:
            return NoFinalReply("the run ended without a final reply")
        turn.reply = reply
        self._reply = reply
        return None

    def _final_reply(self) -> str | None:
        state = self._final_state
        if self._reply_of is not None:
            return self._reply_of(state)
        if not isinstance(state, Mapping):
            return None
        structured = state.get("structured_response")
        if structured is not None:
            return reply_text(structured)
        messages = state.get("messages")
        if not isinstance(messages, list) or len(messages) <= self._start_len:
            return None  # this run added no message
        last = messages[-1]
        if not isinstance(last, AIMessage) or last.tool_calls:
            return None
        return _chunk_text(last)

    async def _close_turn(self, failure: BaseException | None) -> None:
        turn = self.turn
        run = self._run
        if failure is not None and run is not None:
            # Calls the model asked for whose result never came: stopped with the run.
            for call_id, (name, args, asked_at) in list(run.asked.items()):
                when = datetime.fromtimestamp(asked_at, timezone.utc)
                record_ended(run, turn, (call_id, name, args), when, failure=failure)
        await super()._close_turn(failure)
        if turn.state is TurnState.SUSPENDED and turn.result.tools:
            await keep_calls(self._graph, self._config, turn.turn_id, turn.result.tools)


def _fields_of(call: ToolCall) -> dict[str, Any]:
    data = call.to_json()
    data.pop("call_id", None)
    return data


def _input_text(graph_input: Any) -> str:
    """The user text of a fresh run's input: a ``str``, or the last human message."""
    if isinstance(graph_input, str):
        return graph_input
    if isinstance(graph_input, Mapping) and isinstance(graph_input.get("messages"), list):
        for message in reversed(convert_to_messages(graph_input["messages"])):
            if isinstance(message, HumanMessage):
                return content_text(message.content)
    raise ValueError(
        "the input holds no user message (a str, or a dict whose 'messages' hold a human "
        "message): pass user_message= for the text to store"
    )


def _with_history(graph_input: Any, turn: Turn, inject: bool) -> Any:
    # A str becomes the messages input; earlier turns go first when the graph keeps none.
    earlier: list[BaseMessage] = []
    if inject:
        for h in turn.history:
            earlier.append(HumanMessage(h.user))
            if h.reply is not None:
                earlier.append(AIMessage(h.reply))
    if isinstance(graph_input, str):
        return {"messages": [*earlier, HumanMessage(graph_input)]}
    if (
        earlier
        and isinstance(graph_input, Mapping)
        and isinstance(graph_input.get("messages"), list)
    ):
        return {**graph_input, "messages": [*earlier, *graph_input["messages"]]}
    return graph_input


def _message_count(state_or_input: Any) -> int:
    values = getattr(state_or_input, "values", state_or_input)
    if isinstance(values, Mapping) and isinstance(values.get("messages"), list):
        return len(values["messages"])
    return 0


# ------------------------------------------------------------------ entry points


def astream_turn(
    graph: Any,
    input: Any,
    *,
    memory: NeotomaMemory,
    config: Mapping[str, Any] | None = None,
    turn_id: str | None = None,
    user_message: str | None = None,
    history: HistoryMode = "auto",
    context: bool = True,
    context_chars: int = 4000,
    model_nodes: Sequence[str] = DEFAULT_MODEL_NODES,
    reply: Callable[[Any], str | None] | None = None,
    **astream_kwargs: Any,
) -> TurnStream:
    """Run any compiled graph as one turn: ``async with astream_turn(...) as s:``.

    ``input`` is what ``graph.astream`` takes: a ``str`` (run as ``{"messages":
    [HumanMessage(text)]}``), a state dict whose ``messages`` end with the user's message
    (a list of content parts is stored as its text parts, one per line, other parts as
    ``[image]``-style placeholders), or ``Command(resume=...)`` / ``None`` to continue the
    thread's interrupted turn. ``user_message`` overrides the stored text (for inputs
    without messages). ``config`` is passed on (its ``metadata`` gains :data:`META_KEY`).

    ``history``: ``"auto"`` (default) puts the conversation's earlier turns
    (``t.history``) before the input's messages only when the graph has no checkpointer
    (a checkpointed thread already carries them); ``True`` / ``False`` force it.
    ``context`` / ``context_chars``: what :class:`NeotomaMiddleware` adds to each model
    call of this turn (``t.context(max_chars=context_chars)``; ``context=False``: nothing).
    ``model_nodes``: the nodes whose model text is the reply. ``reply``: for graphs whose
    state has no ``messages``, a function from the final state to the reply text (``None``:
    no reply). Other keywords go to ``graph.astream`` (``context=``, ``durability=``,
    ``subgraphs=``; ``stream_modes=[...]`` adds stream modes to the three it needs).
    ``ValueError`` / ``TypeError`` for bad arguments, before anything is stored.
    """
    return TurnStream(
        graph,
        input,
        memory=memory,
        config=config,
        turn_id=turn_id,
        user_message=user_message,
        history=history,
        context=context,
        context_chars=context_chars,
        model_nodes=model_nodes,
        reply=reply,
        astream_kwargs=astream_kwargs,
    )


@args_of(astream_turn)
async def ainvoke_turn(*args: Any, **kwargs: Any) -> TurnStream:
    """Run the graph to its end as one turn, without streaming; return the finished stream.

    The same arguments and rules as :func:`astream_turn`; read ``.final_state``,
    ``.reply``, ``.interrupts`` and ``.result`` on what it returns::

        run = await ainvoke_turn(agent, "What about Acme Corp?", memory=memory)
        print(run.reply, run.result.stored_status)
    """
    stream = astream_turn(*args, **kwargs)
    async with stream:
        pass
    return stream
