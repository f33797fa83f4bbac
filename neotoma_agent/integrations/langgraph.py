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
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any, Final, Literal

from neotoma_agent import (
    NeotomaMemory,
    ToolCall,
    Turn,
    TurnResult,
    TurnState,
    current_turn,
    error_class_name,
)

from ._common import NoFinalReply, StreamedTurn, content_text, missing_framework, reply_text

try:
    from langchain_core.messages import (
        AIMessage,
        AIMessageChunk,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        convert_to_messages,
    )
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.errors import GraphBubbleUp
    from langgraph.types import Command
except ImportError as _missing:  # pragma: no cover - exercised by the missing-extra test
    raise missing_framework(
        __name__, "LangGraph and LangChain", "langchain", " (Python >= 3.11)"
    ) from _missing

try:  # the middleware needs the `langchain` package itself; the wrappers need only langgraph
    from langchain.agents.middleware import AgentMiddleware, ModelRequest
    from langgraph.prebuilt.tool_node import ToolCallRequest
except ImportError:  # pragma: no cover - langgraph installed without langchain
    AgentMiddleware = object  # type: ignore[assignment,misc,unused-ignore]

__all__ = [
    "META_KEY",
    "NeotomaMiddleware",
    "NoFinalReply",
    "TurnStream",
    "ainvoke_turn",
    "astream_turn",
]

#: The checkpoint-metadata key that holds an interrupted turn's id; its conversation id and
#: user text sit beside it (checkpoint metadata keeps only flat str/number values).
META_KEY: Final = "neotoma_turn_id"
_META_CONVERSATION: Final = "neotoma_conversation_id"
_META_USER: Final = "neotoma_user_message"
#: the tool calls the turn made before the interrupt: a JSON list of ``ToolCall.to_json()``
_META_TOOLS: Final = "neotoma_tool_calls"

#: The nodes whose model output is the reply: ``create_agent``'s, and the prebuilt
#: ``create_react_agent``'s.
DEFAULT_MODEL_NODES: Final = ("model", "agent")

_STREAM_MODES: Final = ("messages", "updates", "values")

HistoryMode = Literal["auto"] | bool

_logger = logging.getLogger(__name__)


# ------------------------------------------------------------------ the run in progress


@dataclasses.dataclass(eq=False)
class _Run:
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
        if self.block is None:
            self.block = (
                self.turn.context(max_chars=self.context_chars, history=self.context_history)
                if self.context
                else ""
            )
        return self.block


_RUN: ContextVar[_Run | None] = ContextVar("neotoma_langgraph_run", default=None)


def _record_tool(run: _Run | None, turn: Turn, call_id: str | None, **fields: Any) -> None:
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
        _log_unrecorded(fields.get("status"), exc)


def _log_unrecorded(status: object, exc: BaseException) -> None:
    # The reason is the exception's class only: its text may quote the tool's arguments.
    _logger.warning("tool.not_recorded tool_status=%s reason=%s", status, type(exc).__name__)


