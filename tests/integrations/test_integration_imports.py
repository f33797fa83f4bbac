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
    # Pydantic AI's floor is above the core's: the message says so, and so does the extra.
    assert "(Python >= 3.11)" in errors["neotoma_agent.integrations.pydantic_ai"][1]


def test_the_pydantic_ai_extra_installs_only_where_pydantic_ai_runs() -> None:
    import importlib.metadata

    from packaging.requirements import Requirement

    wanted = [Requirement(r) for r in importlib.metadata.requires("neotoma-agent") or []]
    [pydantic_ai] = [r for r in wanted if r.name == "pydantic-ai-slim"]
    assert pydantic_ai.marker is not None
    for python, installs in (("3.10", False), ("3.11", True), ("3.13", True)):
        env = {"python_version": python, "extra": "pydantic-ai"}
        assert pydantic_ai.marker.evaluate(env) is installs, python


def test_each_integration_imports_only_public_names() -> None:
    """The integrations are built on the public API alone (of neotoma_agent and of each
    framework): no private module, no private name of the core; only their own folder's
    modules (``._common``, their shared part, and a module's private parts)."""
    import ast
    from pathlib import Path

    import neotoma_agent

    folder = Path(neotoma_agent.__file__).parent / "integrations"
    public = set(neotoma_agent.__all__)
    found: list[str] = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module, names = node.module or "", [a.name for a in node.names]
                if node.level == 1 and (folder / f"{module}.py").is_file():
                    continue
                private = [s for s in module.split(".") if s.startswith("_") and s != "__future__"]
                if node.level or private or any(n.startswith("_") for n in names):
                    found.append(f"{path.name}:{node.lineno} from {'.' * node.level}{module}")
                elif module == "neotoma_agent":
                    found += [f"{path.name}:{node.lineno} {n}" for n in names if n not in public]
            elif isinstance(node, ast.Import):
                found += [
                    f"{path.name}:{node.lineno} import {a.name}"
                    for a in node.names
                    if any(s.startswith("_") for s in a.name.split("."))
                ]
    assert found == []
