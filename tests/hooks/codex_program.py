"""Running the real Codex program (``npm install @openai/codex``) offline.

The program talks to :class:`fake_model_api.FakeResponses` on 127.0.0.1 (the only
model provider its ``config.toml`` names), with ``$HOME`` and ``$CODEX_HOME`` under a
temporary directory, so nothing leaves the machine and no real settings are read.
:class:`CodexProject` is one such sandbox: a ``CODEX_HOME`` whose ``hooks.json`` our
``hooks install codex`` writes, plus helpers to run one prompt (``codex exec``), a second
prompt in the same session (``codex exec resume``) and an interrupted prompt. Used by the
slow end-to-end test and by ``scripts/record_codex_inputs.py``.

Codex runs a hook from a user's ``hooks.json`` only once the person has reviewed and
trusted it (``/hooks`` in its terminal UI); these runs pass
``--dangerously-bypass-hook-trust`` instead, the flag Codex provides for automation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from fake_model_api import FakeResponses
from harness_program import ProgramSandbox

__all__ = ["CodexProject", "codex_program"]

#: ``codex exec`` flags every run passes: no git repository needed, events as JSON lines
FLAGS = ("--skip-git-repo-check", "--json")
#: and the one that runs hooks nobody reviewed in Codex's ``/hooks``
BYPASS_TRUST = "--dangerously-bypass-hook-trust"


def codex_program() -> Path | None:
    """The Codex executable: ``$CODEX_PROGRAM``, else ``codex`` on ``PATH``, if any."""
    named = os.environ.get("CODEX_PROGRAM")
    if named:
        return Path(named) if Path(named).is_file() else None
    found = shutil.which("codex")
    return Path(found) if found else None


class CodexProject(ProgramSandbox):
    """A sandboxed Codex home and project the real program runs in, against ``api``."""

    STDIN = subprocess.DEVNULL

    def __init__(self, root: Path, api: FakeResponses, program: Path) -> None:
        super().__init__(root, api, program)
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir(parents=True, exist_ok=True)
        (self.codex_home / "config.toml").write_text(api.config())

    def program_env(self) -> dict[str, str]:
        """Its home (whose ``config.toml`` names only the fake API), a fake key, no colour."""
        return {
            "CODEX_HOME": str(self.codex_home),
            "OPENAI_API_KEY": "sk-fake-offline",
            "NO_COLOR": "1",
        }

    def neotoma_env(self) -> dict[str, str]:
        """This ``CODEX_HOME``, where ``hooks install codex`` writes."""
        return {"CODEX_HOME": str(self.codex_home)}

    def hooks_file(self) -> Path:
        """``$CODEX_HOME/hooks.json``."""
        return self.codex_home / "hooks.json"

    def rollouts(self) -> list[Path]:
        """The session files Codex wrote (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``)."""
        return sorted((self.codex_home / "sessions").rglob("rollout-*.jsonl"))

    def _events(self, argv: list[str], timeout: float) -> list[dict[str, Any]]:
        stdout = self.run(argv, timeout)
        return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]

    def prompt(
        self, text: str, *, trusted: bool = True, timeout: float = 120
    ) -> list[dict[str, Any]]:
        """One prompt in a new session (``codex exec``); the program's JSON events.

        ``trusted=False``: without the flag that runs unreviewed hooks (as a person would
        run Codex before trusting them).
        """
        flags = (*FLAGS, BYPASS_TRUST) if trusted else FLAGS
        return self._events(["exec", *flags, text], timeout)

    def resume(self, text: str, *, timeout: float = 120) -> list[dict[str, Any]]:
        """Another prompt in the latest session (``codex exec resume --last``)."""
        return self._events(["exec", "resume", "--last", *FLAGS, BYPASS_TRUST, text], timeout)

    def interrupted(self, text: str, *, timeout: float = 120) -> int:
        """A prompt whose reply the person interrupts (SIGINT) mid-stream; the exit status.

        The fake must hold a :class:`fake_model_api.Hang` reply for this prompt.
        """
        return self.run_interrupted(["exec", *FLAGS, BYPASS_TRUST, text], timeout)
