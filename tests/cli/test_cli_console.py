"""The console script's own wrapper: the command's exit status, and a quick exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# What the console script and `python -m neotoma_agent` run, in a fresh process: an
# atexit hook reports whether the heap was frozen before the interpreter's final
# collection (which otherwise walks every object the command loaded).
_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen" if gc.get_freeze_count() else "not frozen", file=sys.stderr))
from neotoma_agent.cli import console_main
sys.argv = ["neotoma-agent", *sys.argv[1:]]
console_main()
"""


@pytest.mark.parametrize(
    ("argv", "status"), [(["--version"], 0), (["no-such-command"], 2), (["stats", "--db", "x"], 1)]
)
def test_console_main_exits_with_the_status_and_a_frozen_heap(
    tmp_path: Path, argv: list[str], status: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines()[-1] == "frozen"
