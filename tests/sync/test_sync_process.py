"""A real process using the sync API: Ctrl-C (SIGINT) mid-turn, exit with a store or a turn
left open. What it stored is read back from the file afterwards."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import default_sigint
from turn_support import turn_record

from neotoma_agent.qa import FindingKind, audit
from neotoma_agent.sync import SyncMemory, SyncStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

CHILD = Path(__file__).resolve().parent / "sync_child.py"


SCENARIOS = ("body", "closing", "unclosed", "exit")


@pytest.fixture(scope="module")
def children(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, tuple[Path, subprocess.Popen[str]]]]:
    """One child per scenario, all started at once (a child's imports take most of its
    time), each with its own store file."""
    started = {}
    for scenario in SCENARIOS:
        db = tmp_path_factory.mktemp(scenario) / "m.db"
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(db), scenario],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,  # as a terminal's Ctrl-C would find it
        )
        started[scenario] = (db, proc)
    yield started
    for _, proc in started.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def wait_for(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdout is not None
    got = proc.stdout.readline().strip()
    if got != line:
        proc.kill()
        raise AssertionError(f"expected {line!r}, got {got!r}: {proc.communicate()[1]}")


def stored(db: Path) -> tuple[dict[str, Any], list[Any]]:
    with SyncStore.open(db) as store:
        record = store.call(turn_record, store.transport, "child", "t1")
        return record, list(SyncMemory(store, conversation_id="child").history())


Children = dict[str, tuple[Path, "subprocess.Popen[str]"]]


def test_ctrl_c_in_the_body_stores_the_partial_reply_and_the_process_dies_of_sigint(
    children: Children,
) -> None:
    db, proc = children["body"]
    wait_for(proc, "in-body")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGINT, err  # KeyboardInterrupt propagated out
    assert "KeyboardInterrupt" in err
    assert "finished" not in out
    record, (turn,) = stored(db)
    assert record["status"] == "abandoned"
    assert (turn.status, turn.user, turn.reply) == ("abandoned", "hello", "Half a reply")


def test_ctrl_c_twice_during_the_closing_store_lets_it_finish_then_interrupts(
    children: Children,
) -> None:
    db, proc = children["closing"]
    wait_for(proc, "ready")
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    wait_for(proc, "closing")
    wait_for(proc, "closing-store")  # it waits for our line; the main thread waits for it
    for _ in range(2):  # two presses, the second once the first reached the child
        proc.send_signal(signal.SIGINT)
        wait_for(proc, "sigint")
    proc.stdin.write("store it\n")  # the closing store goes on
    proc.stdin.flush()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGINT, err
    assert "finished" not in out
    record, (turn,) = stored(db)
    assert record["status"] == "completed"
    assert turn.reply == "The whole reply."


def test_a_store_left_open_is_closed_at_exit_with_a_warning(children: Children) -> None:
    db, proc = children["unclosed"]
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == "done\n"
    (line,) = err.strip().splitlines()
    assert line.startswith("WARNING neotoma_agent.sync sync.store_left_open")
    assert "closing it at interpreter exit" in line
    record, (turn,) = stored(db)
    assert record["status"] == "completed"
    assert turn.reply == "Goodbye."


def test_a_process_that_exits_mid_turn_leaves_the_orphan_audit_finds(
    children: Children,
) -> None:
    db, proc = children["exit"]
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == "exiting\n"
    with SyncStore.open(db) as store:
        report = store.call(audit, store.transport, min_age=0)
    (finding,) = [f for f in report.findings if f.turn_id == "t1"]
    assert finding.kind is FindingKind.ORPHAN_TURN
