"""The framework guides' blocks (docs/integrations/) run as written (Claude: over a fake CLI)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

#: the framework guides the README's sections moved to
GUIDES = Path(__file__).resolve().parents[2] / "docs" / "integrations"


def block(marker: str) -> str:
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(GUIDES.glob("*.md")))
    found = re.search(rf"<!-- {marker} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, marker
    return found.group(1)


@pytest.mark.skipif(
    importlib.util.find_spec("langchain") is None, reason="the [langchain] extra is not installed"
)
def test_the_langgraph_block_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(block("readme-langgraph"), "docs/integrations", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert out == "Acme is a customer.\ncompleted\nStill a customer. completed\n"


@pytest.mark.skipif(
    importlib.util.find_spec("claude_agent_sdk") is None,
    reason="the [claude-agent-sdk] extra is not installed",
)
def test_the_claude_block_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from claude_support import FakeCLI, success

    code = block("readme-claude")
    # The real program needs a key and the network: the fake CLI answers instead.
    code = code.replace("ClaudeSDKClient(options)", "ClaudeSDKClient(options, transport=cli)")
    code = code.replace(
        'nc.query("One more question", options)',
        'nc.query("One more question", options, transport=cli2)',
    )
    code = code.replace(
        "async def main() -> None:\n",
        "async def main() -> None:\n"
        "  async with FakeCLI(SCRIPT) as cli, FakeCLI(SECOND) as cli2:\n",
    )
    code = code.replace("\n    ", "\n      ")
    script = [("delta", "Acme is "), ("delta", "a customer."), success("Acme is a customer.")]
    namespace = {
        "__name__": "readme",
        "FakeCLI": FakeCLI,
        "SCRIPT": script,
        "SECOND": [success("Sure.")],
    }
    exec(compile(code, "docs/integrations", "exec"), namespace)
    assert capsys.readouterr().out == "Acme is a customer.\ncompleted\nSure.\n"
