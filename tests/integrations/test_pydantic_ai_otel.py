"""Pydantic AI's spans and the turn's share one trace: an instrumented agent run through
the integration, with the OpenTelemetry SDK's in-memory exporter (``nox -s integrations``)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="the [pydantic-ai] extra is not installed")
pytest.importorskip("opentelemetry.sdk", reason="needs opentelemetry-sdk (test extra)")

import opentelemetry.trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from pydantic_ai import Agent, models
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.test import TestModel

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.integrations.pydantic_ai import NeotomaCapability

pytestmark = pytest.mark.anyio
models.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Pydantic AI runs on asyncio only


async def test_an_agent_runs_spans_and_the_turns_share_one_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", provider)
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="chat-1", platform="tests")
        agent = Agent(
            TestModel(custom_output_text="Acme Corp is a customer."),
            # Pydantic AI's own instrumentation (the global tracer provider), then ours.
            capabilities=[Instrumentation(), NeotomaCapability(memory)],
        )
        result = await agent.run("What do we know about Acme Corp?")
    assert result.output == "Acme Corp is a customer."
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert "turn" in names
    assert "upsert_memory" in names
    theirs = [s for s in spans if not s.instrumentation_scope.name.startswith("neotoma_agent")]
    assert theirs, names  # Pydantic AI's own spans (the run, the model request)
    assert len({s.context.trace_id for s in spans}) == 1, [
        (s.name, s.instrumentation_scope.name) for s in spans
    ]
    assert names.count("turn") == 1
    by_id = {s.context.span_id: s for s in spans}

    def ancestors(span: object) -> list[str]:
        found = []
        parent = getattr(span, "parent", None)
        while parent is not None and parent.span_id in by_id:
            node = by_id[parent.span_id]
            found.append(node.name)
            parent = node.parent
        return found

    # The model request runs in the turn's body: a descendant of the turn span.
    model_calls = [s for s in theirs if s.name.startswith("chat")]
    assert model_calls, names
    assert all("turn" in ancestors(s) for s in model_calls), [
        (s.name, ancestors(s)) for s in model_calls
    ]
