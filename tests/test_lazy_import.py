"""`import neotoma_agent` and the command line load only what they use (issue 24 §4, 31 §4).

Each check runs in a fresh interpreter (a subprocess), since this process has imported
everything already. Speed itself is measured by benchmarks/startup.py, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import clean_env

import neotoma_agent

#: what a program that uses none of them must not pay for
HEAVY = (
    "aiohttp",
    "structlog",
    "neotoma_agent.qa",
    "neotoma_agent.transport.http",
    "neotoma_agent.server",
)


def loaded_after(code: str, tmp_path: Path) -> set[str]:
    """The modules loaded once ``code`` ran in a fresh interpreter."""
    script = (
        f"import json, sys\n{code}\nsys.stdout.write('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout.rsplit("\n", 1)[1]))


def test_import_loads_no_wing(tmp_path: Path) -> None:
    loaded = loaded_after("import neotoma_agent", tmp_path)
    assert not {m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")}
    assert "neotoma_agent.transport.embedded" not in loaded
    assert "attrs" not in loaded


def test_a_turn_on_the_embedded_store_loads_neither_aiohttp_nor_structlog(
    tmp_path: Path,
) -> None:
    code = """
import anyio
from neotoma_agent import EmbeddedStore, NeotomaMemory

async def main():
    async with EmbeddedStore.open("m.db") as store:
        memory = NeotomaMemory(store, conversation_id="c1", history_turns=2)
        async with memory.turn("Tell me about Acme Corp") as t:
            t.reply = "Acme Corp it is."
    assert t.result.completed

anyio.run(main)
"""
    loaded = loaded_after(code, tmp_path)
    assert {"aiohttp", "structlog", "neotoma_agent.qa"}.isdisjoint(loaded)


def test_a_name_loads_its_module_when_used(tmp_path: Path) -> None:
    loaded = loaded_after("import neotoma_agent; neotoma_agent.HttpTransport", tmp_path)
    assert "aiohttp" in loaded
    assert "neotoma_agent.qa" not in loaded


@pytest.mark.parametrize(
    ("argv", "command"),
    [(["--version"], None), (["--db", "none.db", "show", "c1"], "_show")],
)
def test_the_command_line_loads_only_the_command_it_runs(
    tmp_path: Path, argv: list[str], command: str | None
) -> None:
    code = f"""
from neotoma_agent.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
"""
    loaded = loaded_after(code, tmp_path)
    commands = {m for m in loaded if m.removeprefix("neotoma_agent.cli.") in _NAMES}
    assert commands == ({f"neotoma_agent.cli.{command}"} if command else set())
    assert {"aiohttp", "structlog", "neotoma_agent.qa"}.isdisjoint(loaded)


_NAMES = {"_demo", "_chat", "_show", "_import", "_stats", "_audit", "_serve", "_outbox"}


def test_the_command_lines_private_door_loads_a_core_module_when_a_name_is_used(
    tmp_path: Path,
) -> None:
    """``cli/_core.py`` imports the shield inside the functions that use it: a command that
    only escapes text (the parser, a hook) does not load it, nor anyio."""
    code = "from neotoma_agent.cli import _core; from neotoma_agent.cli._core import printable"
    loaded = loaded_after(code, tmp_path)
    assert "neotoma_agent._util.terminal" in loaded
    assert {"neotoma_agent._util.shield", "anyio"}.isdisjoint(loaded)
    used = loaded_after(
        code + "; import anyio; anyio.run(_core.run_to_completion, lambda: anyio.sleep(0), 5)",
        tmp_path,
    )
    assert "neotoma_agent._util.shield" in used


def test_dir_and_all_list_every_public_name() -> None:
    assert set(neotoma_agent.__all__) <= set(dir(neotoma_agent))
    assert neotoma_agent.__all__ == sorted(neotoma_agent.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        neotoma_agent.nothing_here  # noqa: B018


def test_an_in_process_run_leaves_logging_as_it_was(tmp_path: Path) -> None:
    import logging

    import structlog

    from neotoma_agent.cli import main

    std = logging.getLogger("neotoma_agent")
    before = (structlog.is_configured(), std.level, list(std.handlers))
    assert main(["--db", str(tmp_path / "none.db"), "--log-level", "info", "show", "c"]) == 1
    assert (structlog.is_configured(), std.level, list(std.handlers)) == before
