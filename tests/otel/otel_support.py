"""The OpenTelemetry SDK's in-memory exporters, installed as the process's providers for one
test (and the API's unset state put back after it), and a store on either transport whose
dev server records the headers of every request (the fixtures are in conftest.py)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

pytest.importorskip(
    "opentelemetry.sdk", reason="the otel tests need opentelemetry-sdk (test extra)"
)

import opentelemetry.metrics._internal as metrics_internal
import opentelemetry.trace as trace_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from neotoma_agent.transport._base import Transport


@attrs.define
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def turn(self) -> ReadableSpan:
        (turn,) = self.named("turn")
        return turn

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        pid = parent.context.span_id
        return [s for s in self.finished() if s.parent is not None and s.parent.span_id == pid]

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


def install(
    monkeypatch: pytest.MonkeyPatch, *, traces: bool = True, metrics: bool = True
) -> Telemetry:
    """Make an SDK tracer and meter provider the process's own for one test."""
    exporter = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    if traces:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", provider)
    if metrics:
        monkeypatch.setattr(
            metrics_internal, "_METER_PROVIDER", MeterProvider(metric_readers=[reader])
        )
    return Telemetry(exporter, reader)


@attrs.define
class Served:
    transport: Transport
    headers: list[dict[str, str]]  # one per request the dev server answered (empty: embedded)
