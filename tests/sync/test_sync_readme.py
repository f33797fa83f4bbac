"""The sync guide's block (docs/sync.md) runs as written, as a script, and stores what it says."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from neotoma_agent.sync import SyncMemory, SyncStore

GUIDE = Path(__file__).resolve().parent.parent.parent / "docs" / "sync.md"
MARKER = "<!-- readme-sync:"


def sync_block() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1
    match = re.search(r"```python\n(.*?)\n```", text[text.index(MARKER) :], re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_readme_sync_block_runs_as_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sync_tour.py").write_text(sync_block(), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "sync_tour.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "Acme Corp is a customer.\n completed 0 earlier turns\n" in (result.stdout)
    # Again on the same file (in this process, to spare a start-up): it reads the first.
    monkeypatch.chdir(tmp_path)
    runpy.run_path("sync_tour.py", run_name="__main__")
    assert "\n completed 1 earlier turns\n" in capsys.readouterr().out
    with SyncStore.open(tmp_path / "memory.db") as store:
        first, second = SyncMemory(store, conversation_id="chat-42").history()
    assert first.reply == second.reply == "Acme Corp is a customer. (from the CRM)"
    assert len(first.reply_refers_to) == 1  # the Acme Corp the block seeded
