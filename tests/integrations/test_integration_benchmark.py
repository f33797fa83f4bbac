"""benchmarks/integration_overhead.py still runs and measures every loop it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "integration_overhead.py"


def test_the_benchmark_reports_each_installed_framework(tmp_path: Path) -> None:
    out = tmp_path / "io.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), "--turns", "2", "--rounds", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert set(report["frameworks"]) == {"pydantic-ai", "openai-agents"}
    for row in report["frameworks"].values():
        if "skipped" in row:
            continue
        assert set(row["samples_ms"]) == {"framework", "seams", "turn", "integrated", "manual"}
        assert row["added_ms"] == row["integrated_ms"] - row["framework_ms"] - row["turn_ms"]
        assert row["over_manual_ms"] == row["integrated_ms"] - row["manual_ms"]
