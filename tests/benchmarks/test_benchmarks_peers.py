"""The peers benchmark runs every peer in every row, and counts what a turn writes.

Run as its own process at its smallest sizes (``pytest -m bench``, ``nox -s bench_smoke``,
which installs the ``bench`` extra: the Agents SDK and LangGraph's SQLite checkpointer).
Timings are never asserted: only what was measured and counted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths_support import ROOT

pytestmark = pytest.mark.bench

BENCHMARK = ROOT / "benchmarks" / "peers.py"
_MISSING = "the bench extra is not installed (pip install -e '.[bench]'; LangGraph needs 3.11+)"


def _peers(tmp_path: Path, *args: str) -> dict[str, Any]:
    pytest.importorskip("agents", reason=_MISSING)
    pytest.importorskip("langgraph.checkpoint.sqlite.aio", reason=_MISSING)
    out = tmp_path / "peers.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_peers_measures_every_peer_in_every_row_against_the_sdk(tmp_path: Path) -> None:
    report = _peers(
        tmp_path,
        *("--turns", "32", "--lengths", "40", "--growth-turns", "4"),
        *("--langgraph-growth-turns", "2", "--rounds", "1"),
    )
    cells = {(e["row"], e["peer"]): e for e in report["rows"]}
    rows = ["1 caller", "16 callers", "length 40"]
    expected = {(r, p) for r in rows for p in ("floor", "sdk", "langgraph", "ours")}
    expected |= {(r, "scoped") for r in rows[:2]}  # a user's view: on fresh files
    assert set(cells) == expected
    for row in rows[:2]:
        assert cells[(row, "scoped")]["cpu_vs_ours"] > 0
    for (row, peer), e in cells.items():
        assert e["cpu_ms_per_turn"] > 0
        # A fresh file grows by every turn; a long one may take a few turns in its last pages.
        assert e["bytes_per_turn"] > 0 if row != "length 40" else e["bytes_per_turn"] >= 0
        if peer == "sdk":
            assert e["cpu_vs_sdk"] == e["bytes_vs_sdk"] == 1
    # LangGraph's checkpoint holds the whole conversation: a turn on a longer one writes more.
    assert (
        cells[("length 40", "langgraph")]["bytes_per_turn"]
        > cells[("1 caller", "langgraph")]["bytes_per_turn"]
    )
    assert report["rounds"] == 1
    assert len(report["load_average"]) == 3


def test_peers_profile_counts_the_statements_rows_and_pages_of_our_turn(
    tmp_path: Path,
) -> None:
    report = _peers(tmp_path, "--profile", "--profile-top", "5")
    # At least a transaction's BEGIN and COMMIT, and the two messages' rows.
    assert report["sql_statements_per_turn"] >= 2
    assert report["rows_by_table"]["conversation_messages"] == 2
    assert report["rows_written_per_turn"] >= 2
    assert report["wal_pages_per_turn"] >= 1
    # Every WAL page is charged to a B-tree: the entity rows, and the WAL's pages in all.
    by_btree = report["wal_pages_by_btree"]
    assert by_btree["entities"] >= 1
    assert sum(by_btree.values()) == pytest.approx(report["wal_pages_per_turn"])
    # The CPU split adds up: the two threads make the process.
    split = report["split_event_loop_thread_ms_per_turn"] + report["split_store_thread_ms_per_turn"]
    assert split == pytest.approx(report["split_cpu_ms_per_turn"])
    assert 0 < report["split_sqlite_execute_ms_per_turn"] < report["split_store_thread_ms_per_turn"]
    assert "_write.py" in report["cprofile_db_thread"]


def test_peers_runs_another_trees_turn_beside_ours(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "neotoma_agent", tree / "neotoma_agent")
    report = _peers(
        tmp_path,
        *("--peers", "sdk", "ours", "--baseline", str(tree), "--turns", "16"),
        *("--lengths", "--rounds", "1"),
    )
    cells = {(e["row"], e["peer"]): e for e in report["rows"]}
    rows = ("1 caller", "16 callers")
    assert set(cells) == {(r, p) for r in rows for p in ("sdk", "ours", "baseline")}
    for row in rows:
        ours, baseline = cells[(row, "ours")], cells[(row, "baseline")]
        # Each ran its own tree's package...
        assert Path(ours["package"]) == ROOT.resolve()
        assert Path(baseline["package"]) == tree.resolve()
        # ...the same code: the same turns write the same rows.
        assert baseline["bytes_per_turn"] == pytest.approx(ours["bytes_per_turn"], rel=0.1)
