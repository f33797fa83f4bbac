"""Every turn as a trace: the span tree and attributes of completed, abandoned (error and
cancel), failed, replayed and queued turns, on the embedded store and over HTTP, and the
metrics they record."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Served, Telemetry

from neotoma_agent import NeotomaMemory, OutboxTransport, TurnCloseError, TurnState
from neotoma_agent.exceptions import ConnectionLost, error_class_name
from neotoma_agent.testing import FaultyTransport, key_phase

pytestmark = pytest.mark.anyio


def lost() -> str:
    # How the turn names the class (module.QualName, read now: the package may re-home it).
    return error_class_name(ConnectionLost("x"))


USER = "What do we know about Acme Corp? secret-user-words"
REPLY = "Acme Corp is a customer. secret-reply-words"


def memory(transport: Any, **kw: Any) -> NeotomaMemory:
    kw.setdefault("close_timeout", 5.0)
    return NeotomaMemory(transport, conversation_id="chat-otel", platform="tests", **kw)


def phases(telemetry: Telemetry) -> list[tuple[str, str | None]]:
    turn = telemetry.turn()
    kids = sorted(telemetry.children(turn), key=lambda s: s.start_time or 0)
    return [(s.name, s.attributes.get("neotoma_agent.phase")) for s in kids]


def all_text(telemetry: Telemetry) -> str:
    # Every attribute and event attribute of every span, as one string.
    parts = []
    for span in telemetry.finished():
        parts.append(json.dumps(dict(span.attributes or {}), default=str))
        for event in span.events:
            parts.append(json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(parts)


async def test_a_completed_turn_is_a_trace_of_its_phases(
    served: Served, telemetry: Telemetry
) -> None:
    mem = memory(served.transport)
    await mem.remember("company", name="Acme Corp")
    async with mem.turn(USER) as t:
        t.reply = REPLY
    assert t.result.completed
    turn = telemetry.turn()
    assert turn.parent is None
    assert turn.kind is SpanKind.INTERNAL
    assert turn.attributes["gen_ai.conversation.id"] == "chat-otel"
    assert turn.attributes["neotoma_agent.turn.id"] == t.turn_id
    assert turn.attributes["neotoma_agent.turn.outcome"] == "completed"
    assert turn.attributes["gen_ai.memory.record.id"] == t.result.turn_record_id
    assert "error.type" not in turn.attributes
    assert turn.status.status_code is StatusCode.UNSET
    # Retrieval, the history read and the user store run concurrently; the closing store
    # comes last.
    found = phases(telemetry)
    assert sorted(found[:3], key=str) == [
        ("search_memory", "history"),
        ("search_memory", "retrieval"),
        ("upsert_memory", "user"),
    ]
    assert found[3:] == [("upsert_memory", "assistant")]
    search, history = sorted(
        telemetry.named("search_memory"),
        key=lambda s: s.attributes["neotoma_agent.phase"] != "retrieval",
    )
    assert history.attributes["gen_ai.memory.record.count"] == 0  # the conversation's first turn
    user, closing = sorted(telemetry.named("upsert_memory"), key=lambda s: s.start_time or 0)
    assert search.attributes["gen_ai.operation.name"] == "search_memory"
    assert search.attributes["gen_ai.memory.record.count"] == 1  # Acme Corp
    assert search.attributes["neotoma_agent.retrieval.lookups"] >= 1
    assert user.attributes["gen_ai.operation.name"] == "upsert_memory"
    assert user.attributes["gen_ai.memory.record.count"] >= 3  # conversation, message, record
    assert closing.attributes["gen_ai.memory.record.id"] == t.result.turn_record_id
    assert closing.attributes["neotoma_agent.replayed"] is False
    # The body is the time between the two stores.
    assert user.end_time is not None
    assert closing.start_time is not None
    assert user.end_time <= closing.start_time
    expected = SpanKind.CLIENT if served.headers else SpanKind.INTERNAL
    assert {s.kind for s in (search, history, user, closing)} == {expected}
    assert len({s.context.trace_id for s in telemetry.finished()}) == 1
    store_id = user.attributes["gen_ai.memory.store.id"]
    assert store_id.startswith("http://127.0.0.1:" if served.headers else "embedded:")
    # No message content by default: ids and counts only.
    text = all_text(telemetry)
    assert "secret-user-words" not in text
    assert "secret-reply-words" not in text


async def test_content_is_recorded_only_on_opt_in(
    served: Served, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    async with memory(served.transport).turn(USER) as t:
        t.reply = REPLY
    turn = telemetry.turn()
    (user,) = json.loads(turn.attributes["gen_ai.input.messages"])
    assert user == {"role": "user", "parts": [{"type": "text", "content": USER}]}
    (reply,) = json.loads(turn.attributes["gen_ai.output.messages"])
    assert reply["role"] == "assistant"
    assert reply["parts"][0]["content"] == REPLY


async def test_an_abandoned_turn_sets_error_type(served: Served, telemetry: Telemetry) -> None:
    with pytest.raises(ValueError, match="the model failed"):  # noqa: PT012
        async with memory(served.transport).turn(USER) as t:
            t.reply = "partial"
            raise ValueError("the model failed")
    assert t.result.status is TurnState.ABANDONED
    turn = telemetry.turn()
    assert turn.attributes["error.type"] == "ValueError"
    assert turn.attributes["neotoma_agent.turn.outcome"] == "abandoned"
    assert turn.status.status_code is StatusCode.ERROR
    assert phases(telemetry)[-1] == ("upsert_memory", "abandoned")


async def test_a_cancelled_turn_is_abandoned_in_its_trace(
    served: Served, telemetry: Telemetry
) -> None:
    with anyio.CancelScope() as scope:
        async with memory(served.transport).turn(USER) as t:
            t.reply = "partial"
            scope.cancel()  # an anyio cancellation of the body, once it runs
            await anyio.sleep(30)
    assert t.result.status is TurnState.ABANDONED
    turn = telemetry.turn()
    assert turn.attributes["neotoma_agent.turn.outcome"] == "abandoned"
    assert "Cancel" in turn.attributes["error.type"]
    assert phases(telemetry)[-1] == ("upsert_memory", "abandoned")


async def test_a_task_cancel_on_asyncio(
    served: Served, telemetry: Telemetry, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("Task.cancel is asyncio's")
    entered = asyncio.Event()
    turns = []

    async def run() -> None:
        async with memory(served.transport).turn(USER) as t:
            turns.append(t)
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.ensure_future(run())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    turn = telemetry.turn()
    assert turn.attributes["error.type"] == "asyncio.exceptions.CancelledError"
    assert turns[0].result.status is TurnState.ABANDONED
    assert phases(telemetry)[-1] == ("upsert_memory", "abandoned")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11's")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio.timeout is asyncio's
async def test_an_asyncio_timeout_on_a_traced_turn(served: Served, telemetry: Telemetry) -> None:
    # The deadline fires in the body: the turn is abandoned in its trace, its span ends,
    # the caller sees TimeoutError (not a CancelledError), and its context is put back.
    from opentelemetry import trace

    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("request") as request:
        turn = memory(served.transport).turn(USER)

        async def body() -> None:
            async with asyncio.timeout(30) as deadline, turn as t:
                # counts from the body: a loaded machine's slow enter must not use it up
                deadline.reschedule(asyncio.get_running_loop().time() + 0.5)
                t.reply = "partial"
                await asyncio.sleep(30)

        with pytest.raises(TimeoutError):
            await body()
        assert trace.get_current_span() is request
    assert turn.result.status is TurnState.ABANDONED
    span = telemetry.turn()
    assert span.end_time is not None
    assert span.attributes["neotoma_agent.turn.outcome"] == "abandoned"
    assert span.attributes["error.type"] == "asyncio.exceptions.CancelledError"
    assert span.parent is not None
    assert span.parent.span_id == request.get_span_context().span_id
    assert phases(telemetry)[-1] == ("upsert_memory", "abandoned")


async def test_a_failed_close_sets_error_type_on_the_turn_and_its_store(
    served: Served, telemetry: Telemetry
) -> None:
    faulty = FaultyTransport(served.transport).fail(
        "store",
        lambda: ConnectionLost("the store went away"),
        when=lambda m, a, kw: key_phase(kw["idempotency_key"]) == "assistant",
    )
    with pytest.raises(TurnCloseError):
        async with memory(faulty, close_timeout=2.0).turn(USER) as t:
            t.reply = REPLY
    assert t.result.status is TurnState.FAILED
    turn = telemetry.turn()
    assert turn.attributes["neotoma_agent.turn.outcome"] == "failed"
    assert turn.attributes["error.type"] == lost()
    closing = [
        s
        for s in telemetry.children(turn)
        if s.attributes.get("neotoma_agent.phase") == "assistant"
    ]
    assert closing
    assert closing[0].attributes["error.type"] == lost()
    assert closing[0].status.status_code is StatusCode.ERROR


async def test_a_refused_enter_is_a_failed_turn(served: Served, telemetry: Telemetry) -> None:
    from neotoma_agent.exceptions import ValidationError

    faulty = FaultyTransport(served.transport).fail(
        "store", lambda: ValidationError("refused", status=400, code="X")
    )
    with pytest.raises(ValidationError):
        async with memory(faulty).turn(USER):
            pytest.fail("the body must not run")
    turn = telemetry.turn()
    assert turn.attributes["neotoma_agent.turn.outcome"] == "failed"
    assert turn.attributes["error.type"] == error_class_name(
        ValidationError("x", status=400, code="X")
    )


async def test_a_replayed_turn_says_so(served: Served, telemetry: Telemetry) -> None:
    mem = memory(served.transport)
    for _ in range(2):
        async with mem.turn(USER, turn_id="turn-again") as t:
            t.reply = REPLY
    first, second = sorted(telemetry.named("turn"), key=lambda s: s.start_time or 0)
    assert first.attributes["neotoma_agent.replayed"] is False
    assert second.attributes["neotoma_agent.replayed"] is True
    assert first.context.trace_id != second.context.trace_id
    stores = [s for s in telemetry.children(second) if s.name == "upsert_memory"]
    assert stores
    assert stores[-1].attributes["neotoma_agent.replayed"] is True


async def test_a_queued_close_is_an_event(
    served: Served, telemetry: Telemetry, tmp_path: Path
) -> None:
    faulty = FaultyTransport(served.transport).fail(
        "store",
        lambda: ConnectionLost("the store went away"),
        when=lambda m, a, kw: key_phase(kw["idempotency_key"]) == "assistant",
    )
    async with OutboxTransport(faulty, tmp_path / "outbox.db", background=False) as outbox:
        async with memory(outbox).turn(USER) as t:
            t.reply = REPLY
        assert t.result.queued
        turn = telemetry.turn()
        assert turn.attributes["neotoma_agent.queued"] is True
        assert turn.attributes["neotoma_agent.turn.outcome"] == "completed"
        (closing,) = [
            s
            for s in telemetry.children(turn)
            if s.attributes.get("neotoma_agent.phase") == "assistant"
        ]
        assert [e.name for e in closing.events] == ["neotoma_agent.outbox.queued"]
        (depth,) = telemetry.points("neotoma_agent.outbox.depth")
        assert depth.value == 1
        faulty.clear()
        await outbox.flush()
        (depth,) = telemetry.points("neotoma_agent.outbox.depth")
        assert depth.value == 0


async def test_metrics_by_outcome(served: Served, telemetry: Telemetry) -> None:
    mem = memory(served.transport)
    async with mem.turn(USER) as t:
        t.reply = REPLY
    with pytest.raises(KeyError):
        async with mem.turn("second"):
            raise KeyError("x")
    turns = {
        p.attributes["neotoma_agent.turn.outcome"]: p.value
        for p in telemetry.points("neotoma_agent.turns")
    }
    assert turns == {"completed": 1, "abandoned": 1}
    durations = {
        p.attributes["neotoma_agent.turn.outcome"]: p.count
        for p in telemetry.points("neotoma_agent.turn.duration")
    }
    assert durations == {"completed": 1, "abandoned": 1}
    trips = {
        p.attributes["gen_ai.operation.name"]: p.value
        for p in telemetry.points("neotoma_agent.store.round_trips")
    }
    assert trips["upsert_memory"] == 4  # two turns, a user and a closing store each
    assert trips["search_memory"] >= 3  # the lookups of the first turn, a history read each


async def test_the_bodys_spans_are_children_of_the_turn(
    served: Served, telemetry: Telemetry
) -> None:
    from opentelemetry import trace

    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("request") as request:
        async with memory(served.transport).turn(USER) as t:
            with tracer.start_as_current_span("chat gpt-x"):
                t.reply = REPLY
        outside = trace.get_current_span()
    assert outside is request  # the turn put the app's context back
    turn = telemetry.turn()
    assert turn.parent is not None
    assert turn.parent.span_id == request.get_span_context().span_id
    (model,) = telemetry.named("chat gpt-x")
    assert model.parent is not None
    assert model.parent.span_id == turn.context.span_id
