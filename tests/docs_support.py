"""The Python blocks of README.md and docs/**/*.md, and how each says it is run.

A comment line right above a block's fence says how the tests run it (docs/development.md
states the rule for writers):

- none: a whole program, run as ``python block.py`` in a fresh temporary folder, offline;
- ``<!-- docs-test: fragment -->``: a piece of a program, run inside ``async def main()``
  with ``store`` (an ``EmbeddedStore`` file in that folder), ``memory`` (a
  ``NeotomaMemory`` on it, conversation ``docs``) and ``question`` defined;
- ``<!-- docs-test: by tests/PATH.py -->``: run by that test, which checks what the block
  prints and stores (the tour, the framework examples);
- ``<!-- docs-test: skip: REASON -->``: not run, for the reason given (it needs a server, a
  key or a program that the default run does not have).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import attrs
from paths_support import ROOT

MODES = ("script", "fragment", "by", "skip")
FENCE = re.compile(r"^```python\n(.*?)\n```$", re.M | re.S)
MARKER = re.compile(r"<!-- docs-test: (fragment|by|skip)(?:[: ] *(.*?))? -->")


@attrs.frozen
class Block:
    """One ```python block: where it is, its code, and how it says it is run."""

    path: Path
    line: int
    code: str
    mode: str
    #: the test file for ``by``, the reason for ``skip``
    detail: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def documents() -> list[Path]:
    """README.md and every Markdown page of the site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> Iterator[Block]:
    text = path.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        comments = []
        for above in reversed(text[: match.start()].split("\n")[:-1]):
            if not above.startswith("<!--"):
                break
            comments.append(above)
        marks = [m for m in map(MARKER.fullmatch, comments) if m is not None]
        if len(marks) > 1:
            raise ValueError(f"{path}:{line}: more than one docs-test comment")
        mode, detail = (marks[0].group(1), marks[0].group(2) or "") if marks else ("script", "")
        yield Block(path, line, match.group(1), mode, detail.strip())


def all_blocks() -> list[Block]:
    return [block for path in documents() for block in blocks(path)]


def fragment_program(code: str) -> str:
    """The program a fragment runs in: the names the docs' fragments assume, defined."""
    body = "\n".join(f"        {line}" if line else "" for line in code.split("\n"))
    return (
        "import anyio\n"
        "from neotoma_agent import EmbeddedStore, NeotomaMemory\n\n\n"
        "async def main() -> None:\n"
        '    async with EmbeddedStore.open("docs.db") as store:\n'
        '        memory = NeotomaMemory(store, conversation_id="docs")\n'
        '        question = "What do we know about Acme Corp?"\n'
        f"{body}\n\n\n"
        "anyio.run(main)\n"
    )
