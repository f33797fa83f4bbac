"""The OpenAI Agents SDK and the turn's traces: OpenTelemetry spans started during a run
nest under the turn span, and the SDK's own trace (not OpenTelemetry) names the turn.

The SDK's tracing goes to a collecting processor here (``set_trace_processors`` replaces
the exporter: nothing leaves the process); the OpenTelemetry SDK's in-memory exporter holds
the spans (``nox -s integrations``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the [openai-agents] extra is not installed")
pytest.importorskip("opentelemetry.sdk", reason="needs opentelemetry-sdk (test extra)")

import opentelemetry.trace as trace_api
from agents import Agent, RunConfig, function_tool, set_trace_processors, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import Span, Trace, TracingProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.integrations.openai_agents import run

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SDK runs on asyncio only


class Collected(TracingProcessor):
    """The SDK traces a run made, kept in memory."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def sdk_traces() -> Iterator[Collected]:
    collected = Collected()
    set_trace_processors([collected])  # first: the SDK's exporter never sees a trace
    set_tracing_disabled(False)
    try:
        yield collected
    finally:
        set_tracing_disabled(True)  # as the other tests of the SDK run


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", provider)
    return spans


class Instrumented(ScriptedModel):
    """A model whose client is instrumented with OpenTelemetry (a ``chat`` span per call)."""

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        with trace_api.get_tracer("model-client").start_as_current_span("chat"):
            return await super().get_response(*args, **kwargs)


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    by_id = {s.context.span_id: s for s in spans}
    names, parent = [], span.parent
    while parent is not None and parent.span_id in by_id:
        node = by_id[parent.span_id]
        names.append(node.name)
        parent = node.parent
    return names


async def test_spans_started_during_a_run_nest_under_the_turn_and_the_sdk_trace_names_it(
    tmp_path: Path, exporter: InMemorySpanExporter, sdk_traces: Collected
) -> None:
    @function_tool
    def lookup() -> str:
        with trace_api.get_tracer("tool").start_as_current_span("lookup_db"):
            return "Acme Corp is a customer."

    model = Instrumented(
        [[function_call("lookup", {}, call_id="c1")], [assistant_message("A customer.")]]
    )
    agent = Agent(name="assistant", instructions="You help.", model=model, tools=[lookup])
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="chat-1", platform="tests")
        ran = await run(
            agent,
            "What about Acme Corp?",
            memory=memory,
            run_config=RunConfig(trace_metadata={"app": "kept"}),
        )
    assert ran.final_output == "A customer."
    spans = list(exporter.get_finished_spans())
    assert len({s.context.trace_id for s in spans}) == 1
    [turn] = [s for s in spans if s.name == "turn"]
    theirs = [s for s in spans if s.name in ("chat", "lookup_db")]
    assert sorted(s.name for s in theirs) == ["chat", "chat", "lookup_db"]
    assert all("turn" in ancestors(s, spans) for s in theirs), [
        (s.name, ancestors(s, spans)) for s in theirs
    ]
    # The SDK's own trace: grouped by the conversation, the turn's ids in its metadata,
    # the caller's metadata kept.
    [sdk] = sdk_traces.traces
    exported = sdk.export()
    assert exported is not None
    assert exported["group_id"] == "chat-1"
    assert exported["metadata"] == {
        "app": "kept",
        "neotoma.conversation_id": "chat-1",
        "neotoma.turn_id": ran.turn.turn_id,
    }
    assert turn.attributes is not None
    assert turn.attributes["neotoma_agent.turn.id"] == ran.turn.turn_id


async def test_a_callers_group_id_is_kept(tmp_path: Path, sdk_traces: Collected) -> None:
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("Hi.")]]))
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="chat-1", platform="tests")
        await run(agent, "Hello", memory=memory, run_config=RunConfig(group_id="thread-9"))
    [sdk] = sdk_traces.traces
    exported = sdk.export()
    assert exported is not None
    assert exported["group_id"] == "thread-9"
