"""``neotoma-agent audit`` as a user runs it: exit status, text, JSON, --repair, --conversation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.transport.embedded import EmbeddedStore


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEOTOMA_")}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "neotoma_agent.cli", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        cwd=home,
        timeout=60,
        check=False,
    )


async def _seed(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        chat = NeotomaMemory(store, conversation_id="chat-42")
        await chat.record_turn("first question", "first answer", turn_id="t1")
        await chat.open_turn("the process died here", turn_id="t2")
        other = NeotomaMemory(store, conversation_id="other")
        await other.open_turn("also cut off", turn_id="o1")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    anyio.run(_seed, path)
    return path


def test_audit_exits_1_while_orphans_remain_and_0_once_repaired(db: Path, tmp_path: Path) -> None:
    found = run_cli("audit", "--db", str(db), home=tmp_path)
    assert found.returncode == 1, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].startswith(f"audited {db}: 2 conversations, 3 turns, 4 messages in ")
    assert lines[1].startswith(
        "  ERROR  orphan_turn  chat-42 / t2: The user message of turn t2 is stored but the "
        "turn was never closed (turn record: open) and no reply is stored. [user ent_"
    )
    assert lines[-1] == "2 problems remain (2 repairable: run again with --repair)"

    repaired = run_cli("audit", "--repair", "--db", str(db), home=tmp_path)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "  repaired  chat-42 / t2: Recorded turn t2 as abandoned (orphan_found_by_audit)" in (
        repaired.stdout
    )
    assert repaired.stdout.endswith("clean: every turn has both halves or is closed as abandoned\n")

    again = run_cli("--db", str(db), "audit", home=tmp_path)  # global option first
    assert again.returncode == 0
    assert "  info   2 abandoned turns (2 closed by audit --repair)\n" in again.stdout
    shown = run_cli("show", "chat-42", "--db", str(db), home=tmp_path)
    assert "repaired by audit" in shown.stdout


def test_audit_json_and_one_conversation(db: Path, tmp_path: Path) -> None:
    result = run_cli("audit", "--json", "--conversation", "chat-42", "--db", str(db), home=tmp_path)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["store"] == str(db)
    assert report["clean"] is False
    assert report["conversation_id"] == "chat-42"
    assert [(f["conversation_id"], f["turn_id"], f["kind"]) for f in report["findings"]] == [
        ("chat-42", "t2", "orphan_turn")
    ]
    assert report["findings"][0]["repair"]["kind"] == "abandon_turn"

    repaired = run_cli(
        "audit", "--json", "--repair", "--conversation", "chat-42", "--db", str(db), home=tmp_path
    )
    assert repaired.returncode == 0
    outcome = json.loads(repaired.stdout)["repairs"][0]["outcomes"][0]
    assert outcome["status"] == "applied"
    # The other conversation's orphan is still there.
    assert run_cli("audit", "--db", str(db), home=tmp_path).returncode == 1


def test_min_age_leaves_fresh_turns_alone(db: Path, tmp_path: Path) -> None:
    result = run_cli("audit", "--min-age", "3600", "--db", str(db), home=tmp_path)
    assert result.returncode == 0
    assert "2 open turns younger than --min-age left alone" in result.stdout


def test_audit_mistakes_are_one_line_errors(db: Path, tmp_path: Path) -> None:
    missing = run_cli("audit", "--db", str(tmp_path / "nope.db"), home=tmp_path)
    assert missing.returncode != 0
    assert missing.stderr.startswith("neotoma-agent: error: no store at ")
    assert "Traceback" not in missing.stderr
    bad_since = run_cli("audit", "--since", "yesterday", "--db", str(db), home=tmp_path)
    assert bad_since.returncode != 0
    assert bad_since.stderr.startswith("neotoma-agent: error: since must be an ISO 8601")
    assert "Traceback" not in bad_since.stderr
