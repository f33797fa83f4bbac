"""A hook process loads only what its event needs (issue 27: p50 <= 150 ms per event).

A coding agent starts ``neotoma-agent hook`` as a fresh process for every event, so what
the process imports is its latency. A tool use only appends to the hook's SQLite state: no
event loop, no store, no turn engine, no attrs (the tool-call API checks the call when the
turn's closing store is built). A Stop (a closing store) writes the store file from the
hook's own thread: no event loop, no turn engine, no store thread (``hooks._embedded``), and
so does a prompt opening its turn (``hooks._embedded_open``). No hook loads the HTTP client,
structlog, the installer or the transcript import. Speed itself is
measured by ``benchmarks/hook_latency.py``, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_support import clean_env
from hook_support import Hooks, recorded, summary, tool_invocations

import neotoma_agent
from neotoma_agent import ToolCall
from neotoma_agent.hooks import HookState

#: never loaded by a hook process on the embedded store, whatever the event
NEVER = (
    "aiohttp",
    "structlog",
    "neotoma_agent.transport.http",
    "neotoma_agent.qa",
    "neotoma_agent.server",
    "neotoma_agent.hooks._install",
    "neotoma_agent.hooks._backfill",
)

#: what a tool use must not load: it only appends the call to the state file
NOT_FOR_A_TOOL_USE = (
    *NEVER,
    "asyncio",
    "anyio",
    "neotoma_agent._memory",
    "neotoma_agent._turn",
    "neotoma_agent._phases",
    "neotoma_agent._recall.retrieval",
    "neotoma_agent._recall.context",
    "neotoma_agent._recall.history",
    "neotoma_agent._neotoma.identity",
    "neotoma_agent.transport.embedded",
    "neotoma_agent.transport._base",
    "neotoma_agent._records.tools",
    "attr",
    "attrs",
)

_RUN = """
import json, sys
from neotoma_agent.cli import main
status = main(sys.argv[2:])
# The attrs classes the package built (each one compiles its methods when it is defined).
built = sorted(
    f"{name}.{value.__qualname__}"
    for name, module in list(sys.modules.items())
    if name.startswith("neotoma_agent") and module is not None
    for value in list(vars(module).values())
    if isinstance(value, type) and value.__module__ == name and "__attrs_attrs__" in vars(value)
)
with open(sys.argv[1], "w") as out:
    json.dump({"status": status, "modules": sorted(sys.modules), "attrs": built}, out)
"""


def hook_run(
    tmp_path: Path, event: str, payload: dict[str, object] | bytes, *, quiet: bool = True
) -> dict[str, Any]:
    """What a fresh ``neotoma-agent hook claude-code EVENT`` process loaded: its modules
    (``modules``) and the package's attrs classes it built (``attrs``)."""
    report = tmp_path / f"{event}-modules.json"
    argv = ["hook", "claude-code", event, "--db", str(tmp_path / "memory.db")]
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(report), *argv, "--state", str(tmp_path / "state.db")],
        input=payload if isinstance(payload, bytes) else json.dumps(payload).encode(),
        capture_output=True,
        env=clean_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    if quiet:
        assert done.stderr == b"", done.stderr.decode(errors="replace")
    result: dict[str, Any] = json.loads(report.read_text())
    assert result["status"] == 0
    return result


def hook_modules(
    tmp_path: Path, event: str, payload: dict[str, object] | bytes, *, quiet: bool = True
) -> set[str]:
    """The modules a fresh ``neotoma-agent hook claude-code EVENT`` process loaded."""
    return set(hook_run(tmp_path, event, payload, quiet=quiet)["modules"])


def private(classes: list[str]) -> set[str]:
    """The classes of ``classes`` (``module.Name``) that are no public name of the package:
    its records a hook builds are plain classes (a public one keeps its attrs API)."""
    return {c for c in classes if c.rsplit(".", 1)[1] not in neotoma_agent.__all__}


def loaded(modules: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in modules for n in names if m == n or m.startswith(n + ".")}


def test_a_tool_use_only_writes_the_state_file(tmp_path: Path) -> None:
    inputs = dict(recorded("claude-code", "tool"))
    hooks = Hooks(tmp_path, "claude-code")
    hooks.send("UserPromptSubmit", inputs["UserPromptSubmit"])  # the turn, opened in-process

    modules = hook_modules(tmp_path, "PostToolUse", inputs["PostToolUse"])

    assert loaded(modules, NOT_FOR_A_TOOL_USE) == set()
    # ...and the call was kept for the turn's closing store, in the shape the API reads.
    conv = hooks.conversation(inputs["PostToolUse"]["session_id"])
    with HookState(hooks.state) as state:
        turn = state.latest_turn(conv)
        assert turn is not None
        [call] = state.tools(conv, turn)
    assert call["call_id"] == inputs["PostToolUse"]["tool_use_id"]
    checked = ToolCall.from_json(call)
    assert (checked.name, checked.status) == ("Bash", "ok")


