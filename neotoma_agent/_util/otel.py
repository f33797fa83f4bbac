"""OpenTelemetry: every turn as a trace, with metrics; nothing at all when it is off.

With ``opentelemetry-api`` installed (``neotoma-agent[otel]``) and a tracer provider
configured by the application, each turn is a span (``turn``) with a child per store phase:

- ``search_memory``: the enter's retrieval, ``gen_ai.memory.record.count`` = entities found,
  and its history read (``neotoma_agent.phase`` = ``history``, count = turns read);
- ``upsert_memory``: the user store and the closing store (and a re-run's replay),
  ``gen_ai.memory.record.count`` = entities written, with events ``neotoma_agent.retry``
  (an HTTP retry) and ``neotoma_agent.outbox.queued`` (the outbox kept the store);

the body is the time between. An abandoned or failed turn sets ``error.type``. Store spans
are INTERNAL over the embedded store and CLIENT over HTTP, whose requests carry the W3C
``traceparent`` of the span they belong to. With a meter provider configured, the
instruments below record turn durations and outcomes, store round trips, retries and the
outbox depth.

Off, it is free: ``opentelemetry`` is imported at the first turn only, and only if the
application imported it already (or names a provider in ``OTEL_PYTHON_TRACER_PROVIDER`` /
``OTEL_PYTHON_METER_PROVIDER``): no provider can be configured otherwise, so a process that
never uses it (a hook, a CLI run) never pays for the import. When it is absent, or neither a
tracer nor a meter provider is configured, a turn costs one check of the providers
(:func:`start_turn` returns ``None``) and every phase one ``ContextVar`` read.

Message content (the user message, the reply) is never recorded unless the application
opts in as the GenAI conventions say: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
set to ``true``. Ids and counts only by default.

The GenAI semantic conventions for memory are in Development status, so every name they
define is spelled here and nowhere else.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Awaitable, MutableMapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    from .._engine.phase_records import Prompt
    from .._recall.history import HistoryTurn
    from .._recall.retrieval import Retrieved
    from .._turn_result import TurnResult
    from ..transport._base import StoreResult, Transport

__all__ = [
    "ACTIVE",
    "TurnTrace",
    "record_outbox_depth",
    "record_retry",
    "start_turn",
    "traceparent_into",
]

T = TypeVar("T")

# ---------------------------------------------------------------- the convention's names
#: The GenAI conventions' attribute and operation names (Development status: they move).
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
MEMORY_STORE_ID: Final = "gen_ai.memory.store.id"
MEMORY_RECORD_ID: Final = "gen_ai.memory.record.id"
MEMORY_RECORD_COUNT: Final = "gen_ai.memory.record.count"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
#: The user a scoped store acts for (``store.for_user``): personal data, so only with
#: content capture on.
USER_ID: Final = "user.id"
SEARCH_MEMORY: Final = "search_memory"
UPSERT_MEMORY: Final = "upsert_memory"
#: The opt-in to message content the GenAI instrumentations share.
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# ---------------------------------------------------------------- this library's names
INSTRUMENTATION_NAME: Final = "neotoma_agent"
PROVIDER: Final = "neotoma"
TURN_SPAN: Final = "turn"
OPEN_TURN_SPAN: Final = "open_turn"
CLOSE_TURN_SPAN: Final = "close_turn"
TURN_ID: Final = "neotoma_agent.turn.id"
TURN_NUMBER: Final = "neotoma_agent.turn.number"
TURN_OUTCOME: Final = "neotoma_agent.turn.outcome"
PHASE: Final = "neotoma_agent.phase"
REPLAYED: Final = "neotoma_agent.replayed"
QUEUED: Final = "neotoma_agent.queued"
LOOKUPS: Final = "neotoma_agent.retrieval.lookups"
RETRY_EVENT: Final = "neotoma_agent.retry"
QUEUED_EVENT: Final = "neotoma_agent.outbox.queued"
# Instruments.
TURN_DURATION: Final = "neotoma_agent.turn.duration"
TURNS: Final = "neotoma_agent.turns"
ROUND_TRIPS: Final = "neotoma_agent.store.round_trips"
RETRIES: Final = "neotoma_agent.store.retries"
OUTBOX_DEPTH: Final = "neotoma_agent.outbox.depth"

# ---------------------------------------------------------------- the switch
# None: not tried yet; False: opentelemetry is not installed; else the loaded modules.
_api: Any = None
# Set once some turn found a provider: before that, no request can be in a traced span,
# so the HTTP transport does not even look for one.
_seen = False
# (tracer provider, meter provider) -> _Telemetry: the tracer and instruments, made once.
_cache: dict[tuple[int, int], _Telemetry] = {}

#: The trace of the turn whose phases run in this context (None when tracing is off).
ACTIVE: ContextVar[TurnTrace | None] = ContextVar("neotoma_agent_turn_trace", default=None)


class _Api:
    def __init__(self) -> None:
        from opentelemetry import context, metrics, propagate, trace
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

        self.context = context
        self.metrics = metrics
        self.propagate = propagate
        self.trace = trace
        self.noop_tracers = (NoOpTracerProvider, ProxyTracerProvider)
        self.noop_meter = NoOpMeterProvider


#: the API's variables naming a provider to load (the one way to configure one without
#: importing ``opentelemetry`` first)
_PROVIDER_ENV: Final = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def _encoded_names() -> tuple[Any, ...] | None:
    try:
        return tuple(os.environ.encodekey(v) for v in _PROVIDER_ENV)
    except Exception:  # an environment of another shape: asked through its mapping
        return None


#: :data:`_PROVIDER_ENV` as ``os.environ``'s own table keys them
_ENCODED_NAMES: Final = _encoded_names()


def _provider_named() -> bool:
    """Whether the environment names a provider (:data:`_PROVIDER_ENV`), asked each turn
    while OpenTelemetry is not imported.

    Asked of ``os.environ``'s own table, the dict its lookups read, with the names encoded
    as it keys them (once): ``name in os.environ`` raises and catches two ``KeyError`` a
    missing name (``Mapping.__contains__`` over ``_Environ.__getitem__``): a turn's check
    took 19,800 instructions, where it takes 2,700. An ``os.environ`` of another shape
    (replaced by a plain mapping) is asked through its mapping."""
    environ = os.environ
    data = getattr(environ, "_data", None)
    if _ENCODED_NAMES is not None and type(data) is dict:
        # Two lookups, not any(): no generator made each turn.
        return _ENCODED_NAMES[0] in data or _ENCODED_NAMES[1] in data
    return any(v in environ for v in _PROVIDER_ENV)


def _load() -> _Api | None:
    global _api
    if _api is None:
        if "opentelemetry" not in sys.modules and not _provider_named():
            # Nothing in this process imported OpenTelemetry, so no provider is set (one is
            # set through the API, or named by those variables): off without paying the
            # import (a hook process, a CLI run). Not remembered: asked again next turn.
            return None
        try:
            _api = _Api()
        except ImportError:
            _api = False
    return _api or None


class _Telemetry:
    """The tracer (``None``: no tracer provider) and instruments (``None``: no meter
    provider) of one pair of providers."""

    def __init__(self, api: _Api, tracer_provider: Any, meter_provider: Any) -> None:
        from .._version import __version__

        self.tracer = (
            None
            if isinstance(tracer_provider, api.noop_tracers)
            else tracer_provider.get_tracer(INSTRUMENTATION_NAME, __version__)
        )
        self.duration: Any = None
        self.turns: Any = None
        self.round_trips: Any = None
        self.retries: Any = None
        self.depth: Any = None
        if not _noop_meter(api, meter_provider):
            meter = meter_provider.get_meter(INSTRUMENTATION_NAME, __version__)
            self.duration = meter.create_histogram(
                TURN_DURATION, unit="s", description="Wall time of a turn, enter to close."
            )
            self.turns = meter.create_counter(
                TURNS, unit="{turn}", description="Turns finished, by outcome."
            )
            self.round_trips = meter.create_counter(
                ROUND_TRIPS, unit="{request}", description="Store requests the turns made."
            )
            self.retries = meter.create_counter(
                RETRIES, unit="{retry}", description="HTTP requests retried after a failure."
            )
            self.depth = meter.create_gauge(
                OUTBOX_DEPTH, unit="{store}", description="Stores queued in an outbox file."
            )

    @property
    def on(self) -> bool:
        return self.tracer is not None or self.turns is not None


def _noop_meter(api: _Api, provider: Any) -> bool:
    # The API's stand-in before set_meter_provider is private; tell it by its class name.
    return isinstance(provider, api.noop_meter) or type(provider).__name__ == "_ProxyMeterProvider"


def _telemetry() -> _Telemetry | None:
    api = _load()
    if api is None:
        return None
    tracers, meters = api.trace.get_tracer_provider(), api.metrics.get_meter_provider()
    key = (id(tracers), id(meters))
    found = _cache.get(key)
    if found is None:
        # Providers are set once per process (tests swap them): a small cache is enough.
        if len(_cache) > 8:
            _cache.clear()
        found = _cache[key] = _Telemetry(api, tracers, meters)
    return found if found.on else None


def _capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


def _innermost(transport: Any) -> Any:
    # Through the wrappers (Forwarding.inner) to the transport that does the I/O.
    seen = 0
    while hasattr(transport, "inner") and seen < 16:
        transport, seen = transport.inner, seen + 1
    return transport


def _messages(role: str, text: str) -> str:
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]}], ensure_ascii=False
    )


# ---------------------------------------------------------------- one turn's trace
class TurnTrace:
    """The span of one turn, and what its phases add to it (made by :func:`start_turn`)."""

    def __init__(
        self,
        api: _Api,
        telemetry: _Telemetry,
        transport: Transport,
        prompt: Prompt,
        name: str = TURN_SPAN,
    ) -> None:
        self._api = api
        self._telemetry = telemetry
        self._started = time.perf_counter()
        store = _innermost(transport)
        base_url = getattr(store, "base_url", None)
        self._kind = api.trace.SpanKind.CLIENT if base_url else api.trace.SpanKind.INTERNAL
        path = getattr(store, "path", None)
        self._store_id = base_url or (
            f"embedded:{os.path.basename(path)}" if isinstance(path, str) else PROVIDER
        )
        self._server = base_url
        self.capture = _capture_content()
        self._token: object | None = None
        self._active: Any = None
        self.span: Any = None
        tracer = telemetry.tracer
        if tracer is not None:
            attributes: dict[str, Any] = {
                PROVIDER_NAME: PROVIDER,
                CONVERSATION_ID: prompt.keys.conversation_id,
                TURN_ID: prompt.keys.turn_id,
                MEMORY_STORE_ID: self._store_id,
            }
            if prompt.turn_number is not None:
                attributes[TURN_NUMBER] = prompt.turn_number
            if self.capture and prompt.user_message:
                attributes[INPUT_MESSAGES] = _messages("user", prompt.user_message)
            from .._records.user_id import tenant_for  # a traced turn only

            user = tenant_for(transport)
            if self.capture and user is not None:
                attributes[USER_ID] = user
            self.span = tracer.start_span(
                name, kind=api.trace.SpanKind.INTERNAL, attributes=attributes
            )

    def attach(self) -> None:
        """Make the turn's span current (for the body's spans, a framework's included) and
        this trace the one the phases see."""
        if self.span is not None:
            ctx = self._api.trace.set_span_in_context(self.span)
            self._token = self._api.context.attach(ctx)
        self._active = ACTIVE.set(self)

    def detach(self) -> None:
        """Undo :meth:`attach` (idempotent)."""
        active, self._active = self._active, None
        if active is not None:
            # Exited in another context than it was entered in (a framework's task): that
            # context ends with its task; tracing must never fail a turn.
            with contextlib.suppress(ValueError):
                ACTIVE.reset(active)
        token, self._token = self._token, None
        if token is not None:
            self._api.context.detach(token)

    def _attributes(self, operation: str, phase: str | None = None) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            OPERATION_NAME: operation,
            PROVIDER_NAME: PROVIDER,
            MEMORY_STORE_ID: self._store_id,
        }
        if phase is not None:
            attributes[PHASE] = phase
        if self._server:
            attributes[SERVER_ADDRESS] = self._server
        return attributes

    def _count(self, operation: str, n: int) -> None:
        if self._telemetry.round_trips is not None and n:
            self._telemetry.round_trips.add(n, {OPERATION_NAME: operation})

    async def search(self, call: Awaitable[Retrieved]) -> Retrieved:
        """Await a retrieval in a ``search_memory`` span."""
        tracer = self._telemetry.tracer
        if tracer is None:
            retrieved = await call
        else:
            with tracer.start_as_current_span(
                SEARCH_MEMORY,
                kind=self._kind,
                attributes=self._attributes(SEARCH_MEMORY, "retrieval"),
            ) as span:
                retrieved = await call
                span.set_attribute(MEMORY_RECORD_COUNT, len(retrieved.entities))
                span.set_attribute(LOOKUPS, retrieved.stats.lookups)
        self._count(SEARCH_MEMORY, retrieved.stats.lookups)
        return retrieved

    async def history(self, call: Awaitable[tuple[HistoryTurn, ...]]) -> tuple[HistoryTurn, ...]:
        """Await the enter's history read in a ``search_memory`` span (phase ``history``;
        ``gen_ai.memory.record.count``: turns read)."""
        self._count(SEARCH_MEMORY, 1)
        tracer = self._telemetry.tracer
        if tracer is None:
            return await call
        with tracer.start_as_current_span(
            SEARCH_MEMORY, kind=self._kind, attributes=self._attributes(SEARCH_MEMORY, "history")
        ) as span:
            turns = await call
            span.set_attribute(MEMORY_RECORD_COUNT, len(turns))
            return turns

    async def upsert(
        self, call: Awaitable[StoreResult], phase: str, records: int, record_index: int | None
    ) -> StoreResult:
        """Await a store in an ``upsert_memory`` span (``records``: entities written)."""
        self._count(UPSERT_MEMORY, 1)
        tracer = self._telemetry.tracer
        if tracer is None:
            return await call
        attributes = self._attributes(UPSERT_MEMORY, phase)
        attributes[MEMORY_RECORD_COUNT] = records
        with tracer.start_as_current_span(
            UPSERT_MEMORY,
            kind=self._kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await call
            except BaseException as exc:
                _fail(self._api, span, exc)
                raise
            span.set_attribute(REPLAYED, result.replayed)
            if record_index is not None:
                with contextlib.suppress(IndexError):
                    span.set_attribute(MEMORY_RECORD_ID, result.entity_id(record_index))
            if result.queued:
                span.set_attribute(QUEUED, True)
                span.add_event(QUEUED_EVENT, {PHASE: phase})
            return result

    def finish(self, outcome: str, error_type: str | None, reply: str | None = None) -> None:
        """End the turn's span and record its metrics; ``outcome``: ``completed``,
        ``abandoned``, ``failed`` (or ``open``: an ``open_turn``, not counted as a turn)."""
        telemetry = self._telemetry
        if telemetry.turns is not None and outcome != "open":
            labels = {TURN_OUTCOME: outcome}
            telemetry.turns.add(1, labels)
            telemetry.duration.record(time.perf_counter() - self._started, labels)
        span, self.span = self.span, None
        if span is None:
            return
        span.set_attribute(TURN_OUTCOME, outcome)
        if reply is not None and self.capture:
            span.set_attribute(OUTPUT_MESSAGES, _messages("assistant", reply))
        if error_type is not None:
            span.set_attribute(ERROR_TYPE, error_type)
            span.set_status(self._api.trace.StatusCode.ERROR)
        span.end()

    def end(
        self,
        result: TurnResult | None,
        error: BaseException | None = None,
        reply: str | None = None,
    ) -> None:
        """End the turn's span with what it stored (``result``), or with the error that
        ended its enter before anything could be stored."""
        if result is None:
            from ..exceptions import error_class_name

            self.finish("failed", None if error is None else error_class_name(error))
            return
        span = self.span
        if span is not None:
            found = {
                MEMORY_RECORD_ID: result.turn_record_id,
                REPLAYED: result.replayed,
                QUEUED: result.queued,
            }
            span.set_attributes({k: v for k, v in found.items() if v is not None})
        outcome = result.status.value
        error_type = result.error_class
        if result.close_error is not None:
            outcome = "failed"
            from ..exceptions import error_class_name

            error_type = error_type or error_class_name(result.close_error)
        self.finish(outcome, error_type, reply)


def _fail(api: _Api, span: Any, exc: BaseException) -> None:
    from ..exceptions import error_class_name

    span.set_attribute(ERROR_TYPE, error_class_name(exc))
    span.set_status(api.trace.StatusCode.ERROR)


def start_turn(transport: Transport, prompt: Prompt, name: str = TURN_SPAN) -> TurnTrace | None:
    """The trace of the turn ``prompt`` opens, about to enter, or ``None`` when
    OpenTelemetry is off."""
    telemetry = _telemetry()
    if telemetry is None:
        return None
    global _seen
    _seen = True
    api = _api
    assert isinstance(api, _Api)
    return TurnTrace(api, telemetry, transport, prompt, name)


class Explicit:
    """The trace of one call of the explicit API (``record_turn``: the whole turn;
    ``open_turn``, ``close_turn`` / ``abandon_turn``: its halves), as a ``with`` block:
    ``done(result)`` says what it stored; leaving by an exception ends it ``failed``."""

    def __init__(self, trace: TurnTrace | None, opening: bool = False) -> None:
        self.trace = trace
        self._opening = opening
        self._result: TurnResult | None = None
        self._reply: str | None = None

    def done(self, result: TurnResult | None = None, reply: str | None = None) -> None:
        self._result, self._reply = result, reply

    def __enter__(self) -> Explicit:
        if self.trace is not None:
            self.trace.attach()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        trace, self.trace = self.trace, None
        if trace is None:
            return
        trace.detach()
        if self._opening and exc is None:
            trace.finish("open", None)
        else:
            trace.end(self._result, exc, self._reply if trace.capture else None)


def explicit(transport: Transport, prompt: Prompt, name: str) -> Explicit:
    """An :class:`Explicit` block for one call of the explicit API on the turn ``prompt``
    opens."""
    trace = start_turn(transport, prompt, name)
    return Explicit(trace, opening=name == OPEN_TURN_SPAN)


# ---------------------------------------------------------------- from the transports
def traceparent_into(headers: MutableMapping[str, str]) -> None:
    """Add the current span's W3C ``traceparent`` (and ``tracestate``) to ``headers``.

    Nothing before any turn was traced: the common case costs one global read.
    """
    if not _seen:
        return
    api = _api
    if isinstance(api, _Api):
        api.propagate.inject(headers)


def record_retry(method: str, path: str, attempt: int, error: str, wait_s: float) -> None:
    """An HTTP retry: an event on the current span, and the retries counter."""
    if not _seen:
        return
    api = _api
    if not isinstance(api, _Api):
        return
    span = api.trace.get_current_span()
    if span.is_recording():
        route = path.split("?", 1)[0]
        span.add_event(
            RETRY_EVENT,
            {
                "http.request.method": method,
                "url.path": route,
                "attempt": attempt,
                ERROR_TYPE: error,
                "wait_s": wait_s,
            },
        )
    telemetry = _telemetry()
    if telemetry is not None and telemetry.retries is not None:
        telemetry.retries.add(1, {"http.request.method": method})


def record_outbox_depth(path: str, depth: int) -> None:
    """The number of stores an outbox file holds, after it changed."""
    telemetry = _telemetry() if _seen else None
    if telemetry is not None and telemetry.depth is not None:
        telemetry.depth.set(depth, {"neotoma_agent.outbox.path": path})


def wants_outbox_depth() -> bool:
    """Whether :func:`record_outbox_depth` records anything (so the count is worth reading)."""
    if not _seen:
        return False
    telemetry = _telemetry()
    return telemetry is not None and telemetry.depth is not None
