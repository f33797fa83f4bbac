"""The instruction-count benchmark's child runs the loop it is given (without valgrind: the
counting takes minutes a loop, so it is left to the benchmark; the loops themselves are
those ``integration_overhead`` builds, which its own smoke test runs)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from paths_support import ROOT

SCRIPT = ROOT / "benchmarks" / "integration_instructions.py"


@pytest.mark.parametrize(
    ("framework", "module"), [("pydantic-ai", "pydantic_ai"), ("openai-agents", "agents")]
)
def test_the_child_runs_the_integrated_loop(framework: str, module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    argv = [
        sys.executable,
        str(SCRIPT),
        "--child",
        framework,
        "integrated",
        "--turns",
        "1",
        "--warm",
        "1",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""  # the child prints nothing: callgrind's dump is its output
