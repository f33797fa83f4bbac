"""Crash recovery, for real: SIGKILL a process mid-conversation, then audit the file it left.

``tests/crash_child.py`` runs six scripted turns against an embedded store file and kills
itself with SIGKILL at one exact point: before, inside (writes done, commit not) or after
a store, or in a turn's body. For each of 20 points (nine in the default run, every one
with ``-m slow``) the file must then hold exactly the orphan that point implies (a turn
whose user store committed and whose closing store did not) and nothing else wrong;
``audit(repair=True)`` closes it; a second audit is clean; and SQLite's
``PRAGMA integrity_check`` says ``ok``.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from paths_support import TESTS

from neotoma_agent.qa import AUDIT_REPAIR_REASON, AuditReport, FindingKind, audit
from neotoma_agent.transport.embedded import EmbeddedStore

sys.path.insert(0, str(TESTS))
from crash_child import CONVERSATION, STORES

CHILD = TESTS / "crash_child.py"

# (kill point, the orphan it must leave). 20 points: before / during / after stores of
# every phase (user, closing, abandoned, recorded), and in turn bodies.
POINTS: list[tuple[str, str | None]] = [
    ("before:1", None),
    ("during:1", None),
    ("after:1", "t1"),
    ("body:1", "t1"),
    ("before:2", "t1"),
    ("during:2", "t1"),
    ("after:2", None),
    ("after:3", "t2"),
    ("body:2", "t2"),
    ("during:4", "t2"),
    ("after:4", None),
    ("during:5", None),
    ("body:3", "t3"),
    ("during:6", "t3"),
    ("after:6", None),
    ("before:8", "t4"),
    ("after:8", None),
    ("during:9", None),
    ("body:6", "t6"),
    ("during:11", "t6"),
]


def _committed(point: str) -> int:
    """How many stores are durable when the child dies at ``point``."""
    mode, _, n = point.partition(":")
    if mode == "body":
        # tN's body runs right after tN's user store.
        return next(i for i, (turn, phase) in STORES.items() if turn == f"t{n}")
    return int(n) if mode == "after" else int(n) - 1


def _expected(point: str) -> tuple[set[str], set[str]]:
    """The turns stored (user message durable) and the ones closed as abandoned."""
    durable = [STORES[i] for i in range(1, _committed(point) + 1)]
    turns = {turn for turn, phase in durable if phase in ("user", "recorded")}
    abandoned = {turn for turn, phase in durable if phase == "closing" and turn in ("t3", "t4")}
    return turns, abandoned


def _run_child(db: Path, point: str, backend: str) -> None:
    done = subprocess.run(
        [sys.executable, str(CHILD), str(db), point, backend],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    expected = 0 if point == "none" else -signal.SIGKILL
    assert done.returncode == expected, (done.returncode, done.stdout, done.stderr)
    # The child says where it died: the kill point must be the one asked for.
    where = {
        "before": "killing at before store",
        "during": "killing at inside a store, before its commit",
        "after": "killing at after store",
        "body": "killing at in the body of turn",
        "none": "finished",
    }[point.partition(":")[0]]
    assert where in done.stdout, done.stdout


async def _audit_file(db: Path, **kwargs: object) -> AuditReport:
    async with EmbeddedStore.open(db) as store:
        # The crashed child wrote these turns a moment ago: audit them all, however young.
        kwargs.setdefault("min_age", 0)
        return await audit(store, **kwargs)  # type: ignore[arg-type]


def _integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def _derived_orphan(point: str) -> str | None:
    """The orphan the store table implies: a user store durable, its closing store not."""
    durable = [STORES[i] for i in range(1, _committed(point) + 1)]
    left = {t for t, ph in durable if ph == "user"} - {t for t, ph in durable if ph == "closing"}
    assert len(left) <= 1
    return left.pop() if left else None


def test_twenty_distinct_kill_points() -> None:
    assert len({p for p, _ in POINTS}) == 20
    assert {p for p, _ in POINTS} > DEFAULT_POINTS
    assert {p.partition(":")[0] for p, _ in POINTS} == {"before", "during", "after", "body"}
    assert all(_derived_orphan(point) == orphan for point, orphan in POINTS)


#: the kill points the default run takes (a fresh process each): every mode around a
#: turn's user and closing stores, with an orphan left and without, an abandoned turn's
#: closing store (6) and a recorded turn's one store (9); the rest run with ``-m slow``
DEFAULT_POINTS = {
    *("before:1", "during:1", "after:1", "body:1"),
    *("before:2", "during:2", "after:2"),
    *("during:6", "during:9"),
}


@pytest.mark.parametrize(
    ("point", "orphan"),
    [
        pytest.param(*case, id=case[0], marks=() if case[0] in DEFAULT_POINTS else pytest.mark.slow)
        for case in POINTS
    ],
)
def test_kill_leaves_exactly_one_repairable_orphan(
    tmp_path: Path, point: str, orphan: str | None
) -> None:
    db = tmp_path / "memory.db"
    index = [p for p, _ in POINTS].index(point)
    child_backend, audit_backend = ("trio", "asyncio") if index % 2 else ("asyncio", "trio")
    _run_child(db, point, child_backend)
    turns, abandoned = _expected(point)

    found = anyio.run(_audit_file, db, backend=audit_backend)
    assert found.turns == len(turns)
    assert [(f.kind, f.turn_id) for f in found.problems] == (
        [(FindingKind.ORPHAN_TURN, orphan)] if orphan else []
    )
    assert {f.turn_id for f in found.abandoned} == abandoned
    if orphan:
        (finding,) = found.problems
        assert finding.conversation_id == CONVERSATION
        assert finding.record_status == "open"
        assert finding.user_message_id
        assert finding.turn_record_id
        assert finding.assistant_message_id is None

    repaired = anyio.run(lambda: _audit_file(db, repair=True), backend=audit_backend)
    assert repaired.clean
    assert [r.turn_id for r in repaired.repairs] == ([orphan] if orphan else [])

    after = anyio.run(_audit_file, db, backend=child_backend)
    assert after.clean
    assert not after.problems
    assert {f.turn_id for f in after.abandoned} == abandoned | ({orphan} if orphan else set())
    assert {f.turn_id for f in after.abandoned if f.repaired} == ({orphan} if orphan else set())
    assert all(f.reason == AUDIT_REPAIR_REASON for f in after.abandoned if f.repaired)
    assert _integrity(db) == "ok"


def test_uninterrupted_child_leaves_a_clean_store(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _run_child(db, "none", "asyncio")
    report = anyio.run(_audit_file, db)
    assert report.clean
    assert not report.problems
    assert report.turns == 6
    assert {f.turn_id for f in report.abandoned} == {"t3", "t4"}
    assert _integrity(db) == "ok"
