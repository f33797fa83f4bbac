"""The guides speak to the library's users: they teach a task. How this project measured
itself (machine loads, benchmark commands and tables, "as before", session numbers) lives
on the measured-figures page, with the command that made each figure, and the pages for
the project's own developers."""

from __future__ import annotations

import re

import pytest
from paths_support import ROOT

#: pages written for this project's developers, and the one page figures live on
NOT_GUIDES = {"performance.md", "development.md", "contributing.md", "changelog.md"}

DEVELOPER_TALK = re.compile(
    r"load average|\bload \d|this machine|\d-core machine|shared with other (jobs|work)"
    r"|\bas before\b|as it was before|\bmain job\b|python benchmarks/|\bbenchmarks/\w+\.py"
    r"|\(\d+(\.\d+)? here\)|\bthis (release|branch)\b|\bsession \d+\b|\bs\d+ \("
    r"|`tests/|\bthe tests' fixtures\b|\bnox -s\b"
    # a measured time (figures live on the measured-figures page, with their command)
    r"|\b\d+(\.\d+)?([–-]\d+(\.\d+)?)? ?(ms|µs|s) of CPU\b|\bquarter of a second at\b",
    re.IGNORECASE,
)


def guides() -> list[str]:
    pages = [p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.parts]
    names = [str(p.relative_to(ROOT / "docs")) for p in pages if p.name not in NOT_GUIDES]
    return sorted([*names, "../README.md"])


@pytest.mark.parametrize("page", guides())
def test_the_guide_speaks_to_users(page: str) -> None:
    # HTML comments (the docs tests' markers) are not shown to a reader.
    text = re.sub(r"<!--.*?-->", "", (ROOT / "docs" / page).read_text("utf-8"), flags=re.S)
    found = [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for m in DEVELOPER_TALK.finditer(text)
    ]
    assert found == []


def test_every_benchmark_a_guide_cites_is_on_the_figures_page() -> None:
    # The figures moved out of the guides went to one page, each with its command.
    figures = (ROOT / "docs" / "performance.md").read_text("utf-8")
    for script in (
        "retrieval_quality",
        "history",
        "sync_overhead",
        "idle_gaps",
        "otel_overhead",
        "ui_pages",
        "integration_overhead",
        "hook_latency",
    ):
        assert f"benchmarks/{script}.py" in figures, script
