"""The upgrades that read every entity row read them a batch at a time, and end the same.

Version 4's shared fields (which rewrites the rows it reads), version 5's conversation
summaries and version 8's search index each build from every entity row by a keyset scan
(``_scan.keyset_rows``). With batches of two rows (the recorded files' dozen or two
entity rows fill many), an upgraded file holds exactly what it holds when one batch reads
them all: every table's every row.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from paths_support import TESTS

from neotoma_agent.transport.embedded import EmbeddedStore, _scan

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def _rows_of_every_table(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file (an FTS index by its own tables' rows)."""
    with sqlite3.connect(path) as conn:
        tables = [
            name
            for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
            )
            if not sql.startswith("CREATE VIRTUAL TABLE")
        ]
        return {t: sorted(conn.execute(f'SELECT * FROM "{t}"'), key=repr) for t in tables}


async def _upgrade(path: Path) -> None:
    async with EmbeddedStore.open(path):
        pass


@pytest.mark.parametrize("fixture", ["v3_store", "v4_store", "v7_store"])
async def test_an_upgrade_read_in_small_batches_ends_as_one_read_whole(
    fixture: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = TESTS / "data" / fixture / "store.db"
    whole, batched = tmp_path / "whole.db", tmp_path / "batched.db"
    shutil.copyfile(source, whole)
    shutil.copyfile(source, batched)
    with sqlite3.connect(source) as conn:
        assert conn.execute("SELECT count(*) FROM entities").fetchone()[0] > 8
    await _upgrade(whole)
    monkeypatch.setattr(_scan, "BATCH", 2)
    await _upgrade(batched)
    assert _rows_of_every_table(batched) == _rows_of_every_table(whole)
    with sqlite3.connect(batched) as conn:
        # the summaries and the search index were built (not left empty)
        assert conn.execute("SELECT count(*) FROM conversation_summaries").fetchone()[0] > 0
        assert conn.execute("SELECT count(*) FROM search_text_docsize").fetchone()[0] > 0


def test_a_keyset_scan_gives_every_row_once_while_the_caller_writes_to_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_scan, "BATCH", 3)
    with sqlite3.connect(tmp_path / "scan.db") as conn:
        conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(f"k{i:02d}", i) for i in range(10)])
        seen = []
        for key, n in _scan.keyset_rows(
            conn, "SELECT k, n FROM t WHERE k > ? ORDER BY k LIMIT ?", ""
        ):
            seen.append(key)
            conn.execute("UPDATE t SET n = ? WHERE k = ?", (n * 10, key))
        assert seen == [f"k{i:02d}" for i in range(10)]
        assert [n for (n,) in conn.execute("SELECT n FROM t ORDER BY k")] == [
            i * 10 for i in range(10)
        ]
        assert (
            list(_scan.keyset_rows(conn, "SELECT k FROM t WHERE k > ? ORDER BY k LIMIT ?", "z"))
            == []
        )
