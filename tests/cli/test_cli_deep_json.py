"""A file of JSON nested deeper than Python's parser follows: one line of error, no
traceback, for each format ``import`` reads (``hooks install`` has its own test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import cli

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ((), "line 1: skipped: JSON nested too deeply to read"),
        (("--from", "claude-code"), "unreadable lines"),
        (("--from", "codex"), "unreadable lines"),
    ],
    ids=["jsonl", "claude-code", "codex"],
)
def test_import_of_a_deeply_nested_line_reports_it_and_goes_on(
    tmp_path: Path, source: tuple[str, ...], said: str
) -> None:
    good = {"conversation_id": "c", "user": "hi", "assistant": "hello"}
    path = tmp_path / "rollout-deep.jsonl"
    path.write_text(DEEP + "\n" + json.dumps(good) + "\n")
    result = cli("import", *source, str(path), "--db", str(tmp_path / "m.db"), home=tmp_path)
    assert result.returncode == 1  # a line was not stored
    assert said in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "RecursionError" not in result.stdout + result.stderr
