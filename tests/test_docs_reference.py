"""The API reference covers every public module, and names only modules that exist.

The reference pages (docs/reference/*.md) are ``::: module`` lines that mkdocstrings
renders from the docstrings; this keeps them in step with the package: a new public module
(a path with no ``_`` part) without a page fails here, as does a page for a module gone.
"""

from __future__ import annotations

import re

from paths_support import ROOT

PACKAGE = ROOT / "neotoma_agent"
DIRECTIVE = re.compile(r"^::: ([\w.]+)$", re.M)


def public_modules() -> set[str]:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts):
            names.add(".".join(parts))
    return names


def documented() -> set[str]:
    pages = (ROOT / "docs" / "reference").glob("*.md")
    return {name for page in pages for name in DIRECTIVE.findall(page.read_text("utf-8"))}


def test_every_public_module_has_a_reference_entry() -> None:
    modules = public_modules()
    assert {"neotoma_agent", "neotoma_agent.sync", "neotoma_agent.testing"} <= modules
    assert modules - documented() == set()


def test_the_reference_names_only_public_modules() -> None:
    assert documented() - public_modules() == set()
