"""benchmarks/otel_overhead.py runs and reports its three ways (timings never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "otel_overhead.py"


def test_the_overhead_benchmark_reports_every_way(tmp_path: Path) -> None:
    out = tmp_path / "otel.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--turns", "2", "--rounds", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert [row["way"] for row in report["rows"]] == ["absent", "no-provider", "traced"]
    assert report["rows"][0]["wall_ratio"] == 1.0
    assert all(row["cpu_ms"] > 0 for row in report["rows"])
    # turn, search_memory x2 (retrieval, history), upsert_memory x2: the traced way traced.
    assert report["spans_per_traced_turn"] == 5
