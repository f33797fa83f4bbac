"""The framework guides' examples (docs/integrations/) run with their test models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: the framework guides the README's sections moved to
GUIDES = Path(__file__).resolve().parents[2] / "docs" / "integrations"


def block(marker: str) -> str:
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(GUIDES.glob("*.md")))
    after = text[text.index(f"<!-- {marker} -->") :]
    match = re.search(r"```python\n(.*?)\n```", after, re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize(
    ("marker", "framework", "printed"),
    [
        ("readme-pydantic-ai", "pydantic_ai", "Acme Corp is a customer."),
        ("readme-openai-agents", "agents", "acme.com completed"),
    ],
)
def test_the_readme_section_runs(marker: str, framework: str, printed: str) -> None:
    extra = {"pydantic_ai": "pydantic-ai", "agents": "openai-agents"}[framework]
    pytest.importorskip(framework, reason=f"the [{extra}] extra is not installed")
    result = subprocess.run(
        [sys.executable, "-c", block(marker)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert printed in result.stdout
    assert "completed" in result.stdout
