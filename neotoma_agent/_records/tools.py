"""Tool calls a turn makes: the record, its checks, and the ``tool_invocation`` it stores.

A tool call is part of its turn, like an entity the reply produces: it is recorded in
memory while the body runs (:meth:`Turn.tool`, :meth:`Turn.record_tool`,
:meth:`OpenTurn.record_tool`, or :meth:`ToolCall.create` in another process) and written in
the turn's closing store, one ``tool_invocation`` entity per call, completed or abandoned.

What a real Neotoma 0.22.0 server keeps (``tool_invocation`` 1.0): identity
``[turn_key, tool_name, invoked_at]`` (all three required), declared ``duration_ms``,
``result_status`` and ``harness``, each ``last_write``. Only those reach the snapshot; the
arguments, the result, the call id and the error class are undeclared, so they stay on the
observation (where :meth:`NeotomaMemory.tools` reads them back).

Identity rules this module keeps, so that calls never merge and re-runs replay:

- ``invoked_at`` is ISO 8601 UTC with milliseconds, taken once when the call starts (or
  given by the caller) and never re-read: a re-run with the same recorded calls sends the
  same entities, so its closing store replays;
- two distinct calls of one tool in one turn that fall on the same millisecond (after the
  server's folding of the name: letter case, whitespace runs) get distinct ``invoked_at``
  values: the later one moves on by one millisecond until it is free;
- a ``call_id`` (a framework's own id, e.g. a ``tool_use_id``) recorded again with the same
  content is the same call (a no-op); with other content it is refused
  (:class:`~neotoma_agent.ToolCallConflictError`), before any I/O.

Everything here is pure but for the clock :func:`now_ms` reads; arguments and results are
checked to be plain JSON when recorded, and capped and redacted (the memory's settings) when
the closing store is built (:mod:`neotoma_agent._records.tool_payload`).
"""

from __future__ import annotations

import calendar
import datetime as _dt
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, cast, get_args

import attrs

from .._util.clock import iso_ms as iso_ms
from .._util.clock import now_ms as now_ms
from .._util.exits import ExitWith, raised
from .._util.log import get_logger
from ..exceptions import ToolCallConflictError, TurnStateError, error_class_name
from .text import check_plain

__all__ = [
    "TOOL_STATUSES",
    "TOOL_TYPE",
    "ActiveToolCall",
    "ToolCall",
    "ToolLog",
    "ToolStatus",
    "iso_ms",
    "now_ms",
    "parse_invoked_at",
]

logger = get_logger()

#: The entity type a real server declares for one tool call.
TOOL_TYPE: Final = "tool_invocation"

#: How a tool call ended.
ToolStatus = Literal["ok", "error", "cancelled"]
#: The vocabulary of :data:`ToolStatus`, in one place.
TOOL_STATUSES: Final[tuple[ToolStatus, ...]] = get_args(ToolStatus)


# ------------------------------------------------------------------ time


_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
# The form iso_ms writes, read back without datetime (a turn reads its calls' times often).
_ISO_MS_RE: Final = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z\Z")
# The last second stored_ms read: (its text, its Unix milliseconds).
_last_parsed: tuple[str, int] = ("", 0)


def stored_ms(invoked_at: str) -> int:
    """Unix milliseconds of an ``invoked_at`` in the stored form (what :func:`iso_ms` wrote).

    The form was checked when the record was made; the second's part is cached (a turn's
    calls fall in few seconds), so a turn with many calls reads each one's time cheaply.
    """
    global _last_parsed
    prefix = invoked_at[:19]
    cached = _last_parsed
    if cached[0] != prefix:
        cached = _last_parsed = (prefix, parse_invoked_at(prefix + ".000Z"))
    return cached[1] + int(invoked_at[20:23])


def parse_invoked_at(value: object) -> int:
    """Unix milliseconds of a ``datetime`` (timezone-aware) or an ISO 8601 string.

    ``TypeError`` / ``ValueError`` otherwise; a naive datetime (or a string without an
    offset) is refused: it names no instant. Sub-millisecond digits are dropped.
    """
    if isinstance(value, str):
        exact = _ISO_MS_RE.match(value)
        if exact is not None:
            y, mo, d, h, mi, sec, milli = map(int, exact.groups())
            return calendar.timegm((y, mo, d, h, mi, sec)) * 1000 + milli
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"  # Python 3.10's fromisoformat has no "Z"
        try:
            moment = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError("invoked_at must be an ISO 8601 date-time") from None
    elif isinstance(value, _dt.datetime):
        moment = value
    else:
        raise TypeError(
            f"invoked_at must be a datetime or an ISO 8601 str, not {type(value).__name__}"
        )
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("invoked_at must carry a timezone (a naive time names no instant)")
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


