"""What both recorders of a real harness's hook inputs share (``record_hook_inputs.py`` for
Claude Code, ``record_codex_inputs.py`` for Codex): the recorder hook installed beside ours,
our hooks installed in the sandbox, and each input kept as a fixture with the temporary
directory replaced by a fixed path."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["install_ours", "keep_inputs", "recorder_hooks", "scrub"]

# Another tool's hook: it writes each input it is given to a file named after its event.
_RECORDER = """
import pathlib, sys, time
d = pathlib.Path(sys.argv[1]); d.mkdir(parents=True, exist_ok=True)
(d / f"{time.time_ns()}-{sys.argv[2]}.json").write_bytes(sys.stdin.buffer.read())
"""


def recorder_hooks(inbox: Path, events: Iterable[str]) -> dict[str, Any]:
    """A hooks file (or settings file) with only the recorder's hooks, one per event: what
    was there before our install, which keeps it."""
    hooks = {}
    for event in events:
        command = " ".join(
            shlex.quote(a) for a in (sys.executable, "-c", _RECORDER, str(inbox), event)
        )
        hooks[event] = [{"hooks": [{"type": "command", "command": command}]}]
    return {"hooks": hooks}


def install_ours(project: Any, tmp: str, *args: str) -> None:
    """``neotoma-agent hooks install ARGS`` in the sandbox, with a store and a state file
    in the temporary directory."""
    store = ("--db", str(Path(tmp) / "memory.db"), "--state", str(Path(tmp) / "state.db"))
    project.neotoma("hooks", "install", *args, *store)


def scrub(text: str, tmp: str, run: str) -> str:
    """``text`` with the temporary directory (as given and resolved) replaced by ``run``."""
    return text.replace(str(Path(tmp).resolve()), run).replace(tmp, run)


def keep_inputs(inbox: Path, target: Path, tmp: str, run: str) -> int:
    """Write what the recorder got as ``target/NN-EVENT.json``, in order; how many."""
    target.mkdir(parents=True)
    n = 0
    for n, path in enumerate(sorted(inbox.glob("*.json")), 1):
        event = path.stem.split("-", 1)[1]
        data = json.loads(scrub(path.read_text(), tmp, run))
        (target / f"{n:02d}-{event}.json").write_text(json.dumps(data, indent=2) + "\n")
    return n
