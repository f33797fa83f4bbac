"""Running the real Claude Code program (bundled in ``claude-agent-sdk``) offline.

The program talks to :class:`fake_model_api.FakeAnthropic` on 127.0.0.1, with its home and
config under a temporary directory, so nothing leaves the machine and no real settings are
read. :class:`ClaudeProject` is one such sandbox: a project directory whose
``.claude/settings.local.json`` our ``hooks install --scope project`` writes, plus
helpers to run one prompt, an interrupted prompt, or several prompts in one session.
Used by the slow end-to-end test and by ``scripts/record_hook_inputs.py``.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from fake_model_api import FakeAnthropic
from harness_program import ProgramSandbox

__all__ = ["ClaudeProject", "claude_program"]


def claude_program() -> Path | None:
    """The ``claude`` executable bundled in the installed ``claude-agent-sdk``, if any."""
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    found = glob.glob(
        os.path.join(os.path.dirname(claude_agent_sdk.__file__), "_bundled", "claude")
    )
    return Path(found[0]) if found else None


class ClaudeProject(ProgramSandbox):
    """A sandboxed project the real program runs in, against ``api``."""

    KEEP = (*ProgramSandbox.KEEP, "TERM")

    def __init__(self, root: Path, api: FakeAnthropic, program: Path) -> None:
        super().__init__(root, api, program)
        self.api: FakeAnthropic = api
        (self.project / ".claude").mkdir(parents=True, exist_ok=True)

    def program_env(self) -> dict[str, str]:
        """The fake API, and the program's config under the sandbox's home."""
        return {**self.api.env(), "CLAUDE_CONFIG_DIR": str(self.home / ".claude")}

    def settings(self) -> dict[str, Any]:
        """The project's ``.claude/settings.local.json``."""
        path = self.project / ".claude" / "settings.local.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def write_settings(self, data: dict[str, Any]) -> None:
        """Replace the project's ``.claude/settings.local.json``."""
        path = self.project / ".claude" / "settings.local.json"
        path.write_text(json.dumps(data, indent=2))

    def prompt(
        self, text: str, *, tools: str = "Bash", timeout: float = 120, check: bool = True
    ) -> dict[str, Any]:
        """One prompt in a new session (``claude -p``); the program's JSON result.

        ``check=False``: the program may fail (exit 1 on a model API error)."""
        argv = ["-p", text, "--output-format", "json", "--allowedTools", tools]
        result: dict[str, Any] = json.loads(self.run(argv, timeout, check=check))
        return result

    def interrupted(self, text: str, *, timeout: float = 120) -> int:
        """A prompt whose reply the person interrupts (SIGINT) mid-stream; the exit status.

        The fake must hold a :class:`fake_model_api.Hang` reply for this prompt.
        """
        return self.run_interrupted(["-p", text], timeout)

    def session(
        self, *texts: str, interrupt_first: bool = False, timeout: float = 120
    ) -> list[dict[str, Any]]:
        """Several prompts in one session (``--input-format stream-json``); the results.

        ``interrupt_first``: the first prompt's reply is interrupted mid-stream as an app or
        the SDK interrupts it (a ``control_request`` of subtype ``interrupt``; the fake
        must hold a :class:`fake_model_api.Hang` reply for it); the session goes on.
        """
        # With partial messages the program says on stdout when the streamed text reached
        # it: the interrupt is sent only then (the fake having sent it is not enough; an
        # interrupt racing the stream leaves no partial reply to keep).
        partial = ("--include-partial-messages",) if interrupt_first else ()
        proc = subprocess.Popen(
            self.command(
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                *partial,
            ),
            cwd=self.project,
            env=self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        results = []
        try:
            for n, text in enumerate(texts):
                message = {"type": "user", "message": {"role": "user", "content": text}}
                proc.stdin.write(json.dumps(message) + "\n")
                proc.stdin.flush()
                if n == 0 and interrupt_first:
                    assert self.api.wait_hanging(timeout), "the program never reached the model"
                    for line in proc.stdout:
                        if _streamed_text(json.loads(line)):
                            break
                    request = {"subtype": "interrupt"}
                    stop = {"type": "control_request", "request_id": "stop", "request": request}
                    proc.stdin.write(json.dumps(stop) + "\n")
                    proc.stdin.flush()
                for line in proc.stdout:
                    event = json.loads(line)
                    if event.get("type") == "result":
                        results.append(event)
                        break
                self.api.release()  # an interrupted stream: the fake lets it go
            proc.stdin.close()
            proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None and not stream.closed:
                    stream.close()
        return results


def _streamed_text(event: dict[str, Any]) -> bool:
    """Whether a stream-json line says a piece of the reply's text reached the program."""
    inner = event.get("event") if event.get("type") == "stream_event" else None
    delta = inner.get("delta") if isinstance(inner, dict) else None
    return isinstance(delta, dict) and bool(delta.get("text"))
