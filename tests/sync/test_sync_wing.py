"""The sync wing stays a wing: it imports only the public API, and the core never imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import neotoma_agent.sync

PACKAGE = Path(neotoma_agent.sync.__file__).resolve().parent.parent


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_wing_imports_only_the_public_api() -> None:
    for path in (PACKAGE / "sync").glob("*.py"):
        ours = {n for n in imported(path) if n.split(".")[0] == "neotoma_agent"}
        assert ours <= {"neotoma_agent", "neotoma_agent.testing"}, path.name


def test_the_core_never_imports_the_wing() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "sync" in path.relative_to(PACKAGE).parts[:1]:
            continue
        source = path.read_text(encoding="utf-8")
        assert "neotoma_agent.sync" not in imported(path), path
        assert "from .sync" not in source, path
        assert "from ..sync" not in source, path


def test_public_names_report_the_wing_and_have_docstrings() -> None:
    for name in neotoma_agent.sync.__all__:
        obj = getattr(neotoma_agent.sync, name)
        assert obj.__module__ == "neotoma_agent.sync", name
        assert obj.__doc__, name
