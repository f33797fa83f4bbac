"""Two processes creating the same entities at once leave one row an id: the writer's own
check keeps an entity's id unique, with or without the entity table's unique index.

A store's write runs in one ``BEGIN IMMEDIATE`` transaction on its connection: it reads
the rows of the ids it writes (``load_rows``), and inserts a row only for an id it did not
find. SQLite lets one writer in at a time, and a writer reads the file as the writer
before it left it, so the second process finds the row the first created and merges into
it, as one process's second store does. The entity table has no unique index on the id
(``_id_prefix``: its index holds the id's first 4 bytes, not unique), so that check is all
that keeps an id's row one (docs/performance.md, "The compact format, designed", step 9);
the same race on the table keyed by its id, as the versions before held it, leaves the
same rows.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from contextlib import closing
from multiprocessing.synchronize import Barrier
from pathlib import Path

import anyio
import pytest
from id_prefix_support import keyed

from neotoma_agent import EmbeddedStore
from neotoma_agent.transport.embedded._rows import encode_entity

#: entities each process creates, one store each, in the same order as the other
_PEOPLE = 25


def _person(n: int, writer: int) -> dict[str, object]:
    # The same name (so the same id) in both processes; a field of its own in each, so
    # each writer's observation is a new one on the entity.
    return {"entity_type": "person", "name": f"Ada {n}", f"seen_by_{writer}": True}


def _writer(
    path: str,
    writer: int,
    start: Barrier,
    out: multiprocessing.Queue[tuple[int, list[tuple[str, str]]]],  # its (id, action)s
) -> None:
    async def run() -> list[tuple[str, str]]:
        actions = []
        async with EmbeddedStore.open(path) as store:
            start.wait()
            for n in range(_PEOPLE):
                result = await store.store(
                    entities=[_person(n, writer)], idempotency_key=f"w{writer}-{n}"
                )
                entity = result.entities[0]
                actions.append((entity.entity_id, str(entity.action)))
        return actions

    try:
        out.put((writer, anyio.run(run)))
    except Exception as error:  # the parent's assertion shows it
        out.put((writer, [("", type(error).__name__)]))


def _race(path: Path) -> dict[int, list[tuple[str, str]]]:
    """Two processes' stores of the same people at once: each one's (id, action)s."""
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(2)
    out = spawn.Queue()
    writers = [spawn.Process(target=_writer, args=(str(path), w, start, out)) for w in (1, 2)]
    for p in writers:
        p.start()
    answers = dict(out.get(timeout=120) for _ in writers)
    for p in writers:
        p.join(timeout=30)
        assert p.exitcode == 0
    return answers


def _key_the_ids(path: Path) -> None:
    """The entity table rebuilt with its ``PRIMARY KEY`` on the id again, as the versions
    before ``_id_prefix`` held it (rowids and other indexes kept; the prefix's index
    dropped): SQLite's unique index refuses a second row of an id, the writer or not."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        keyed(conn)
        conn.execute("COMMIT")
        assert conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_autoindex_entities_1'"
        ).fetchone()


@pytest.mark.parametrize("unique_index", [False, True], ids=["writer_only", "unique_index"])
def test_two_processes_creating_the_same_entities_leave_one_row_an_id(
    tmp_path: Path, unique_index: bool
) -> None:
    path = tmp_path / "memory.db"

    async def create_file() -> None:
        async with EmbeddedStore.open(path) as store:
            await store.store(
                entities=[{"entity_type": "person", "name": "Grace"}], idempotency_key="grace"
            )

    anyio.run(create_file)
    if unique_index:
        _key_the_ids(path)

    answers = _race(path)

    for actions in answers.values():
        assert all(eid for eid, _ in actions), actions  # a writer failed: its error's name
    ids = [eid for eid, _ in answers[1]]
    assert ids == [eid for eid, _ in answers[2]]  # the same id for the same name
    for first, second in zip(answers[1], answers[2], strict=True):
        # One process created each entity; the other found it and merged into it.
        assert sorted([first[1], second[1]]) == ["created", "matched_existing"]
    with sqlite3.connect(path) as conn:
        for eid in ids:
            rows = conn.execute(
                "SELECT observation_count FROM entities WHERE +id = ?", (encode_entity(eid),)
            ).fetchall()
            assert rows == [(2,)]  # one row, both observations folded into it
        assert conn.execute("SELECT count(*) FROM entities").fetchone()[0] == _PEOPLE + 1
