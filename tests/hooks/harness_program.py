"""What running a real coding-agent program offline takes, whichever it is.

A :class:`ProgramSandbox` is a temporary home and project the program runs in, against a
fake model API (``fake_model_api``) on 127.0.0.1 inside a network namespace of its own
(``unshare -n``: the fake must be ``isolated``), so nothing leaves the machine and no real
settings are read. Each harness's sandbox (``claude_program.ClaudeProject``,
``codex_program.CodexProject``) says where its settings live, what its environment adds
and how its prompts are spelled; running the program, interrupting it and running our
command line beside it are here, once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from fake_model_api import FakeModelAPI

__all__ = ["ProgramSandbox"]


class ProgramSandbox:
    """A sandboxed home and project the real ``program`` runs in, against ``api``."""

    #: our environment's variables the program is given (the rest of its environment is
    #: the sandbox's)
    KEEP: ClassVar[tuple[str, ...]] = ("PATH", "LANG", "TMPDIR")
    #: the program's stdin (``None``: ours)
    STDIN: ClassVar[int | None] = None

    def __init__(self, root: Path, api: FakeModelAPI, program: Path) -> None:
        if api.netns is None:
            raise ValueError("run a third-party program only against an isolated fake API")
        self.root = root
        self.api = api
        self.program = program
        self.home = root / "home"
        self.project = root / "project"
        #: variables a test adds to the program's environment
        self.extra_env: dict[str, str] = {}
        self.home.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)

    def program_env(self) -> dict[str, str]:
        """What the harness's program needs besides ``HOME`` (its config, the fake API)."""
        return {}

    def neotoma_env(self) -> dict[str, str]:
        """What our command line needs besides our environment to find the harness's files."""
        return {}

    def env(self) -> dict[str, str]:
        """The program's environment: only the fake API, a private home."""
        keep = {k: v for k, v in os.environ.items() if k in self.KEEP}
        return {**keep, "HOME": str(self.home), **self.program_env(), **self.extra_env}

    def command(self, *argv: str) -> list[str]:
        """The program with ``argv``, run inside the fake API's network namespace."""
        return self.api.command([str(self.program), *argv])

    def neotoma(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``python -m neotoma_agent ARGS`` in the project (e.g. ``hooks install``)."""
        return subprocess.run(
            [sys.executable, "-m", "neotoma_agent", *args],
            cwd=self.project,
            env={**os.environ, **self.neotoma_env()},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    def run(self, argv: list[str], timeout: float, *, check: bool = True) -> str:
        """Run the program with ``argv`` to its end, which must be a success (unless not
        ``check``); its stdout."""
        done = subprocess.run(
            self.command(*argv),
            cwd=self.project,
            env=self.env(),
            stdin=self.STDIN,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0 or not check, done.stderr[-2000:]
        return done.stdout

    def run_interrupted(self, argv: list[str], timeout: float) -> int:
        """Run the program with ``argv`` and interrupt it (SIGINT) once its reply streams;
        the exit status. The fake must hold a :class:`fake_model_api.Hang` reply for it."""
        proc = subprocess.Popen(
            self.command(*argv),
            cwd=self.project,
            env=self.env(),
            stdin=self.STDIN,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert self.api.wait_hanging(timeout), "the program never reached the model"
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        return proc.returncode
