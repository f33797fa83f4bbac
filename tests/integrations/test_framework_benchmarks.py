"""The framework benchmarks still run and measure every loop they name (each framework that
is installed; the others are reported as skipped), here with the collector frozen after
the warm-up (``--gc frozen``), which the table and the JSON say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths_support import ROOT

LOOPS = {"framework", "seams", "turn", "integrated", "manual"}


@pytest.mark.parametrize(
    ("script", "frameworks"),
    [
        ("integration_overhead.py", {"pydantic-ai", "openai-agents"}),
        ("langgraph_claude_overhead.py", {"langgraph", "claude-agent-sdk"}),
    ],
)
def test_the_benchmark_reports_each_installed_framework_with_its_manual_loop(
    tmp_path: Path, script: str, frameworks: set[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = [sys.executable, str(ROOT / "benchmarks" / script), "--turns", "2", "--rounds", "1"]
    argv += ["--gc", "frozen"]
    proc = subprocess.run(
        [*argv, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "over manual" in proc.stdout
    assert "gc: frozen" in proc.stdout
    # The table says which column the goal is on ("beyond the turn's own cost").
    assert "goal: over manual < 1 ms" in proc.stdout
    report = json.loads(out.read_text())
    assert report["gc"] == "frozen"
    assert report["goal"].startswith("goal: over manual < 1 ms")
    assert set(report["frameworks"]) == frameworks
    if all("skipped" in row for row in report["frameworks"].values()):
        # e.g. the `bench` extra alone: langgraph without langchain runs none of the loops
        reasons = "; ".join(row["skipped"] for row in report["frameworks"].values())
        pytest.skip(f"{script}: none of its frameworks is installed ({reasons})")
    for row in report["frameworks"].values():
        if "skipped" in row:
            continue
        assert set(row["samples_ms"]) == LOOPS
        assert row["added_ms"] == row["integrated_ms"] - row["framework_ms"] - row["turn_ms"]
        assert row["over_manual_ms"] == row["integrated_ms"] - row["manual_ms"]
