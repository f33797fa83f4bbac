"""Record the hook inputs the real Codex program sends, and its rollout files, as fixtures.

Runs Codex (``npm install @openai/codex``; give the native program as ``$CODEX_PROGRAM`` or
have ``codex`` on ``PATH``) against the fake Responses API in
``tests/fake_model_api.py``, with our hooks installed by ``neotoma-agent hooks install
codex`` (``$CODEX_HOME/hooks.json``) next to a recorder hook (another tool's hook, which
the install keeps), in six scenarios: a plain turn, a tool-using turn, a failing command,
an interrupted turn, a model API error, two prompts in one session (``codex exec`` then
``codex exec resume --last``). Each input lands in
``tests/data/hooks/codex/SCENARIO/NN-EVENT.json`` with the temporary directory replaced by
``/tmp/codex-run``; the session's rollout file is kept as ``rollout.jsonl`` (the program's
own instructions emptied), for the backfill's tests; ``program.json`` notes the version.

    CODEX_PROGRAM=/path/to/codex python scripts/record_codex_inputs.py
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "hooks")]

from _recording import install_ours, keep_inputs, recorder_hooks, scrub  # noqa: E402
from codex_program import CodexProject, codex_program  # noqa: E402
from fake_model_api import Call, Fail, FakeResponses, Hang, Text  # noqa: E402
from netns_support import NetworkNamespace  # noqa: E402

OUT = ROOT / "tests" / "data" / "hooks" / "codex"
RUN = "/tmp/codex-run"

#: the events the recorder listens to (ours; Codex also has SessionStart, PreToolUse, ...)
EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop", "StopFailure", "SessionEnd")

#: strings longer than this in a rollout line are the program's own prompts: emptied
_LONG = 1500


def _slim(value: Any) -> Any:
    if isinstance(value, str):
        return "" if len(value) > _LONG else value
    if isinstance(value, list):
        return [_slim(v) for v in value]
    if isinstance(value, dict):
        return {k: _slim(v) for k, v in value.items()}
    return value


def main() -> int:
    program = codex_program()
    if program is None:
        print("no Codex program: set CODEX_PROGRAM or put codex on PATH", file=sys.stderr)
        return 1
    with NetworkNamespace() as ns:  # a third-party program: never on the network
        argv = ns.command([str(program), "--version"])
        version = subprocess.run(argv, capture_output=True, text=True).stdout
    shutil.rmtree(OUT, ignore_errors=True)
    scenarios: dict[str, tuple[list[Any], tuple[str, ...]]] = {
        "completed": ([Text("Acme Corp is a customer of ours.")], ("What about Acme Corp?",)),
        "tool": (
            [Call("exec_command", {"cmd": "echo hi"}, text="Checking."), Text("The answer is hi.")],
            ("Run echo hi",),
        ),
        "tool_failure": (
            [Call("exec_command", {"cmd": "exit 3"}), Text("It failed.")],
            ("Run exit 3",),
        ),
        "interrupted": ([Hang("partial ")], ("Tell me a long story",)),
        "api_error": ([Fail(500, "fake outage", "server_error")], ("Say something",)),
        "session": (
            [Text("Hello Bob."), Text("Alice is here too.")],
            ("Hello, I am Bob", "Is Alice there?"),
        ),
    }
    for name, (script, prompts) in scenarios.items():
        with tempfile.TemporaryDirectory() as tmp, FakeResponses(script, isolated=True) as api:
            project = CodexProject(Path(tmp), api, program)
            inbox = Path(tmp) / "inbox"
            project.hooks_file().write_text(json.dumps(recorder_hooks(inbox, EVENTS), indent=2))
            install_ours(project, tmp, "codex")
            if name == "interrupted":
                project.interrupted(prompts[0])
            elif name == "api_error":
                # codex exec exits 1 when the model API fails
                with contextlib.suppress(AssertionError):
                    project.prompt(prompts[0])
            else:
                project.prompt(prompts[0])
                for text in prompts[1:]:
                    project.resume(text)
            target = OUT / name
            n = keep_inputs(inbox, target, tmp, RUN)
            for rollout in project.rollouts():
                lines = [
                    json.dumps(_slim(json.loads(scrub(line, tmp, RUN))))
                    for line in rollout.read_text().splitlines()
                    if line.strip()
                ]
                (target / "rollout.jsonl").write_text("\n".join(lines) + "\n")
            print(f"{name}: {n} inputs, {len(project.rollouts())} rollout file(s)")
    (OUT / "program.json").write_text(json.dumps({"codex": version.strip()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