#: what a closing store on the store file must not load: it writes through ._write alone
NOT_FOR_A_CLOSE = (
    *NEVER,
    "asyncio",
    "anyio",
    "neotoma_agent._memory",
    "neotoma_agent._turn",
    "neotoma_agent._phases",
    "neotoma_agent._recall.retrieval",
    "neotoma_agent._recall.context",
    "neotoma_agent._recall.history",
    "neotoma_agent.transport.embedded._store",
    "neotoma_agent.transport.embedded._db_thread",
    "neotoma_agent.transport._base",
    "neotoma_agent.transport._results",
    "neotoma_agent.transport._query_results",
)


def test_a_stop_writes_the_store_file_without_the_engine(tmp_path: Path) -> None:
    inputs = dict(recorded("claude-code", "tool"))
    hooks = Hooks(tmp_path, "claude-code")
    hooks.send("UserPromptSubmit", inputs["UserPromptSubmit"])  # the turn, opened in-process
    hooks.send("PostToolUse", inputs["PostToolUse"])

    run = hook_run(tmp_path, "Stop", inputs["Stop"])
    modules = set(run["modules"])

    assert loaded(modules, NOT_FOR_A_CLOSE) == set()
    assert private(run["attrs"]) == set()
    assert "neotoma_agent.hooks._embedded" in modules
    [turn] = summary(hooks.db, hooks.conversation(inputs["Stop"]["session_id"]))
    assert turn == (
        inputs["UserPromptSubmit"]["prompt"],
        inputs["Stop"]["last_assistant_message"],
        "completed",
    )
    assert [t["tool_name"] for t in tool_invocations(hooks.db)] == ["Bash"]


#: what opening a turn on the store file must not load: its reads and its store run in the
#: hook's own thread, through the store's own functions
NOT_FOR_A_PROMPT = (
    *NEVER,
    "asyncio",
    "anyio",
    "neotoma_agent._memory",
    "neotoma_agent._turn",
    "neotoma_agent._phases",
    "neotoma_agent._open_turn",
    "neotoma_agent._settings",
    "neotoma_agent.transport.embedded._store",
    "neotoma_agent.transport.embedded._db_thread",
    # the protocols, and the answers of the calls a turn never makes (it parses the store's,
    # the lookups' and the history pages' answers with ._results)
    "neotoma_agent.transport._base",
    "neotoma_agent.transport._query_results",
    # a turn without tool calls (the recorded one): neither the API nor the payloads
    "neotoma_agent._records.tools",
    "neotoma_agent._records.tool_payload",
    "neotoma_agent._recall.tool_reads",
)


def test_a_prompt_opens_its_turn_without_the_engine(tmp_path: Path) -> None:
    inputs = recorded("claude-code", "session")
    hooks = Hooks(tmp_path, "claude-code")
    hooks.replay(inputs[:2])  # a first turn, stored in-process: the next prompt reads it

    run = hook_run(tmp_path, "UserPromptSubmit", inputs[2][1])
    modules = set(run["modules"])

    assert loaded(modules, NOT_FOR_A_PROMPT) == set()
    # Its records are plain classes: the attrs classes it builds are the public ones only
    # (each attrs class compiles its methods as the process defines it).
    assert private(run["attrs"]) == set()
    assert "neotoma_agent.hooks._embedded_open" in modules
    conv = hooks.conversation(inputs[2][1]["session_id"])
    with HookState(hooks.state) as state:
        turn = state.latest_turn(conv)
        assert turn is not None
        row = state.get(conv, turn)
    assert row is not None
    assert row.phase == "open"
    assert row.context is not None
    assert "Earlier in this conversation" in row.context


def test_bad_input_loads_no_attrs_and_no_store(tmp_path: Path) -> None:
    # Refused before any record is made: no attrs class is built, no store opened.
    modules = hook_modules(tmp_path, "Stop", b"{not json", quiet=False)

    assert loaded(modules, NOT_FOR_A_TOOL_USE) == set()


_MAIN = """
import atexit, gc, runpy, sys
report = sys.argv.pop(1)
atexit.register(lambda: open(report, "w").write(str(gc.isenabled())))
sys.argv[0] = "neotoma_agent"
runpy.run_module("neotoma_agent", run_name="__main__", alter_sys=True)
"""


def collecting(tmp_path: Path, *argv: str) -> bool:
    """Whether ``python -m neotoma_agent ARGV`` ran with the cyclic garbage collector on."""
    report = tmp_path / "gc.txt"
    subprocess.run(
        [sys.executable, "-c", _MAIN, str(report), *argv],
        input=b"{not json",
        capture_output=True,
        env=clean_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    return {"True": True, "False": False}[report.read_text()]


def test_only_a_hook_process_runs_without_the_cyclic_collector(tmp_path: Path) -> None:
    # What `hooks install` registers (`python -m neotoma_agent hook ...`): its work is its
    # imports, whose objects live until the exit. Any other command (a server among them)
    # keeps the collector.
    db = str(tmp_path / "memory.db")
    assert not collecting(tmp_path, "hook", "claude-code", "Stop", "--db", db)
    assert collecting(tmp_path, "--version")
    assert collecting(tmp_path, "stats", "--db", db)
