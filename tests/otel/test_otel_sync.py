"""A synchronous turn's trace nests as an async one's does: the turn's span is a child of
the application's current span on the calling thread, and the body's spans (a model call)
are children of the turn's, although the turn runs on the store's loop in another thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace
from otel_support import Telemetry

from neotoma_agent import EmbeddedStore, TurnState
from neotoma_agent.sync import SyncMemory, SyncStore

# No event loop here: the calling thread is plain synchronous code.


def test_a_sync_turn_nests_under_the_callers_span(tmp_path: Path, telemetry: Telemetry) -> None:
    tracer = trace.get_tracer("app")
    with SyncStore(EmbeddedStore.open(tmp_path / "memory.db")) as store:
        memory = SyncMemory(store, conversation_id="chat-sync", platform="tests")
        with tracer.start_as_current_span("request") as request:
            with memory.turn("What do we know about Acme Corp?") as t:
                inside = trace.get_current_span()
                with tracer.start_as_current_span("chat gpt-x"):
                    t.reply = "A client."
            assert trace.get_current_span() is request  # the caller's context came back
        assert not trace.get_current_span().get_span_context().is_valid
    assert t.result.status is TurnState.COMPLETED
    turn = telemetry.turn()
    assert inside.get_span_context().span_id == turn.context.span_id
    assert turn.parent is not None
    assert turn.parent.span_id == request.get_span_context().span_id
    assert turn.context.trace_id == request.get_span_context().trace_id
    (model,) = telemetry.named("chat gpt-x")
    assert model.parent is not None
    assert model.parent.span_id == turn.context.span_id
    # The store phases are the turn's children too (they ran on the store's loop).
    stores = [s for s in telemetry.children(turn) if s.name.startswith("upsert_memory")]
    assert len(stores) == 2


def test_an_abandoned_sync_turn_ends_its_span_and_restores_the_context(
    tmp_path: Path, telemetry: Telemetry
) -> None:
    tracer = trace.get_tracer("app")
    with SyncStore(EmbeddedStore.open(tmp_path / "memory.db")) as store:
        memory = SyncMemory(store, conversation_id="chat-sync", platform="tests")
        with tracer.start_as_current_span("request") as request:
            turn = memory.turn("hi")

            def body() -> None:
                with turn as t:
                    t.reply = "par"
                    raise RuntimeError("model down")

            with pytest.raises(RuntimeError):
                body()
            assert trace.get_current_span() is request
    assert turn.result.status is TurnState.ABANDONED
    span = telemetry.turn()
    assert span.attributes is not None
    assert span.attributes["neotoma_agent.turn.outcome"] == "abandoned"
    assert span.attributes["error.type"] == "RuntimeError"
    assert span.parent is not None
    assert span.parent.span_id == request.get_span_context().span_id
