"""The leaf size of the full-text indexes every turn writes (FTS5's ``pgsz``).

What matters: a new file, an existing one (an older release's, or one whose setting is
FTS5's default) and a file a migration upgrades all get ``TURN_INDEX_LEAF_BYTES`` when
opened for writing, by the store and by a hook's connection alike; the leaves written from
then on are no larger; what is stored and found is the same; a read-only open writes
nothing.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.transport.embedded._connect import TURN_INDEX_LEAF_BYTES, connect

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

INDEXES = ("search_text", "bookkeeping_names")
#: FTS5's own default leaf size
FTS5_DEFAULT = 4050


def _leaf_sizes(path: Path) -> dict[str, int | None]:
    with sqlite3.connect(path) as conn:
        found = {
            table: conn.execute(f"SELECT v FROM {table}_config WHERE k = 'pgsz'").fetchone()
            for table in INDEXES
        }
    conn.close()
    return {table: None if row is None else int(row[0]) for table, row in found.items()}


def _reset(path: Path) -> None:
    """The setting as a file without it holds it: FTS5's default on one index, no row at
    all on the other."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO search_text (search_text, rank) VALUES ('pgsz', ?)", (FTS5_DEFAULT,)
        )
        conn.execute("DELETE FROM bookkeeping_names_config WHERE k = 'pgsz'")
    conn.close()
    assert _leaf_sizes(path) == {"search_text": FTS5_DEFAULT, "bookkeeping_names": None}


def _rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT * FROM entities ORDER BY id").fetchall()
        rows += conn.execute("SELECT * FROM search_text_docsize ORDER BY id").fetchall()
    conn.close()
    return rows


async def _turns(path: Path, n: int, text: str = "the lisbon door code is 4471") -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="leaf-conv")
        for i in range(n):
            async with memory.turn(f"{text} ({i})", turn_id=f"t{i}") as t:
                t.reply = f"noted, turn {i}"


async def _hits(path: Path, query: str) -> list[str]:
    async with EmbeddedStore.open(path) as store:
        result = await NeotomaMemory(store, conversation_id="leaf-conv").search(query)
    return sorted(h.text for h in result.hits)


async def test_a_new_file_gets_the_leaf_size(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path):
        pass
    assert _leaf_sizes(path) == dict.fromkeys(INDEXES, TURN_INDEX_LEAF_BYTES)


@pytest.mark.parametrize("opener", ["store", "hook"])
async def test_an_existing_file_gets_it_on_its_next_open_and_keeps_its_rows(
    tmp_path: Path, opener: str
) -> None:
    path = tmp_path / "store.db"
    await _turns(path, 3)
    _reset(path)
    rows, hits = _rows(path), await _hits(path, "lisbon")
    _reset(path)  # the search above opened it again

    if opener == "store":
        async with EmbeddedStore.open(path):
            pass
    else:  # a hook process opens the file through the same connect
        connect(str(path), "NORMAL")().close()

    assert _leaf_sizes(path) == dict.fromkeys(INDEXES, TURN_INDEX_LEAF_BYTES)
    assert _rows(path) == rows
    assert await _hits(path, "lisbon") == hits
    assert len(hits) == 3


@pytest.mark.parametrize("fixture", ["v1_store", "v8_store"])
async def test_an_older_release_file_gets_it_with_its_upgrade(tmp_path: Path, fixture: str) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / fixture / "store.db", path)
    async with EmbeddedStore.open(path):
        pass
    assert _leaf_sizes(path) == dict.fromkeys(INDEXES, TURN_INDEX_LEAF_BYTES)


async def test_a_read_only_open_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await _turns(path, 1)
    _reset(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    async with EmbeddedStore.open(path, read_only=True) as store:
        assert len((await store.search("lisbon")).hits) == 1

    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert _leaf_sizes(path) == {"search_text": FTS5_DEFAULT, "bookkeeping_names": None}


async def test_the_leaves_written_are_no_larger_than_the_setting(tmp_path: Path) -> None:
    # One message of many distinct words: a segment of many leaves, each filled up to the
    # index's leaf size (FTS5's default would make them about 4,050 bytes).
    path = tmp_path / "store.db"
    words = " ".join(f"w{i:05d}x" for i in range(3000))
    await _turns(path, 1, text=words)
    with sqlite3.connect(path) as conn:
        # Rows 1 and 10 are the index's averages and structure records; the rest, leaves.
        leaves = [
            n for (n,) in conn.execute("SELECT length(block) FROM search_text_data WHERE id > 10")
        ]
    conn.close()
    assert len(leaves) > 5
    assert max(leaves) <= TURN_INDEX_LEAF_BYTES
    assert await _hits(path, "w01234x") == [f"{words} (0)"]
