"""The suite mirrors the package: a test lives in its package's folder, and CONTRIBUTING's
"Where the tests live" names every folder, so a reader finds a test by the code it checks.
"""

from __future__ import annotations

import re

from paths_support import ROOT, TESTS

#: What checks the library or the repository as a whole: the only test modules at the root.
LIBRARY_WIDE = {
    "test_docs_examples.py",
    "test_docs_reference.py",
    "test_docs_voice.py",
    "test_examples.py",
    "test_layout.py",
    "test_lazy_import.py",
    "test_log_levels.py",
    "test_log_server_text.py",
    "test_performance_doc.py",
    "test_public_api.py",
    "test_quiet.py",
    "test_readme.py",
    "test_repository.py",
    "test_suite_layout.py",
    "test_versions.py",
}


def test_the_root_keeps_only_the_library_wide_tests() -> None:
    at_root = {p.name for p in TESTS.glob("test_*.py")}
    assert at_root - LIBRARY_WIDE == set(), "a test of one package goes in that package's folder"
    assert LIBRARY_WIDE - at_root == set()


def test_contributing_names_every_folder_that_holds_tests() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text("utf-8")
    block = text.split("### Where the tests live", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"([a-z_]+)/", block))
    folders = {p.parent for p in TESTS.rglob("test_*.py")} - {TESTS}
    unnamed = {str(f.relative_to(TESTS)) for f in folders if f.name not in named}
    assert unnamed == set(), "CONTRIBUTING's map of tests/ names every folder"
