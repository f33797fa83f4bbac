"""The framework examples run offline as written, and store what they say."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY",)}
    clean.pop("NEOTOMA_EXAMPLE_MODEL", None)
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
        check=True,
    )
    assert out.stderr == ""
    return out.stdout


@pytest.mark.skipif(
    importlib.util.find_spec("langchain") is None, reason="the [langchain] extra is not installed"
)
def test_the_langgraph_example_stores_both_turns(tmp_path: Path) -> None:
    out = run("langgraph_agent.py", str(tmp_path / "x.db"))
    assert "waiting for approval" in out
    assert "[open]" in out
    assert out.count("stored: completed") == 2
    assert "stored: open" not in out  # the approval turn was closed by the resumed run


@pytest.mark.skipif(
    importlib.util.find_spec("claude_agent_sdk") is None,
    reason="the [claude-agent-sdk] extra is not installed",
)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_claude_example_stores_its_turn(tmp_path: Path, backend: str) -> None:
    out = run("claude_agent.py", str(tmp_path / "x.db"), env={"NEOTOMA_EXAMPLE_BACKEND": backend})
    assert (
        "stored: completed 'What do we know about Acme Corp?' -> 'Acme Corp is a customer.'" in out
    )
