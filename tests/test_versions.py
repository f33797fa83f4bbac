"""One version, said the same everywhere: the package, its metadata, the command line, the
CHANGELOG's released sections, and any version the README or the docs name.

``neotoma_agent/_version.py`` is the one place (pyproject.toml reads it through hatch). A
development version (``0.3.0.dev0``) is of a release the CHANGELOG has not cut yet; a final
one is the CHANGELOG's newest released section.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from datetime import date

from packaging.version import Version
from paths_support import ROOT

import neotoma_agent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below 3.11
    import tomli as tomllib

VERSION = Version(neotoma_agent.__version__)
RELEASED = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$")


def changelog_sections() -> list[str]:
    text = (ROOT / "CHANGELOG.md").read_text("utf-8")
    return [line for line in text.splitlines() if line.startswith("## ")]


def released() -> list[tuple[Version, date]]:
    out = []
    for heading in changelog_sections()[1:]:
        match = RELEASED.match(heading)
        assert match is not None, f"not a released section: {heading!r}"
        out.append((Version(match.group(1)), date.fromisoformat(match.group(2))))
    return out


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "neotoma_agent/_version.py"


def test_the_installed_metadata_says_the_same() -> None:
    installed = importlib.metadata.version("neotoma-agent")
    assert Version(installed) == VERSION, "reinstall: pip install -e ."


def test_the_command_line_says_the_same() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "neotoma_agent", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == f"neotoma-agent {neotoma_agent.__version__}\n"


def test_the_changelog_has_unreleased_then_released_sections_newest_first() -> None:
    assert changelog_sections()[0] == "## [Unreleased]"
    versions = released()
    assert versions, "at least one released section"
    assert [v for v, _ in versions] == sorted((v for v, _ in versions), reverse=True)
    assert [d for _, d in versions] == sorted((d for _, d in versions), reverse=True)
    newest = versions[0][0]
    if VERSION.is_devrelease or VERSION.is_prerelease:
        # the release in the making is newer than every released one
        assert Version(VERSION.base_version) > newest
    else:
        assert newest == VERSION


def test_the_readme_and_the_docs_name_only_known_versions() -> None:
    known = {VERSION, *(v for v, _ in released())}
    mention = re.compile(r"neotoma[-_]agent(?:==| | version |\[[^\]]*\]==)v?(\d+\.\d+[\w.]*)")
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")]
    for page in pages:
        for found in mention.findall(page.read_text("utf-8")):
            assert Version(found.rstrip(".")) in known, f"{page.name}: neotoma-agent {found}"
