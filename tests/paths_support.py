"""Where the tests find the repository's files, from any folder under ``tests/``."""

from __future__ import annotations

from pathlib import Path

#: ``tests/``: the support modules, ``data/`` and the child scripts live here.
TESTS = Path(__file__).resolve().parent
#: the repository root (README.md, examples/, benchmarks/, LICENSE).
ROOT = TESTS.parent
