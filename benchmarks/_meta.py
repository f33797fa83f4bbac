"""Where a benchmark's figures came from: the machine, the moment, the command, the code.

Every benchmark's ``--json`` carries this under ``"meta"`` (``scripts/performance_doc.py``
prints it under each table of docs/performance.md). It is taken when the benchmark starts:
the load average then is what the run began under (the machine may be shared), and
``nice`` says whether the run yielded to other work.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the paths whose uncommitted changes make a run's commit ``+dirty`` (not the figures the
#: benchmarks write: ``nox -s bench`` rewrites them one after another)
_MEASURED = ("neotoma_agent", "benchmarks", "pyproject.toml", ":(exclude)benchmarks/results")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def environment(argv: list[str] | None = None) -> dict[str, Any]:
    """The run's metadata: date (UTC), command, git commit (``+dirty`` when the package or
    the benchmarks had uncommitted changes), Python, platform, CPU count, load average and
    niceness at start."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0])
    with contextlib.suppress(ValueError):  # a script outside this tree: as given
        script = script.resolve().relative_to(ROOT)
    commit = _git("rev-parse", "--short=12", "HEAD")
    # Changes to what runs (the package, the benchmarks), not to the docs, make it dirty.
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", *_MEASURED)
    if commit is not None and changed:
        commit += "+dirty"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(["python", str(script), *_without_json(argv[1:])]),
        "commit": commit,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "nice": os.nice(0),
    }


def _without_json(args: list[str]) -> list[str]:
    """The arguments but ``--json PATH`` (where the figures went is not how they were made)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif not a.startswith("--json="):
            out.append(a)
    return out