# ------------------------------------------------------------------ checks


def _check_name(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a tool name must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError("a tool name must not be empty")
    if value != value.strip():
        # The server trims identity values: " search" and "search" would be one tool.
        raise ValueError("a tool name must not start or end with whitespace")
    return cast(str, check_plain("a tool name", value))


def _check_status(value: object) -> ToolStatus:
    for status in TOOL_STATUSES:
        if value == status and isinstance(value, str):
            return status
    shown = repr(value) if isinstance(value, str) and len(value) <= 20 else type(value).__name__
    raise ValueError(f"a tool call's status must be one of {list(TOOL_STATUSES)}, not {shown}")


def _check_duration(value: object) -> float | None:
    if value is None:
        return None
    # `not value >= 0` also refuses NaN.
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"duration_ms must be a number >= 0 or None, got {value!r}")
    if value == float("inf"):
        raise ValueError("duration_ms must be finite")
    return float(value) if isinstance(value, float) else value


def _optional_text(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty (pass None)")
    return cast(str, check_plain(name, value))


def _check_call_id(value: object) -> str | None:
    return _optional_text("call_id", value)


def _check_error_class(value: object) -> str | None:
    return _optional_text("error_class", value)


def _check_consistent(status: ToolStatus, error_class: str | None) -> None:
    if error_class is not None and status == "ok":
        raise ValueError("error_class is for a call that ended 'error' or 'cancelled'")


def _check_args(value: object) -> Any:
    return check_plain("a tool call's args", value)


def _check_result(value: object) -> Any:
    return check_plain("a tool call's result", value)


def _invoked_at(value: object) -> str:
    if isinstance(value, str) and _ISO_MS_RE.match(value):
        return value  # already the stored form
    return iso_ms(parse_invoked_at(value))


_set: Final = object.__setattr__


def _trusted(
    name: str,
    invoked_at: str,
    status: ToolStatus,
    args: Any,
    result: Any,
    duration_ms: float | None,
    call_id: str | None,
    error_class: str | None,
) -> ToolCall:
    # A ToolCall of values already checked: attrs' __init__ would run every converter again
    # (the record path is hot: a framework may report dozens of calls a turn).
    call = object.__new__(ToolCall)
    _set(call, "name", name)
    _set(call, "invoked_at", invoked_at)
    _set(call, "status", status)
    _set(call, "args", args)
    _set(call, "result", result)
    _set(call, "duration_ms", duration_ms)
    _set(call, "call_id", call_id)
    _set(call, "error_class", error_class)
    return call


def _at(call: ToolCall, invoked_at: str) -> ToolCall:
    # ``call`` moved to another millisecond: its other fields were checked when it was made.
    return _trusted(
        call.name,
        invoked_at,
        call.status,
        call.args,
        call.result,
        call.duration_ms,
        call.call_id,
        call.error_class,
    )


# ------------------------------------------------------------------ the record


@attrs.frozen
class ToolCall:
    """One tool call of a turn, as recorded (what the closing store writes).

    Fields: ``name`` (the tool), ``invoked_at`` (ISO 8601 UTC with milliseconds, when the
    call started), ``status`` (``"ok"``, ``"error"`` or ``"cancelled"``), ``args`` and
    ``result`` (plain JSON, as the caller gave them: the memory's cap and ``redact_tool``
    apply when they are stored), ``duration_ms``, ``call_id`` (a framework's own id, e.g.
    a ``tool_use_id``: a second record with the same id and content is the same call) and
    ``error_class`` (the exception class of a failed or cancelled call).

    Every field is checked when the record is made (``TypeError`` / ``ValueError`` /
    :class:`~neotoma_agent.ValidationError`, quoting no content). Build one with
    :meth:`create` (``invoked_at`` defaults to now) or, inside a turn,
    :meth:`Turn.record_tool`. :meth:`to_json` / :meth:`from_json` round-trip it through
    plain JSON, so one process can keep a call (e.g. in SQLite) and another pass it to
    ``close_turn(..., tools=[...])``::

        call = ToolCall.create("search_flights", args={"to": "LIS"}, result=[...])
        assert ToolCall.from_json(json.loads(json.dumps(call.to_json()))) == call
    """

    name: str = attrs.field(converter=_check_name)
    invoked_at: str = attrs.field(converter=_invoked_at)
    status: ToolStatus = attrs.field(default="ok", converter=_check_status)
    args: Any = attrs.field(default=None, converter=_check_args)
    result: Any = attrs.field(default=None, converter=_check_result)
    duration_ms: float | None = attrs.field(default=None, converter=_check_duration)
    call_id: str | None = attrs.field(default=None, converter=_check_call_id)
    error_class: str | None = attrs.field(default=None, converter=_check_error_class)

    @classmethod
    def create(
        cls,
        name: str,
        *,
        args: Any = None,
        result: Any = None,
        status: ToolStatus = "ok",
        invoked_at: _dt.datetime | str | None = None,
        duration_ms: float | None = None,
        call_id: str | None = None,
        error_class: str | None = None,
    ) -> ToolCall:
        """A checked record of one call; ``invoked_at=None`` means now (this millisecond)."""
        if cls is not ToolCall:
            return cls(
                name=name,
                invoked_at=iso_ms(now_ms()) if invoked_at is None else invoked_at,
                status=status,
                args=args,
                result=result,
                duration_ms=duration_ms,
                call_id=call_id,
                error_class=error_class,
            )
        # The converters' checks, in their order, without attrs' __init__ around them.
        checked_name = _check_name(name)
        when = iso_ms(now_ms()) if invoked_at is None else _invoked_at(invoked_at)
        checked_status = _check_status(status)
        checked_args = _check_args(args)
        checked_result = _check_result(result)
        duration = _check_duration(duration_ms)
        checked_id = _check_call_id(call_id)
        checked_class = _check_error_class(error_class)
        _check_consistent(checked_status, checked_class)
        return _trusted(
            checked_name,
            when,
            checked_status,
            checked_args,
            checked_result,
            duration,
            checked_id,
            checked_class,
        )

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON (every field, ``None`` included)."""
        return attrs.asdict(self, recurse=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        """The record :meth:`to_json` wrote (checked again; unknown keys are refused)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a tool call's JSON must be an object, not {type(data).__name__}")
        unknown = set(data) - _JSON_KEYS
        if unknown:
            raise ValueError(f"unknown keys in a tool call's JSON: {sorted(map(str, unknown))}")
        if "name" not in data or "invoked_at" not in data:
            raise ValueError("a tool call's JSON needs 'name' and 'invoked_at'")
        return cls(**{key: data[key] for key in data})

    def __attrs_post_init__(self) -> None:
        _check_consistent(self.status, self.error_class)

    def _same_call(self, other: ToolCall) -> bool:
        # What a repeated call id must agree on. An invoked_at the caller left to "now" is
        # a new clock reading, not new content, so a re-recorded call may differ there.
        return (
            self.name == other.name
            and self.status == other.status
            and self.args == other.args
            and self.result == other.result
            and self.error_class == other.error_class
        )


_JSON_KEYS: Final = frozenset(attrs.fields_dict(ToolCall))


# ------------------------------------------------------------------ one turn's calls


class ToolLog:
    """The calls one turn recorded, in the order they started (thread-safe).

    :meth:`add` refuses a call id seen with other content, drops an exact repeat, and moves
    a distinct call off a millisecond another call of the same tool holds.
    """

    __slots__ = (
        "_by_call_id",
        "_by_given",
        "_by_identity",
        "_calls",
        "_closed",
        "_folded",
        "_latest",
        "_lock",
        "_turn_key",
    )

    def __init__(self, turn_key: str) -> None:
        self._turn_key = turn_key
        self._calls: list[ToolCall] = []
        # call id -> (the call as given, the call as kept: maybe moved on)
        self._by_call_id: dict[str, tuple[ToolCall, ToolCall]] = {}
        # (folded tool name, the millisecond given) -> the calls given there, as kept
        self._by_given: dict[tuple[str, int], list[tuple[ToolCall, ToolCall]]] = {}
        # (folded tool name, millisecond) -> the call that holds it
        self._by_identity: dict[tuple[str, int], ToolCall] = {}
        # folded tool name -> the latest millisecond one of its calls holds
        self._latest: dict[str, int] = {}
        self._folded: dict[str, str] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """The calls, ordered by ``invoked_at`` (then by when they were recorded)."""
        with self._lock:
            return tuple(sorted(self._calls, key=lambda c: c.invoked_at))

    def close(self) -> None:
        """The turn's closing store has landed: a call recorded from now on is refused."""
        with self._lock:
            self._closed = True

    def record(self, *args: Any, **kwargs: Any) -> ToolCall:
        """:meth:`add` the call ``ToolCall.create(*args, **kwargs)`` makes (what
        ``record_tool`` does; its clock is given when ``invoked_at`` is)."""
        call = ToolCall.create(*args, **kwargs)
        return self.add(call, clock_given=kwargs.get("invoked_at") is not None)

    def add(self, call: ToolCall, *, clock_given: bool = True) -> ToolCall:
        """Record ``call``; return the record kept (an earlier one, or ``call`` moved on).

        ``clock_given=False``: ``invoked_at`` / ``duration_ms`` were read from the clock,
        not given: a repeated call id is compared without them, and a call equal to an
        earlier one is another call (moved to a free millisecond), not a repeat.
        """
        with self._lock:
            if self._closed:
                raise TurnStateError(
                    "cannot record a tool call: the turn is closed (its closing store is "
                    "written, so the call would never be stored)"
                )
            if call.call_id is not None:
                seen = self._by_call_id.get(call.call_id)
                if seen is not None:
                    # Compared with the call as it was given, not as kept: a call moved off a
                    # busy millisecond and handed over again is still the same call.
                    given, kept = seen
                    same = given._same_call(call) and (
                        not clock_given
                        or (
                            given.invoked_at == call.invoked_at
                            and (call.duration_ms is None or given.duration_ms == call.duration_ms)
                        )
                    )
                    if not same:
                        raise ToolCallConflictError(
                            f"tool call id {call.call_id!r} was already recorded in this turn "
                            "with different content (a call id names one call)"
                        )
                    return kept
            name = self._fold(call.name)
            ms = stored_ms(call.invoked_at)
            if clock_given and call.call_id is None:
                for given, kept in self._by_given.get((name, ms), ()):
                    if given == call:
                        # A record handed over again (its time given, not read now): the
                        # same call, one entity, wherever it was moved. Two calls timed now
                        # are two calls, however alike.
                        return kept
            original, given_ms = call, ms
            if (name, ms) in self._by_identity:
                # Past every millisecond this tool holds: free, and found in one step.
                ms = self._latest[name] + 1
                call = _at(call, iso_ms(ms))
            self._by_identity[(name, ms)] = call
            self._latest[name] = max(ms, self._latest.get(name, ms))
            if call.call_id is not None:
                self._by_call_id[call.call_id] = (original, call)
            elif clock_given:
                self._by_given.setdefault((name, given_ms), []).append((original, call))
            self._calls.append(call)
            return call

    def extend(self, calls: Iterable[ToolCall]) -> None:
        """:meth:`add` each of ``calls`` (records handed over whole: their clocks given)."""
        for call in calls:
            self.add(call)

    def _fold(self, name: str) -> str:
        # The tool's part of the canonical name the server hashes into the entity id, folded
        # as it folds it (letter case, whitespace runs); the time part folds to itself.
        folded = self._folded.get(name)
        if folded is None:
            # Here, not at import: a hook process recording a call needs no identity rules.
            from .._neotoma.identity import normalize

            folded = normalize(TOOL_TYPE, f"{TOOL_TYPE}:{self._turn_key}|{name}|")
            self._folded[name] = folded
        return folded


def merge_tools(turn_key: str, *groups: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    """One turn's calls from several sources, deduplicated as :class:`ToolLog` does."""
    log = ToolLog(turn_key)
    for group in groups:
        log.extend(group)
    return log.calls


def check_tools(tools: object) -> tuple[ToolCall, ...]:
    """``tools=`` of the explicit API: a sequence of :class:`ToolCall` (``TypeError`` else)."""
    if isinstance(tools, str | bytes | ToolCall | Mapping) or not isinstance(tools, Iterable):
        raise TypeError("tools takes a sequence of ToolCall records")
    calls = tuple(tools)
    for call in calls:
        if not isinstance(call, ToolCall):
            raise TypeError(
                f"tools takes ToolCall records (ToolCall.from_json reads JSON), "
                f"not {type(call).__name__}"
            )
    return calls


# ------------------------------------------------------------------ a call in progress


class ActiveToolCall(ExitWith):
    """A tool call in progress: ``async with t.tool(name, args) as call:`` (or ``with``).

    Set :attr:`result` in the body. On exit the call is recorded on its turn: ``ok`` after
    a normal body, ``error`` (with the exception's class) after an exception, ``cancelled``
    after a cancellation (or another ``BaseException``: ``KeyboardInterrupt``, a trio or
    asyncio cancellation); the body's exception propagates unchanged. :attr:`call` is the
    stored record afterwards. ``invoked_at`` is read once, on enter; ``duration_ms`` is the
    time the body took.
    """

    __slots__ = ("_args", "_call", "_call_id", "_name", "_record", "_result", "_started", "_t0")

    def __init__(
        self,
        record: Callable[[ToolCall], ToolCall],
        name: str,
        args: Any,
        call_id: str | None,
    ) -> None:
        self._record = record
        self._name = _check_name(name)
        self._args = _check_args(args)
        self._call_id = _check_call_id(call_id)
        self._result: Any = None
        self._call: ToolCall | None = None
        self._started: int | None = None
        self._t0 = 0.0

    def __repr__(self) -> str:
        state = "new" if self._started is None else "done" if self._call else "running"
        return f"<ActiveToolCall {self._name!r} {state}>"

    @property
    def name(self) -> str:
        """The tool's name."""
        return self._name

    @property
    def args(self) -> Any:
        """The call's arguments (plain JSON)."""
        return self._args

    @property
    def call_id(self) -> str | None:
        """The framework's id of this call, if one was given."""
        return self._call_id

    @property
    def invoked_at(self) -> str | None:
        """When the call started (ISO 8601 UTC, milliseconds); ``None`` before it does."""
        return None if self._started is None else iso_ms(self._started)

    @property
    def result(self) -> Any:
        """The call's result; assign it in the body (plain JSON, checked on assignment)."""
        return self._result

    @result.setter
    def result(self, value: Any) -> None:
        if self._call is not None:
            raise TurnStateError(f"tool call {self._name!r} is already recorded")
        self._result = _check_result(value)

    @property
    def call(self) -> ToolCall | None:
        """The record stored with the turn, once the call has ended."""
        return self._call

    def _start(self) -> ActiveToolCall:
        if self._started is not None:
            raise TurnStateError("a tool call is entered only once")
        self._started = now_ms()
        self._t0 = time.perf_counter()
        return self

    def _finish(self, exc: BaseException | None) -> None:
        assert self._started is not None
        duration = round((time.perf_counter() - self._t0) * 1000, 3)
        if exc is None:
            status: ToolStatus = "ok"
            error_class = None
        else:
            # An Exception is the tool failing; anything else (a cancellation of any
            # backend, KeyboardInterrupt) stopped it from outside.
            status = "error" if isinstance(exc, Exception) else "cancelled"
            error_class = error_class_name(exc)
        # Every field was checked on the way in (the result when assigned): not again.
        call = _trusted(
            name=self._name,
            invoked_at=iso_ms(self._started),
            status=status,
            args=self._args,
            result=self._result,
            duration_ms=duration,
            call_id=self._call_id,
            error_class=error_class,
        )
        try:
            self._call = self._record(call)
        except TurnStateError:
            if exc is None:
                raise
            # The turn closed while the tool ran; the tool's own error is what matters.
            logger.warning("tool.not_recorded", tool_status=status, reason="turn not open")

    async def __aenter__(self) -> ActiveToolCall:
        return self._start()

    async def _exit(self, exc: BaseException | None) -> None:
        self._finish(exc)

    def __enter__(self) -> ActiveToolCall:
        return self._start()

    def __exit__(self, *exc_info: object) -> None:
        self._finish(raised(exc_info))