def _turn_here() -> tuple[_Run | None, Turn | None]:
    run = _RUN.get()
    if run is not None:
        return run, run.turn
    return None, current_turn()


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
        if isinstance(context_chars, bool) or not isinstance(context_chars, int):
            raise ValueError("context_chars must be an int >= 0")
        if context_chars < 0:
            raise ValueError("context_chars must be an int >= 0")
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
        self._run: _Run | None = None
        self._token: Any = None
        self._checkpointed = False
        self._start_len = 0
        self._final_state: Any = None
        self._interrupts: tuple[Any, ...] = ()
        self._tool_messages: set[str] = set()  # message ids that asked for tools
        self._reply: str | None = None

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

    @property
    def reply(self) -> str | None:
        """The stored reply (after a completed run), else ``None``."""
        return self._reply

    # -------------------------------------------------------------- reading

    def parts(self) -> AsyncIterator[Any]:
        """Every raw stream part (LangGraph ``version="v2"`` dicts), in order."""
        return self._reader(self._items())

    def text(self) -> AsyncIterator[str]:
        """The final answer's text deltas, each appended to the reply first."""
        return self._reader(self._deltas())

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

    def _record_tool_message(self, run: _Run, message: ToolMessage) -> None:
        call_id = message.tool_call_id or None
        if call_id is None or call_id in run.recorded:
            return
        name, args, asked_at = run.asked.get(call_id, (message.name or "tool", None, time.time()))
        _record_tool(
            run,
            run.turn,
            call_id,
            name=name,
            args=args,
            result=message.content,
            status="error" if message.status == "error" else "ok",
            invoked_at=datetime.fromtimestamp(asked_at, timezone.utc),
            duration_ms=round((time.time() - asked_at) * 1000, 3),
        )

    # -------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> TurnStream:
        self._enter_once()
        graph, memory = self._graph, self._memory
        checkpointed = _has_checkpointer(graph, self._config)
        state = await self._saved_state() if checkpointed else None
        continuation = self._input is None or isinstance(self._input, Command)
        carried: tuple[ToolCall, ...] = ()
        turn_id: str | None
        if continuation:
            pending = _pending_turn(state, memory)
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
            run = _Run(turn, self._context, self._context_chars, not (inject or checkpointed))
            for call in carried:
                _record_tool(run, turn, call.call_id, **_fields_of(call))
            self._run = run
            graph_input = self._input
            if not continuation:
                graph_input = _with_history(graph_input, turn, inject)
            self._start_len = _message_count(state) + (
                0 if continuation else _message_count(graph_input)
            )
            config = self._config  # LangGraph copies the config it is given
            if checkpointed:
                # Only a checkpointed thread can be resumed: the turn to resume rides in its
                # checkpoints' metadata (LangChain copies metadata into every run it starts).
                metadata = dict(config.get("metadata") or {})
                metadata[META_KEY] = turn.turn_id
                metadata[_META_CONVERSATION] = turn.conversation_id
                metadata[_META_USER] = turn.user_message
                config = {**config, "metadata": metadata}
            self._token = _RUN.set(run)
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
                _RUN.reset(token)
        await super()._stop()

    def _settle(self) -> BaseException | None:
        # After a run that ended by itself: the reply, a suspension, or no reply.
        turn = self.turn
        if self._interrupts:
            if self._checkpointed:
                turn.suspend(tools_kept=True)  # in the checkpoint: see _keep_calls
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
                _record_tool(
                    run,
                    turn,
                    call_id,
                    name=name,
                    args=args,
                    status="error" if isinstance(failure, Exception) else "cancelled",
                    invoked_at=datetime.fromtimestamp(asked_at, timezone.utc),
                    error_class=error_class_name(failure),
                )
        await super()._close_turn(failure)
        if turn.state is TurnState.SUSPENDED and turn.result.tools:
            await self._keep_calls(turn.result.tools)

    async def _keep_calls(self, calls: tuple[ToolCall, ...]) -> None:
        # The tool calls of a turn waiting at interrupt() ride in the thread's checkpoint,
        # beside its turn id, so that the resumed run finds them wherever it runs (another
        # process, after a restart). Checkpoint metadata is fixed when a run starts, so the
        # interrupted checkpoint is put again as it was with one more key: a checkpointer
        # stores a put of a checkpoint id it holds in that checkpoint's place.
        saver = _saver(self._graph, self._config)
        configurable = dict(self._config.get("configurable") or {})
        configurable.pop("checkpoint_id", None)  # the thread's head: this run's last checkpoint
        configurable.setdefault("checkpoint_ns", "")
        try:
            saved = await saver.aget_tuple({"configurable": configurable})
            if saved is None or saved.metadata.get(META_KEY) != self.turn.turn_id:
                raise LookupError("the interrupted checkpoint is not this turn's")
            metadata = dict(saved.metadata)
            metadata[_META_TOOLS] = json.dumps([c.to_json() for c in calls], ensure_ascii=False)
            parent = saved.parent_config or {
                "configurable": {
                    key: value
                    for key, value in saved.config["configurable"].items()
                    if key != "checkpoint_id"
                }
            }
            await saver.aput(parent, saved.checkpoint, metadata, {})  # type: ignore[arg-type,unused-ignore]
        except Exception as exc:
            # The run's own outcome stands (it stopped at interrupt()); the resumed turn
            # will lack these calls, which is said here without their content.
            _logger.warning("tool.not_kept calls=%d reason=%s", len(calls), type(exc).__name__)

    async def _saved_state(self) -> Any:
        try:
            return await self._graph.aget_state(self._config)
        except ValueError:
            return None  # no thread id in the config: nothing saved to continue


