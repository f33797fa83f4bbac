"""``neotoma-agent audit`` as a user runs it: exit status, text, JSON, --repair, --conversation."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import attrs
import pytest
from cli_support import cli

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.qa import AUDIT_DEFAULT_MIN_AGE as DEFAULT_MIN_AGE
from neotoma_agent.transport.embedded import EmbeddedStore


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
    found = cli("audit", "--min-age", "0", "--db", str(db), home=tmp_path)
    assert found.returncode == 1, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].startswith(f"audited {db}: 2 conversations, 3 turns, 4 messages in ")
    assert lines[1].startswith(
        "  ERROR  orphan_turn  chat-42 / t2: The user message of turn t2 is stored but the "
        "turn was never closed (turn record: open) and no reply is stored. [user ent_"
    )
    assert lines[-1] == "2 problems remain (2 repairable: run again with --repair)"

    repaired = cli("audit", "--repair", "--min-age", "0", "--db", str(db), home=tmp_path)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "  repaired  chat-42 / t2: Recorded turn t2 as abandoned (orphan_found_by_audit)" in (
        repaired.stdout
    )
    assert repaired.stdout.endswith("clean: every turn has both halves or is closed as abandoned\n")

    again = cli("--db", str(db), "audit", "--min-age", "0", home=tmp_path)  # global option first
    assert again.returncode == 0
    assert "  info   2 abandoned turns (2 closed by audit --repair)\n" in again.stdout
    shown = cli("show", "chat-42", "--db", str(db), home=tmp_path)
    assert "repaired by audit" in shown.stdout


def test_audit_json_and_one_conversation(db: Path, tmp_path: Path) -> None:
    result = cli(
        "audit",
        "--json",
        "--min-age",
        "0",
        "--conversation",
        "chat-42",
        "--db",
        str(db),
        home=tmp_path,
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["store"] == str(db)
    assert report["clean"] is False
    assert report["conversation_id"] == "chat-42"
    assert [(f["conversation_id"], f["turn_id"], f["kind"]) for f in report["findings"]] == [
        ("chat-42", "t2", "orphan_turn")
    ]
    assert report["findings"][0]["repair"]["kind"] == "abandon_turn"

    repaired = cli(
        "audit",
        "--json",
        "--repair",
        "--min-age",
        "0",
        "--conversation",
        "chat-42",
        "--db",
        str(db),
        home=tmp_path,
    )
    assert repaired.returncode == 0
    outcome = json.loads(repaired.stdout)["repairs"][0]["outcomes"][0]
    assert outcome["status"] == "applied"
    # The other conversation's orphan is still there.
    assert cli("audit", "--min-age", "0", "--db", str(db), home=tmp_path).returncode == 1


def test_min_age_leaves_fresh_turns_alone(db: Path, tmp_path: Path) -> None:
    result = cli("audit", "--min-age", "3600", "--db", str(db), home=tmp_path)
    assert result.returncode == 0
    assert "2 open turns skipped: younger than --min-age 3600s: may still be running" in (
        result.stdout
    )


def _dump(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


async def _open_a_turn(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        await NeotomaMemory(store, conversation_id="live").open_turn("still thinking", turn_id="l1")


def test_repair_by_default_leaves_a_turn_that_may_still_be_running(tmp_path: Path) -> None:
    # Issue 10 §9: with --min-age 0 the default, a turn open for milliseconds (its agent
    # still writing the reply) was written abandoned under it.
    db = tmp_path / "live.db"
    anyio.run(_open_a_turn, db)
    before = _dump(db)
    result = cli("audit", "--repair", "--db", str(db), home=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    minimum = DEFAULT_MIN_AGE
    assert minimum >= 2 * attrs.fields(NeotomaMemory).close_timeout.default
    assert (
        f"  info   1 open turn skipped: younger than --min-age {minimum:g}s: may still be "
        "running (audit again later, or pass --min-age 0 if no agent is running)\n"
    ) in result.stdout
    assert "repaired" not in result.stdout
    assert _dump(db) == before

    report = json.loads(cli("audit", "--repair", "--json", "--db", str(db), home=tmp_path).stdout)
    assert report["repairs"] == []
    assert report["skipped"] == {
        "count": 1,
        "min_age": minimum,
        "reason": f"younger than --min-age {minimum:g}s: may still be running",
        "turns": [{"conversation_id": "live", "turn_id": "l1"}],
    }
    assert _dump(db) == before

    now = cli("audit", "--repair", "--min-age", "0", "--db", str(db), home=tmp_path)
    assert now.returncode == 0, now.stdout + now.stderr
    assert "  repaired  live / l1: Recorded turn l1 as abandoned (orphan_found_by_audit)" in (
        now.stdout
    )
    assert "skipped" not in now.stdout
    assert _dump(db) != before


def test_audit_help_states_the_default_min_age_and_why(tmp_path: Path) -> None:
    out = cli("audit", "--help", home=tmp_path).stdout
    assert f"default {DEFAULT_MIN_AGE:g}" in " ".join(out.split())


def test_audit_mistakes_are_one_line_errors(db: Path, tmp_path: Path) -> None:
    missing = cli("audit", "--db", str(tmp_path / "nope.db"), home=tmp_path)
    assert missing.returncode != 0
    assert missing.stderr.startswith("neotoma-agent: error: no store at ")
    assert "Traceback" not in missing.stderr
    bad_since = cli("audit", "--since", "yesterday", "--db", str(db), home=tmp_path)
    assert bad_since.returncode != 0
    assert bad_since.stderr.startswith("neotoma-agent: error: since must be an ISO 8601")
    assert "Traceback" not in bad_since.stderr
