"""Where the command line keeps its files by default (light: read before any command runs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["default_data_dir", "default_db_path"]


def default_data_dir() -> Path:
    """``neotoma-agent`` in the per-user data directory (``$XDG_DATA_HOME`` on Linux)."""
    if sys.platform == "win32":  # pragma: no cover - not exercised in CI
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":  # pragma: no cover
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "neotoma-agent"


def default_db_path() -> Path:
    """``$NEOTOMA_AGENT_DB``, else ``neotoma-agent/memory.db`` in the per-user data directory."""
    env = os.environ.get("NEOTOMA_AGENT_DB")
    if env:
        return Path(env).expanduser()
    return default_data_dir() / "memory.db"
