"""What two or more framework integrations share: small, generic, framework-free.

- :class:`NoFinalReply`: the error class a turn is abandoned with when the framework's run
  ended without a final reply (tool calls waiting for approval, a run cancelled by the
  framework's own "stop now", an interrupted graph). It is raised inside the turn's body
  only to abandon the turn; the caller never sees it.
- :func:`reply_text`: the stored text of a final output that may not be a ``str``.
- :func:`parts_text`: the stored text of a prompt given as a list of parts;
  :func:`content_text` that of a message content of ``{"type": "text", "text": ...}``
  blocks (LangChain messages, the Claude Agent SDK's user messages).
- :func:`missing_framework`: the ``ImportError`` a module raises when its framework is absent.
- :func:`args_of`: an entry point taking exactly another's parameters (``ainvoke_turn``
  is ``astream_turn`` run to its end): the parameter list is stated once.
- :func:`record_call`: record one tool call the framework ran on the turn, never failing it.
- :class:`TurnBlock`: ``async with`` over one turn (one exit signature, one way to close
  the turn with a failure): the base of :class:`StreamedTurn` and of the OpenAI Agents stream.
- :class:`StreamedTurn`: the exit steps of a run read as a stream inside one turn (the
  reader left early, the rest read, the run stopped, the reply settled, the turn closed),
  shared by LangGraph's ``TurnStream`` and the Claude Agent SDK's ``ClaudeTurn``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Literal, ParamSpec, TypeVar

from neotoma_agent import (
    NeotomaError,
    StoppedEarly,
    Turn,
    TurnResult,
    TurnState,
    error_class_name,
)

__all__ = [
    "NoFinalReply",
    "StreamedTurn",
    "TurnBlock",
    "args_of",
    "block_text",
    "content_text",
    "missing_framework",
    "parts_text",
    "plain",
    "planned",
    "record_call",
    "reply_text",
]

_log = logging.getLogger("neotoma_agent.integrations")

P = ParamSpec("P")
R = TypeVar("R")


def args_of(source: Callable[P, object]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """An entry point taking every parameter of ``source`` (a function, or a classmethod
    read from its class), stated once, on ``source``.

    The decorated function takes ``*args, **kwargs`` and hands them on; it keeps its own
    name, docstring and return type, and shows ``source``'s parameters wherever a reader
    looks: type checkers and editors (a ``ParamSpec``), ``inspect.signature`` and
    ``help()`` (``__signature__``) and the API reference (``scripts/docs_signatures.py``).
    The core's methods do the same with ``_util.signature.args_of``, which a wing does not
    import.
    """

    def take(function: Callable[..., R]) -> Callable[P, R]:
        own = inspect.signature(function)
        given = inspect.signature(source).parameters.values()
        function.__signature__ = own.replace(parameters=list(given))  # type: ignore[attr-defined]
        return function

    return take


class NoFinalReply(Exception):
    """Recorded as a turn's error class when the agent's run ended without a final reply.

    The turn is stored ``abandoned`` with the text the user saw (never an approval request
    or an empty output stored as a completed reply); the run's own result is still returned
    to the caller, who may resume it.
    """

    __module__ = "neotoma_agent.integrations"


def missing_framework(module: str, framework: str, extra: str, note: str = "") -> ImportError:
    """The ``ImportError`` for ``module`` imported without ``framework`` installed."""
    return ImportError(
        f"{module} needs {framework}: pip install 'neotoma-agent[{extra}]'{note}",
        name=module,
    )


def reply_text(output: object) -> str:
    """The text stored as the reply for a final output.

    A ``str`` is stored as it is. Anything else (a pydantic model, a dataclass, a dict, a
    list, a number) is stored as its JSON: pydantic's JSON when the object has
    ``model_dump_json`` (every pydantic model), else plain JSON of dataclasses and JSON
    values, with non-ASCII kept; ``str(output)`` for what JSON cannot hold. ``None`` is not
    a reply: callers treat it as :class:`NoFinalReply`.
    """
    if isinstance(output, str):
        return output
    dump = getattr(output, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    return json.dumps(output, ensure_ascii=False, default=_jsonable)


def _jsonable(value: object) -> Any:
    # What json.dumps cannot hold: pydantic models and dataclasses as their fields, the
    # rest (datetimes, UUIDs, paths) as their str.
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def plain(value: object) -> Any:
    """``value`` as plain JSON (what a tool call's args and result must be), by the same
    rules as :func:`reply_text`; a value JSON cannot hold at all becomes its ``str``."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, default=_jsonable))
    except (TypeError, ValueError):  # a cycle, a non-str key
        return str(value)


def record_call(
    turn: Turn | None,
    name: str,
    *,
    args: object,
    result: object = None,
    failure: BaseException | None = None,
    invoked_at: datetime.datetime,
    duration_ms: float,
    call_id: str | None,
) -> None:
    """Record one call the framework ran on ``turn`` (if it is open); never raise.

    ``failure``: the exception the call ended with (``cancelled`` for a cancellation,
    ``error`` otherwise, its class kept). A record the tool-call API refuses (a call id
    seen with other content) is logged at WARNING and left out: recording a call must not
    fail the run that made it.
    """
    if turn is None or turn.state is not TurnState.OPEN:
        return
    status: Literal["ok", "error", "cancelled"]
    if failure is None:
        status = "ok"
    elif isinstance(failure, (asyncio.CancelledError, KeyboardInterrupt)):
        status = "cancelled"
    else:
        status = "error"
    try:
        turn.record_tool(
            name,
            args=plain(args),
            result=None if failure is not None else plain(result),
            status=status,
            invoked_at=invoked_at,
            duration_ms=duration_ms,
            call_id=call_id,
            error_class=None if failure is None else error_class_name(failure),
        )
    except (TypeError, ValueError, NeotomaError) as exc:
        _log.warning("integrations.tool_not_recorded: %s", type(exc).__name__)


def parts_text(parts: Iterable[object], describe: Callable[[object], str | None]) -> str:
    """The stored text of a multi-part prompt: its text parts, one per line, in order.

    ``describe(part)`` returns the text of a part, or ``None`` for a part that has no text
    (an image, a file, audio): such a part is stored as a ``[kind]`` placeholder only when
    ``describe`` says so by returning it, so the stored message shows that something was
    attached without copying its bytes or URL.
    """
    lines = [text for text in map(describe, parts) if text is not None]
    return "\n".join(lines)


def block_text(block: object) -> str:
    """One content block's stored text, for :func:`parts_text`: a ``str`` as it is, a text
    block's ``text``, and ``[type]`` for any other block (``[image]``, ``[document]``;
    ``[part]`` when it names no type), never its bytes or URL."""
    if isinstance(block, str):
        return block
    if isinstance(block, Mapping):
        kind = block.get("type")
        text = block.get("text")
        if kind == "text" and isinstance(text, str):
            return text
        return f"[{kind if isinstance(kind, str) else 'part'}]"
    return "[part]"


def planned(failure: BaseException) -> bool:
    """Whether ``failure`` is an abandon an integration raised itself (no final reply, a
    reader that left early): the turn records it, the caller never sees it."""
    return isinstance(failure, NoFinalReply | StoppedEarly)


class TurnBlock:
    """``async with`` over one turn: one exit signature, and one way to close the turn.

    A subclass gives its :attr:`turn` and writes ``_exit(exc)`` (``None`` after a block
    that raised nothing); returning lets the block's exception propagate unchanged.
    """

    @property
    def turn(self) -> Turn:
        """The :class:`~neotoma_agent.Turn` of this block."""
        raise NotImplementedError

    async def __aexit__(self, *exc_info: object) -> None:
        exc = exc_info[1] if len(exc_info) > 1 else None
        await self._exit(exc if isinstance(exc, BaseException) else None)

    async def _exit(self, exc: BaseException | None) -> None:
        raise NotImplementedError

    async def _close_turn(self, failure: BaseException | None) -> None:
        # Also what a subclass's __aenter__ calls when starting the run fails.
        if failure is None:
            await self.turn.__aexit__(None, None, None)
        else:
            await self.turn.__aexit__(type(failure), failure, failure.__traceback__)


class StreamedTurn(TurnBlock):
    """A framework run read as a stream inside one turn: its readers and its exit steps.

    A subclass enters the turn and starts the run in ``__aenter__`` (setting ``_turn`` and
    ``_source``), and gives :meth:`_take` (what one item of the stream means for the turn;
    the reply delta it carries), :meth:`_settle` (after a run that ended by itself: set
    the reply, or return the :class:`NoFinalReply` to abandon with) and, where its
    framework needs them, :meth:`_is_last`, :meth:`_left_early`, :meth:`_stop` and
    :meth:`_close_turn` (calling this one).

    The exit (``__aexit__``) runs every step whatever the one before did, as the turn
    must be closed: close the readers; a reader that left before the end is
    :class:`~neotoma_agent.StoppedEarly` (the partial reply is what it showed), else the
    rest of the stream is read; the run is stopped; the reply is settled; the turn is
    closed with the first failure. The caller's own exception or cancellation propagates
    unchanged, an abandon planned here (:func:`planned`) is not raised, any other failure
    of these steps is.
    """

    #: the :class:`StoppedEarly` text for a reader that left before the end
    _LEFT_EARLY = "the stream was left before the run finished"

    _turn: Turn | None
    _source: AsyncIterator[Any] | None

    def __init__(self) -> None:
        self._turn = None
        self._source = None
        self._readers: list[AsyncGenerator[Any, None]] = []
        self._reading = False
        self._done = False
        self._entered = False
        self._reply: str | None = None

    @property
    def turn(self) -> Turn:
        """The :class:`~neotoma_agent.Turn` this run is (open inside the block)."""
        if self._turn is None:
            raise RuntimeError("the turn has not been entered")
        return self._turn

    @property
    def result(self) -> TurnResult:
        """What the turn stored (after the block)."""
        return self.turn.result

    @property
    def reply(self) -> str | None:
        """The stored reply (after a run that ended with one), else ``None``."""
        return self._reply

    def text(self) -> AsyncIterator[str]:
        """The reply's text deltas, each appended to the reply first."""
        return self._reader(self._deltas())

    def _enter_once(self) -> None:
        if self._entered:
            raise RuntimeError(f"a {type(self).__name__} is entered only once")
        self._entered = True

    # -------------------------------------------------------------- what a subclass gives

    def _take(self, item: Any) -> str | None:
        raise NotImplementedError

    def _is_last(self, item: Any) -> bool:
        # The item after which the stream holds nothing of this run (read no further).
        return False

    def _settle(self) -> BaseException | None:
        raise NotImplementedError

    async def _left_early(self) -> None:
        # A reader left before the end: stop the framework's run where it needs telling.
        return None

    async def _stop(self) -> None:
        # Close the stream's source (the run's generator, the framework's process).
        source, self._source = self._source, None
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()

    # -------------------------------------------------------------- reading

    def _reader(self, reader: AsyncGenerator[Any, None]) -> AsyncIterator[Any]:
        # Kept to be closed on exit: a reader left midway is closed here, not by the GC.
        self._readers.append(reader)
        return reader

    def _require_source(self) -> AsyncIterator[Any]:
        if self._source is None:
            raise RuntimeError("read the stream inside its async with block")
        return self._source

    async def _items(self) -> AsyncGenerator[Any, None]:
        source = self._require_source()
        self._reading = True
        async for item in source:
            self._take(item)
            yield item
            if self._is_last(item):
                break
        self._done = True

    async def _deltas(self) -> AsyncGenerator[str, None]:
        source = self._require_source()
        self._reading = True
        async for item in source:
            delta = self._take(item)
            if delta:
                yield delta
            if self._is_last(item):
                break
        self._done = True

    async def _read_rest(self) -> None:
        source = self._require_source()
        async for item in source:
            self._take(item)
            if self._is_last(item):
                break
        self._done = True

    # -------------------------------------------------------------- the exit

    async def _exit(self, exc: BaseException | None) -> None:
        failure = exc
        readers, self._readers = self._readers, []
        for reader in readers:
            try:
                await reader.aclose()
            except BaseException as closing:
                failure = failure or closing
        if failure is None and self._reading and not self._done:
            failure = StoppedEarly(self._LEFT_EARLY)
            await self._left_early()
        elif failure is None and not self._done:
            try:
                await self._read_rest()
            except BaseException as reading:
                failure = reading
        try:
            await self._stop()
        except BaseException as stopping:
            failure = failure or stopping
        if failure is None:
            failure = self._settle()
        # Turn.__aexit__ raises nothing of the body's: an abandon planned here ends here.
        await self._close_turn(failure)
        if failure is not None and failure is not exc and not planned(failure):
            raise failure
        # Returning None lets the caller's exception (or cancellation) propagate unchanged.


def content_text(content: object) -> str:
    """A message content's stored text: a ``str`` as it is; a list of content blocks as
    its text blocks, one per line, other blocks as ``[type]`` placeholders (:func:`block_text`);
    any other value as one such block."""
    if isinstance(content, str):
        return content
    return parts_text(content if isinstance(content, list) else [content], block_text)
