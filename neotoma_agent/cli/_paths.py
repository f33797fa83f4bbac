"""Where the command line keeps its store by default (light: read before any command runs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["data_dir", "default_db_path", "private_parent"]


def default_db_path() -> Path:
    """``$NEOTOMA_AGENT_DB``, else ``neotoma-agent/memory.db`` in the per-user data directory."""
    env = os.environ.get("NEOTOMA_AGENT_DB")
    if env:
        return Path(env).expanduser()
    return data_dir() / "memory.db"


def private_parent(path: Path) -> None:
    """Create the directory of ``path`` 0700 if missing; the per-user data directory is set
    0700 when it exists (an older version made it 0755). A directory the user named
    elsewhere keeps its mode."""
    from ..files import private_dir

    parent = path.parent
    private_dir(parent, tighten=parent in (data_dir(), _xdg_data_dir()))


def _xdg_data_dir() -> Path:
    return (
        Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "neotoma-agent"
    )


def data_dir() -> Path:
    """The per-user data directory ``neotoma-agent`` (``$XDG_DATA_HOME`` or
    ``~/.local/share`` on Linux)."""
    if sys.platform == "win32":  # pragma: no cover - not exercised in CI
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":  # pragma: no cover
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "neotoma-agent"
