"""Each integration imports only on use, and without its framework says which extra to install.

This runs whether or not the frameworks are installed: one subprocess (one interpreter
start, to keep the default run short) hides them and reports what each import did.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
for name in ("pydantic_ai", "agents"):
    sys.modules[name] = None  # as if not installed
import neotoma_agent, neotoma_agent.cli
core = sorted(m for m in sys.modules if m.startswith("neotoma_agent.integrations"))
import neotoma_agent.integrations  # the package itself needs no framework
errors = {}
for short in ("pydantic_ai", "openai_agents"):
    module = "neotoma_agent.integrations." + short
    try:
        __import__(module)
    except ImportError as exc:
        errors[module] = [exc.name, str(exc)]
print(json.dumps({"core": core, "errors": errors}))
"""


def test_each_integration_without_its_framework_names_the_extra_and_the_core_imports_none() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(out.stdout)
    assert report["core"] == []  # importing the library (and its CLI) loads no integration
    errors = report["errors"]
    for module, extra in (
        ("neotoma_agent.integrations.pydantic_ai", "pydantic-ai"),
        ("neotoma_agent.integrations.openai_agents", "openai-agents"),
    ):
        name, message = errors[module]
        assert name == module
        assert f"pip install 'neotoma-agent[{extra}]'" in message
