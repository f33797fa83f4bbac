"""Record the hook inputs the real Claude Code program sends, as test fixtures.

Runs the ``claude`` program bundled in ``claude-agent-sdk`` (``pip install
claude-agent-sdk``) against the fake Anthropic API in ``tests/fake_model_api.py``, with our
hooks installed by ``neotoma-agent hooks install claude-code --scope project`` next to a
recorder hook (another tool's hook, which the install keeps), in seven scenarios: a plain
turn, a tool-using turn, a failing tool, an interrupted turn, a turn interrupted after it
said something and ran a tool, a turn the model API refused, two prompts in one session,
and a session whose first turn is interrupted as an app interrupts it (which fires
``Interrupt``; a ``claude -p`` killed by SIGINT exits without it) before a second prompt.
Each input lands in ``tests/data/hooks/claude_code/SCENARIO/NN-EVENT.json``, with the
temporary directory replaced by ``/tmp/claude-run``; ``program.json`` notes the version.
Each scenario's session transcript is kept as ``transcript.jsonl`` (without the lines that
hold the program's own prompts, and with attachment bodies emptied), for the backfill's
tests.

    python scripts/record_hook_inputs.py            # rewrites tests/data/hooks/claude_code
    python scripts/record_hook_inputs.py tool       # rewrites only the scenarios named
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "hooks")]

from _recording import install_ours, keep_inputs, recorder_hooks, scrub  # noqa: E402
from claude_program import ClaudeProject, claude_program  # noqa: E402
from fake_model_api import Call, Fail, FakeAnthropic, Hang, Text  # noqa: E402
from netns_support import NetworkNamespace  # noqa: E402

OUT = ROOT / "tests" / "data" / "hooks" / "claude_code"
RUN = "/tmp/claude-run"

#: transcript line kinds left out of the fixtures (the program's prompts, request shapes)
DROPPED = ("api-request-blob", "api-request-shape")

EVENTS = (
    "UserPromptSubmit",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "StopFailure",
    "Interrupt",
    "SessionEnd",
)


def slim(line: str) -> str:
    """An ``attachment`` line with its body emptied (it holds the program's own prompts)."""
    data = json.loads(line)
    if data.get("type") != "attachment" or not isinstance(data.get("attachment"), dict):
        return line
    data["attachment"] = {"type": data["attachment"].get("type")}
    data.pop("rendered", None)
    return json.dumps(data)


def main() -> int:
    program = claude_program()
    if program is None:
        print("claude-agent-sdk is not installed", file=sys.stderr)
        return 1
    with NetworkNamespace() as ns:  # a third-party program: never on the network
        argv = ns.command([str(program), "--version"])
        version = subprocess.run(argv, capture_output=True, text=True).stdout
    scenarios = {
        "completed": ([Text("Acme Corp is a customer of ours.")], "What about Acme Corp?"),
        "tool": (
            [
                Call("Bash", {"command": "echo hi", "description": "say hi"}, text="Checking."),
                Text("The answer is hi."),
            ],
            "Run echo hi",
        ),
        "tool_failure": (
            [Call("Bash", {"command": "exit 3", "description": "fail"}), Text("It failed.")],
            "Run exit 3",
        ),
        "interrupted": ([Hang("partial ")], "Tell me a long story"),
        "interrupted_tool": (
            [
                Call("Bash", {"command": "echo hi", "description": "say hi"}, text="Checking."),
                Hang("partial "),
            ],
            "Check, then tell me a story",
        ),
        "api_error": ([Fail(400, "fake refusal")] * 12, "Say something"),
        "session": ([Text("Hello Bob."), Text("Alice is here too.")], None),
        "interrupted_session": (
            [Hang("Once upon a time word1 word2 word3 "), Text("Fine, the end.")],
            None,
        ),
    }
    only = set(sys.argv[1:])
    if only - set(scenarios):
        print(f"unknown scenarios: {', '.join(sorted(only - set(scenarios)))}", file=sys.stderr)
        return 2
    if not only:
        shutil.rmtree(OUT, ignore_errors=True)
    for name, (script, prompt) in scenarios.items():
        if only and name not in only:
            continue
        shutil.rmtree(OUT / name, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropic(script, isolated=True) as api:
            project = ClaudeProject(Path(tmp), api, program)
            inbox = Path(tmp) / "inbox"
            project.write_settings(recorder_hooks(inbox, EVENTS))
            install_ours(project, tmp, "claude-code", "--scope", "project")
            if name == "interrupted_session":
                project.session("Tell me a long story", "Just end it", interrupt_first=True)
            elif name.startswith("interrupted"):
                project.interrupted(prompt or "")
            elif name == "session":
                project.session("Hello, I am Bob", "Is Alice there?")
            elif name == "api_error":
                # claude -p exits 1 when the model API refuses the request
                with contextlib.suppress(AssertionError):
                    project.prompt(prompt or "")
            else:
                project.prompt(prompt or "")
            target = OUT / name
            n = keep_inputs(inbox, target, tmp, RUN)
            # The session's transcript, for the backfill's tests; without the lines that
            # hold the program's own system prompt and request blobs (never read back).
            for transcript in (project.home / ".claude" / "projects").glob("*/*.jsonl"):
                lines = [
                    slim(scrub(line, tmp, RUN))
                    for line in transcript.read_text().splitlines()
                    if json.loads(line).get("type") not in DROPPED
                ]
                (target / "transcript.jsonl").write_text("\n".join(lines) + "\n")
            print(f"{name}: {n} inputs")
    (OUT / "program.json").write_text(json.dumps({"claude": version.strip()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
