"""Where a child process waits, read from ``/proc`` (Linux), so that a test acts once the
child blocks where the test needs it (readline waiting for a key, SQLite waiting for a
lock) rather than after a sleep that hopes it does."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["PROC", "until", "waits_in"]

#: whether this system shows where a process sleeps (``/proc/PID/wchan``)
PROC = Path("/proc/self/wchan").exists()


def waits_in(pid: int, *where: str) -> bool:
    """Whether the main thread of ``pid`` sleeps (state ``S``) in a kernel function whose
    name contains one of ``where`` (``"nanosleep"``, ``"select"``, ...)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        function = Path(f"/proc/{pid}/wchan").read_text()
    except (OSError, IndexError):
        return False
    return state == "S" and any(name in function for name in where)


def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Check ``condition`` every 10 ms until it holds; AssertionError naming ``what`` if it
    does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout:g} s: {what}")
        time.sleep(0.01)
