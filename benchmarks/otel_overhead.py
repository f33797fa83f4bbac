"""Benchmark: what OpenTelemetry costs a turn, off (both ways) and on, side by side.

    python benchmarks/otel_overhead.py [--turns 200] [--rounds 7] [--json PATH]

The same turns on the embedded store (a file per way, so each reads the same history), in
one process, interleaved round by round (the way that goes first rotates) so that every
way sees the same machine:

- ``absent``: as without ``neotoma-agent[otel]``: the import of ``opentelemetry`` failed
  (the switch is set to what a failed import leaves, so the package stays installed for the
  other ways);
- ``no-provider``: ``opentelemetry-api`` imported, no tracer or meter provider configured
  (the API's defaults): the state of an application that has the extra but traces nothing;
- ``traced``: the SDK's tracer provider (spans handed to an exporter that drops them, so
  the figure is the instrumentation, not an exporter's I/O) and meter provider (an
  in-memory reader): every turn a trace of 4-5 spans and its metrics.

Figures: the median over rounds of the mean wall time and CPU time (``process_time``) per
turn; ``ratio`` is each way over ``absent``. The machine is shared: compare the ratios of
one run, and repeat it.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import structlog

from neotoma_agent import EmbeddedStore, NeotomaMemory, __version__
from neotoma_agent._util import otel as _otel

QUESTION = "What do we know about Acme Corp?"
WAYS = ("absent", "no-provider", "traced")


def _providers() -> tuple[Any, Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        # Counts what it is handed (so the report shows the traced way made its spans).
        count = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            Drop.count += len(spans)
            return SpanExportResult.SUCCESS

    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(Drop()))
    return tracers, MeterProvider(metric_readers=[InMemoryMetricReader()]), Drop


def _switch(way: str, providers: tuple[Any, Any, Any]) -> None:
    # What each way leaves in the process-wide state the turn reads (globals, as a real
    # application's set_tracer_provider would; the API allows setting them only once).
    import opentelemetry.metrics._internal as metrics_internal
    import opentelemetry.trace as trace_api

    _otel._api = False if way == "absent" else None
    traced = way == "traced"
    trace_api._TRACER_PROVIDER = providers[0] if traced else None  # type: ignore[attr-defined]
    metrics_internal._METER_PROVIDER = providers[1] if traced else None


async def _batch(memory: NeotomaMemory, turns: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(turns):
        async with memory.turn(f"{QUESTION} ({i})") as t:
            t.reply = "Acme Corp is a customer."
    return (time.perf_counter() - wall) / turns, (time.process_time() - cpu) / turns


async def run(args: argparse.Namespace) -> dict[str, Any]:
    providers = _providers()
    walls: dict[str, list[float]] = {w: [] for w in WAYS}
    cpus: dict[str, list[float]] = {w: [] for w in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {w: await EmbeddedStore.open(Path(tmp) / f"{w}.db").__aenter__() for w in WAYS}
        try:
            memories = {
                w: NeotomaMemory(stores[w], conversation_id="bench", platform="bench") for w in WAYS
            }
            for w in WAYS:
                await memories[w].remember("company", name="Acme Corp")
                _switch(w, providers)
                await _batch(memories[w], 5)  # warm: imports, caches, the file
            exported = providers[2].count
            for r in range(args.rounds):
                order = WAYS[r % 3 :] + WAYS[: r % 3]
                for w in order:
                    _switch(w, providers)
                    wall, cpu = await _batch(memories[w], args.turns)
                    walls[w].append(wall)
                    cpus[w].append(cpu)
        finally:
            _switch("no-provider", providers)
            for store in stores.values():
                await store.aclose()
    base_wall = statistics.median(walls["absent"])
    base_cpu = statistics.median(cpus["absent"])
    rows = []
    for w in WAYS:
        wall, cpu = statistics.median(walls[w]), statistics.median(cpus[w])
        rows.append(
            {
                "way": w,
                "wall_ms": round(wall * 1000, 4),
                "cpu_ms": round(cpu * 1000, 4),
                "wall_ratio": round(wall / base_wall, 3),
                "cpu_ratio": round(cpu / base_cpu, 3),
            }
        )
    return {
        "version": __version__,
        "python": platform.python_version(),
        "turns": args.turns,
        "rounds": args.rounds,
        "rows": rows,
        "spans_per_traced_turn": round(
            (providers[2].count - exported) / (args.turns * args.rounds), 2
        ),
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"OpenTelemetry overhead per turn, embedded store, {result['turns']} turns x "
        f"{result['rounds']} rounds (median of round means; ratio: over `absent`)",
        f"{'way':<12} {'wall ms':>9} {'ratio':>7} {'cpu ms':>9} {'ratio':>7}",
    ]
    for row in result["rows"]:
        lines.append(
            f"{row['way']:<12} {row['wall_ms']:>9.3f} {row['wall_ratio']:>7.3f} "
            f"{row['cpu_ms']:>9.3f} {row['cpu_ratio']:>7.3f}"
        )
    lines.append(f"spans per traced turn: {result['spans_per_traced_turn']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result = anyio.run(run, args)
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
