"""A griffe extension for the API reference: the package's reST docstrings as Markdown.

The docstrings are written for ``help()`` and editors, in reStructuredText's small subset
the package uses: ``::`` literal blocks and ``:class:`Name``` style roles. mkdocstrings
renders docstrings as Markdown, where an indented block after ``::`` loses its indentation
and a role shows as ``:class:`` noise. mkdocs.yml loads this file as a griffe extension, so
the reference shows each literal block as a fenced Python block and each role as the code
name it points to; the docstrings themselves stay as they are.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

import griffe

#: ``:class:`Name```, ``:meth:`~pkg.Class.method```, ``:mod:`.x```: the role and its target
ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj|const):`(~?)\.?([^`]+)`")


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _language(block: str) -> str:
    """``python`` for a block that parses as Python (top-level ``await`` allowed), else text."""
    try:
        ast.parse(block, feature_version=(3, 10))
    except SyntaxError:
        try:
            compile(block, "<docstring>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError:
            return "text"
    return "python"


def rest_to_markdown(text: str) -> str:
    """``text`` (a cleaned docstring) with its literal blocks fenced and its roles as code."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::"):
            out.append(ROLE.sub(_role, line))
            i += 1
            continue
        # "text::" introduces a block and reads "text:"; a bare "::" line reads as nothing.
        lead = line.rstrip()[:-2]
        if lead.strip():
            out.append(ROLE.sub(_role, lead if lead.endswith(" ") else lead + ":").rstrip())
        base = _indent(line)
        j = i + 1
        block: list[str] = []
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        if not block:  # a "::" with no block after it: keep the line as written
            out[-1:] = [ROLE.sub(_role, line)]
            i += 1
            continue
        code = textwrap.dedent("\n".join(block)).strip("\n")
        prefix = " " * base
        out += ["", f"{prefix}```{_language(code)}"]
        out += [prefix + row if row else "" for row in code.split("\n")]
        out += [f"{prefix}```", ""]
        i = j
    return "\n".join(out)


class RestToMarkdown(griffe.Extension):
    """Rewrites every loaded object's docstring for the Markdown reference."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rest_to_markdown(obj.docstring.value)