def _fields_of(call: ToolCall) -> dict[str, Any]:
    data = call.to_json()
    data.pop("call_id", None)
    return data


def _kept_calls(meta: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    # The calls an interrupted run kept in its checkpoint (see TurnStream._keep_calls).
    kept = meta.get(_META_TOOLS)
    if not isinstance(kept, str):
        return ()
    try:
        return tuple(ToolCall.from_json(data) for data in json.loads(kept))
    except (TypeError, ValueError) as exc:  # not what _keep_calls wrote: left out, said so
        _logger.warning("tool.not_carried reason=%s", type(exc).__name__)
        return ()


def _has_checkpointer(graph: Any, config: Mapping[str, Any]) -> bool:
    saver = getattr(graph, "checkpointer", None)
    if saver is not None and saver is not False:
        return True
    configurable = config.get("configurable") or {}
    return bool(configurable.get("__pregel_checkpointer"))


def _saver(graph: Any, config: Mapping[str, Any]) -> BaseCheckpointSaver[Any]:
    # The checkpointer a checkpointed run wrote to: the graph's own, or its parent's.
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, BaseCheckpointSaver):
        saver = (config.get("configurable") or {}).get("__pregel_checkpointer")
    if not isinstance(saver, BaseCheckpointSaver):
        raise LookupError("no checkpointer to keep the tool calls in")
    return saver


def _pending_turn(
    state: Any, memory: NeotomaMemory
) -> tuple[str, str, tuple[ToolCall, ...]] | None:
    # The turn an interrupted run left open on this thread, from the checkpoint metadata:
    # its id, its user text and the tool calls it made before the interrupt.
    if state is None or not getattr(state, "interrupts", ()):
        return None
    meta = getattr(state, "metadata", None) or {}
    turn_id, text = meta.get(META_KEY), meta.get(_META_USER)
    if not isinstance(turn_id, str) or not isinstance(text, str):
        return None
    if meta.get(_META_CONVERSATION) != memory.conversation_id:
        raise ValueError(
            "the turn waiting on this thread belongs to another conversation than this memory's"
        )
    return turn_id, text, _kept_calls(meta)


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


async def ainvoke_turn(
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
    """Run the graph to its end as one turn, without streaming; return the finished stream.

    The same arguments and rules as :func:`astream_turn`; read ``.final_state``,
    ``.reply``, ``.interrupts`` and ``.result`` on what it returns::

        run = await ainvoke_turn(agent, "What about Acme Corp?", memory=memory)
        print(run.reply, run.result.stored_status)
    """
    stream = astream_turn(
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
        **astream_kwargs,
    )
    async with stream:
        pass
    return stream


# ------------------------------------------------------------------ the middleware


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

    def __init__(self, *, context: bool = True, context_chars: int = 4000) -> None:
        if isinstance(context_chars, bool) or not isinstance(context_chars, int):
            raise ValueError("context_chars must be an int >= 0")
        if context_chars < 0:
            raise ValueError("context_chars must be an int >= 0")
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
        call = request.tool_call
        name, args, call_id = call.get("name") or "tool", call.get("args"), call.get("id")
        invoked_at = datetime.now(timezone.utc)
        started = time.perf_counter()
        try:
            outcome = await handler(request)
        except GraphBubbleUp:
            raise  # interrupt() or a parent command: not a finished call
        except BaseException as exc:
            _record_tool(
                run,
                turn,
                call_id,
                name=name,
                args=args,
                status="error" if isinstance(exc, Exception) else "cancelled",
                invoked_at=invoked_at,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
                error_class=error_class_name(exc),
            )
            raise
        failed = isinstance(outcome, ToolMessage) and outcome.status == "error"
        _record_tool(
            run,
            turn,
            call_id,
            name=name,
            args=args,
            result=outcome.content if isinstance(outcome, ToolMessage) else None,
            status="error" if failed else "ok",
            invoked_at=invoked_at,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return outcome


def _with_block(system: SystemMessage | None, block: str) -> SystemMessage:
    if system is None:
        return SystemMessage(block)
    content = system.content
    if isinstance(content, str):
        return SystemMessage(f"{content}\n\n{block}" if content else block)
    return SystemMessage([*content, {"type": "text", "text": block}])
