"""Helpers for testing code that uses neotoma-agent (ours and yours).

Both helpers wrap a real transport (usually an in-memory or temporary-file
:class:`~neotoma_agent.EmbeddedStore`) and delegate every call to it:

- :class:`RecordingTransport` records each call (method, arguments, start and end order) and
  how many calls were in flight at once, so a test can assert round trips, ordering and
  concurrency bounds.
- :class:`FaultyTransport` injects faults by rule: raise, hang until cancelled, or delay,
  for the calls a predicate selects, a limited number of times; :func:`key_phase` tells a
  predicate which store of a turn (``"user"``, ``"assistant"``, ...) a call is.

They compose: ``FaultyTransport(RecordingTransport(store))`` records the faults too, and
``RecordingTransport(FaultyTransport(store))`` records only what got through. Both forward
every argument of the protocol, the ``store`` hints (``lane``, ``deferrable``) included, so
an :class:`~neotoma_agent.OutboxTransport` above or below them keeps working.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import attrs

# Re-exported so fault rules can select a turn's store by phase instead of by key suffix.
from ._records.keys import key_phase
from .transport._base import Transport
from .transport._forward import Forwarding

__all__ = ["Call", "FaultyTransport", "RecordingTransport", "key_phase"]


@attrs.define
class Call:
    """One recorded call to a wrapped transport."""

    #: ``store``, ``retrieve_entity_by_identifier``, ...
    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    #: position of the call's start, and of its end, in one sequence of events
    started: int
    ended: int | None = None
    #: how many calls (of any method) were in flight when this one started, itself included
    in_flight_at_start: int = 1
    #: the exception the call raised (cancellation included), if any
    error: BaseException | None = None

    def overlaps(self, other: Call) -> bool:
        """True if the two calls were in flight at the same time."""
        self_end = self.ended if self.ended is not None else float("inf")
        other_end = other.ended if other.ended is not None else float("inf")
        return self.started < other_end and other.started < self_end


class RecordingTransport(Forwarding):
    """A transport wrapper that records every call, its order and the concurrency.

    ``calls`` lists every call in start order; ``max_in_flight(method)`` is the highest
    number of concurrent calls of that method (or of any method, with no argument).
    """

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self.calls: list[Call] = []
        self._events = itertools.count()
        self._in_flight: dict[str, int] = {}
        self._max_in_flight: dict[str, int] = {}

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one method, in start order."""
        return [c for c in self.calls if c.method == method]

    def max_in_flight(self, method: str | None = None) -> int:
        """The most calls (of ``method``, or of any method) ever in flight at once."""
        if method is None:
            return self._max_in_flight.get("*", 0)
        return self._max_in_flight.get(method, 0)

    def reset(self) -> None:
        """Forget what was recorded so far."""
        self.calls.clear()
        self._max_in_flight.clear()

    def _enter(self, key: str) -> int:
        now = self._in_flight.get(key, 0) + 1
        self._in_flight[key] = now
        self._max_in_flight[key] = max(self._max_in_flight.get(key, 0), now)
        return now

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._enter(method)
        total = self._enter("*")
        call = Call(
            method, args, dict(kwargs), started=next(self._events), in_flight_at_start=total
        )
        self.calls.append(call)
        try:
            return await super()._call(method, *args, **kwargs)
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            call.ended = next(self._events)
            self._in_flight[method] -= 1
            self._in_flight["*"] -= 1


Predicate = Callable[[str, tuple[Any, ...], Mapping[str, Any]], bool]


@attrs.define
class _Rule:
    method: str
    action: str  # "raise" | "hang" | "delay"
    error: BaseException | Callable[[], BaseException] | None
    seconds: float
    when: Predicate | None
    times: int | None

    def matches(self, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        if self.method not in (method, "*"):
            return False
        if self.times is not None and self.times <= 0:
            return False
        return self.when is None or self.when(method, args, kwargs)


class FaultyTransport(Forwarding):
    """A transport wrapper that injects faults into selected calls.

    Rules are checked in the order they were added; the first that matches a call applies.
    ``when(method, args, kwargs)`` selects calls (default: every call of ``method``; use
    ``"*"`` for any method); ``times`` limits how often a rule fires (default: always)::

        faulty = FaultyTransport(store)
        faulty.fail("store", ConnectionLost("boom"), when=lambda m, a, kw:
                    key_phase(kw["idempotency_key"]) == "assistant")
        faulty.hang("retrieve_entity_by_identifier", times=1)
        faulty.delay("store", 0.05)
    """

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self._rules: list[_Rule] = []
        #: how many calls each rule affected, by method
        self.injected: dict[str, int] = {}

    def fail(
        self,
        method: str,
        error: BaseException | Callable[[], BaseException],
        *,
        when: Predicate | None = None,
        times: int | None = None,
        after_call: bool = False,
    ) -> FaultyTransport:
        """Raise ``error`` (an exception, or a factory of one) instead of delegating.

        With ``after_call=True`` the call is delegated first and the error raised after it
        succeeded: the write happened but its answer was lost.
        """
        action = "raise_after" if after_call else "raise"
        self._rules.append(_Rule(method, action, error, 0.0, when, times))
        return self

    def hang(
        self, method: str, *, when: Predicate | None = None, times: int | None = None
    ) -> FaultyTransport:
        """Never answer (until cancelled)."""
        self._rules.append(_Rule(method, "hang", None, 0.0, when, times))
        return self

    def delay(
        self,
        method: str,
        seconds: float,
        *,
        when: Predicate | None = None,
        times: int | None = None,
    ) -> FaultyTransport:
        """Wait ``seconds`` before delegating."""
        self._rules.append(_Rule(method, "delay", None, seconds, when, times))
        return self

    def clear(self) -> None:
        """Remove every rule."""
        self._rules.clear()

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        rule = next((r for r in self._rules if r.matches(method, args, kwargs)), None)
        if rule is None:
            return await super()._call(method, *args, **kwargs)
        if rule.times is not None:
            rule.times -= 1
        self.injected[method] = self.injected.get(method, 0) + 1
        if rule.action == "hang":
            await anyio.sleep_forever()
        if rule.action == "delay":
            await anyio.sleep(rule.seconds)
            return await super()._call(method, *args, **kwargs)
        if rule.action == "raise_after":
            await super()._call(method, *args, **kwargs)
        error = rule.error
        assert error is not None
        raise error() if callable(error) and not isinstance(error, BaseException) else error
