"""Each integration imports only on use, and without its framework says which extra to install.

These run whether or not the frameworks are installed (a subprocess hides the framework).
"""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("neotoma_agent.integrations.pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("neotoma_agent.integrations.openai_agents", "agents", "openai-agents"),
    ],
)
def test_importing_without_the_framework_names_the_extra(
    module: str, framework: str, extra: str
) -> None:
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        "import neotoma_agent.integrations\n"  # the package itself needs no framework
        f"try:\n    import {module}\n"
        "except ImportError as e:\n    print(type(e).__name__, e.name, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert f"ImportError {module} " in out.stdout
    assert f"pip install 'neotoma-agent[{extra}]'" in out.stdout


def test_the_core_never_imports_an_integration() -> None:
    code = (
        "import sys, neotoma_agent, neotoma_agent.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith('neotoma_agent.integrations')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
