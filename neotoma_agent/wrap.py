"""``with_memory``: put the turn protocol around an agent function you already have.

The agent is called as ``agent_fn(user_message, turn)`` (or ``agent_fn(user_message)`` if it
takes one argument), where ``turn`` is the open :class:`~neotoma_agent.Turn`: read
``turn.retrieved`` to ground the reply, call ``turn.cite(...)`` for entities it relies on.
Three kinds of agent are accepted:

- a plain function returning the reply: run in a worker thread, so a slow (blocking) LLM
  client never stalls the event loop;
- an ``async def`` returning the reply (or ``None`` after writing ``turn.reply`` itself);
- an async generator yielding chunks: each chunk is appended to the reply and handed on.

``await wrapped(message)`` runs one turn and returns an :class:`AgentReply` (the reply and
the :class:`~neotoma_agent.TurnResult`); ``async with wrapped.stream(message) as s:`` then
``async for chunk in s`` streams it.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Literal

import anyio
import anyio.to_thread
import attrs

from ._memory import NeotomaMemory, TurnIds
from ._turn import Turn
from ._turn_result import TurnResult
from ._util.signature import check_options
from .exceptions import TurnStateError
from .transport._base import ExitWith, Transport

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = ["AgentReply", "AgentStream", "MemoryAgent", "StoppedEarly", "with_memory"]

AgentKind = Literal["sync", "async", "asyncgen"]


class StoppedEarly(Exception):
    """Recorded as a turn's error class when a stream's reader left before its end."""


@attrs.frozen
class AgentReply:
    """One wrapped turn: the exact reply and what was stored."""

    reply: str
    result: TurnResult


def _kind(agent_fn: Callable[..., Any]) -> AgentKind:
    if inspect.isasyncgenfunction(agent_fn):
        return "asyncgen"
    call = getattr(agent_fn, "__call__", None)  # noqa: B004 - callable objects too
    if inspect.iscoroutinefunction(agent_fn) or inspect.iscoroutinefunction(call):
        return "async"
    if inspect.isasyncgenfunction(call):
        return "asyncgen"
    return "sync"


def _wants_turn(agent_fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(agent_fn).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _reply_value(value: object, turn: Turn) -> None:
    if value is None:
        if not turn.reply:
            # Nothing returned and nothing written: a bug in the agent (a missing return),
            # not an empty reply; storing "" as completed would hide it.
            raise TypeError(
                "the agent returned None and wrote no reply (return a str, write turn.reply, "
                "or return '' for an empty reply)"
            )
        return  # the agent wrote turn.reply itself
    if not isinstance(value, str):
        raise TypeError(f"an agent must return a str (or None), not {type(value).__name__}")
    turn.reply = value


class AgentStream(ExitWith):
    """One streamed turn; use ``async with wrapped.stream(msg) as s: async for c in s:``.

    After the block, :attr:`reply` and :attr:`result` hold what was stored. Leaving the block
    before the agent finished records the turn as abandoned (error class
    :class:`StoppedEarly`) with the chunks read so far as the partial reply.
    """

    def __init__(self, agent: MemoryAgent, turn: Turn) -> None:
        self._agent = agent
        self._turn = turn
        self._source: AsyncIterator[str] | None = None
        self._done = False

    @property
    def turn(self) -> Turn:
        """The underlying turn (``retrieved``, ``cite``, ...)."""
        return self._turn

    @property
    def reply(self) -> str:
        """The reply so far (all of it, after the block)."""
        return self._turn.reply

    @property
    def result(self) -> TurnResult:
        """What the turn stored (after the block)."""
        return self._turn.result

    async def __aenter__(self) -> AgentStream:
        await self._turn.__aenter__()
        try:
            self._source = self._agent._chunks(self._turn)
        except BaseException as exc:
            await self._turn.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __aiter__(self) -> AgentStream:
        return self

    async def __anext__(self) -> str:
        if self._source is None:
            raise TurnStateError("use `async with wrapped.stream(message) as s:` to stream")
        if self._done:
            raise StopAsyncIteration
        try:
            chunk = await self._source.__anext__()
        except StopAsyncIteration:
            self._done = True
            raise
        if not isinstance(chunk, str):
            raise TypeError(f"an agent must yield str chunks, not {type(chunk).__name__}")
        self._turn.append(chunk)
        return chunk

    async def _exit(self, exc: BaseException | None) -> None:
        source, self._source = self._source, None
        if exc is None and not self._done:
            exc = StoppedEarly("the stream was left before the agent finished")
        try:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        finally:
            if exc is None:
                await self._turn.__aexit__(None, None, None)
            else:
                await self._turn.__aexit__(type(exc), exc, exc.__traceback__)


class MemoryAgent:
    """An agent function wrapped by :func:`with_memory`; call it once per user message."""

    def __init__(self, agent_fn: Callable[..., Any], memory: NeotomaMemory) -> None:
        self.agent_fn = agent_fn
        self.memory = memory
        self.kind: AgentKind = _kind(agent_fn)
        self._wants_turn = _wants_turn(agent_fn)

    def __repr__(self) -> str:
        name = getattr(self.agent_fn, "__qualname__", repr(self.agent_fn))
        return f"<MemoryAgent {name} ({self.kind}) conversation={self.memory.conversation_id!r}>"

    def _args(self, turn: Turn) -> tuple[Any, ...]:
        return (turn.user_message, turn) if self._wants_turn else (turn.user_message,)

    async def _chunks(self, turn: Turn) -> AsyncGenerator[str, None]:
        # Every kind of agent seen as a stream of chunks (one chunk for the non-streaming).
        if self.kind == "asyncgen":
            source = self.agent_fn(*self._args(turn))
            try:
                async for chunk in source:
                    yield chunk
            finally:
                await source.aclose()
            return
        args = self._args(turn)
        if self.kind == "async":
            value = await self.agent_fn(*args)
        else:
            value = await anyio.to_thread.run_sync(lambda: self.agent_fn(*args))
        if value is not None and not turn.reply and isinstance(value, str):
            yield value  # the whole reply as one chunk, so a stream's reader sees it
            return
        _reply_value(value, turn)

    async def __call__(
        self,
        user_message: str,
        *,
        on_chunk: Callable[[str], object] | None = None,
        **options: Unpack[TurnIds],
    ) -> AgentReply:
        """Run one turn: retrieval + user store, the agent, the closing store.

        ``on_chunk`` is called with each chunk of a streaming agent as it arrives. The
        agent's exception (or a cancellation) propagates after the turn is recorded as
        abandoned. ``turn_id``, ``turn_number``, ``user_extra`` and ``revision`` as
        :meth:`NeotomaMemory.turn` takes them.
        """
        turn = self._turn("__call__", user_message, options)
        async with turn:
            source = self._chunks(turn)
            try:
                async for chunk in source:
                    if not isinstance(chunk, str):
                        raise TypeError(
                            f"an agent must yield str chunks, not {type(chunk).__name__}"
                        )
                    turn.append(chunk)
                    if on_chunk is not None:
                        on_chunk(chunk)
            finally:
                await source.aclose()
        return AgentReply(turn.reply, turn.result)

    def stream(self, user_message: str, **options: Unpack[TurnIds]) -> AgentStream:
        """One streamed turn: ``async with agent.stream(msg) as s: async for chunk in s:``
        (the options as :meth:`__call__` takes them)."""
        return AgentStream(self, self._turn("stream", user_message, options))

    def _turn(self, function: str, user_message: str, options: TurnIds) -> Turn:
        check_options(options, TurnIds, function)  # a turn's other options are not taken here
        return self.memory.turn(user_message, **options)


def with_memory(
    agent_fn: Callable[..., Any],
    *,
    memory: NeotomaMemory | None = None,
    transport: Transport | None = None,
    conversation_id: str | None = None,
    **settings: Any,
) -> MemoryAgent:
    """Wrap ``agent_fn`` so that every call is one stored turn.

    The agent is called as ``agent_fn(user_message, turn)``, or ``agent_fn(user_message)``
    if it takes one argument; ``turn`` is the open :class:`~neotoma_agent.Turn` (read
    ``turn.retrieved``, call ``turn.cite(...)``). Three kinds are accepted:

    - a plain function returning the reply (a ``str``): run in a worker thread, so a
      blocking LLM client never stalls the event loop;
    - an ``async def`` returning the reply, or ``None`` after writing ``turn.reply`` itself
      (``None`` with nothing written is refused as a bug: ``TypeError``, turn abandoned);
    - an async generator yielding ``str`` chunks: each is appended to the reply as it comes.

    Then ``answer = await wrapped("hi")`` runs one turn: ``answer.reply`` is the exact reply,
    ``answer.result`` the :class:`~neotoma_agent.TurnResult`; ``on_chunk=`` sees each chunk.
    ``async with wrapped.stream("hi") as chunks: async for c in chunks: ...`` streams it;
    leaving the loop early records the turn as abandoned (:class:`StoppedEarly`) with the
    chunks read so far. ``turn_id=``, ``turn_number=``, ``user_extra=`` and ``revision=`` are
    passed to :meth:`NeotomaMemory.turn`. An agent that raises (or is cancelled) gets its
    turn recorded as abandoned, and the error propagates.

    Pass a :class:`NeotomaMemory`, or a ``transport`` and ``conversation_id`` (plus any other
    :class:`NeotomaMemory` setting, e.g. ``platform=``) to build one.
    """
    if not callable(agent_fn):
        raise TypeError("agent_fn must be callable")
    if memory is not None:
        if transport is not None or conversation_id is not None or settings:
            raise ValueError("pass either memory=, or transport= and conversation_id=, not both")
        return MemoryAgent(agent_fn, memory)
    if transport is None or conversation_id is None:
        raise ValueError("with_memory needs memory=, or transport= and conversation_id=")
    return MemoryAgent(
        agent_fn, NeotomaMemory(transport, conversation_id=conversation_id, **settings)
    )
