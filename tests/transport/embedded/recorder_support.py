"""``tests/data/record_store_answers.py``, loaded as a module: the reads whose answers it
recorded on each fixture store, for the migration tests to read again and compare."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from paths_support import TESTS

__all__ = ["recorder"]


def recorder() -> ModuleType:
    """The recording script as a module (``_record``, ``_searches``, ...)."""
    spec = importlib.util.spec_from_file_location(
        "record_store_answers", TESTS / "data" / "record_store_answers.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
