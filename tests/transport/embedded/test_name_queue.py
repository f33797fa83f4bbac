"""New bookkeeping-names documents queued and indexed a batch at a time (``_name_queue``).

What matters: a turn's names document waits in ``bookkeeping_names_queue`` and the index
gets no new segment until the queue is full, then all of them at once; every lookup of
any substring answers the same whether a document is queued or indexed (renames and
purges of queued and indexed documents included); a version-20 file
(``tests/data/v20_store``) upgrades with an empty queue and answers its lookups as before;
and every read and write answers as on the same file as the version before held it."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from file_workload_support import (
    Step,
    answers,
    compared,
    same_on_both,
    steps,
    turn_on_recorded,
    write_steps,
)
from hypothesis import given
from paths_support import TESTS
from turn_names_support import book_names, documents, searched
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_entities
from neotoma_agent.transport.embedded import _name_queue
from neotoma_agent.transport.embedded._connect import connect
from neotoma_agent.transport.embedded._name_queue import NAME_QUEUE, QUEUE_DOCUMENTS
from neotoma_agent.transport.embedded._schema import MIGRATIONS, SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the queue
BEFORE = MIGRATIONS.index(NAME_QUEUE)


def _queued(path: Path) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        return [int(r[0]) for r in conn.execute("SELECT id FROM bookkeeping_names_queue")]


def _indexed(path: Path) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        return [int(r[0]) for r in conn.execute("SELECT id FROM bookkeeping_names_docsize")]


def _segment_rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM bookkeeping_names_data").fetchone()[0])


def _unqueued(path: Path, to: Path) -> Path:
    """The file as the version before held it (every document in the index, no queue)."""
    return copy_at_version(path, to, BEFORE)


def _needles(path: Path) -> list[str]:
    """Every substring of one to four characters of every name (every third place), each
    whole name, needles across the ids' joins and across two names of one document."""
    texts = {t.lower() for _, name, aliases, _ in book_names(path) for t in (name, *aliases)}
    out = {"", "|t", ":assistant", "t1\nconv", "assistant\n", "é", "77:t"}
    for text in texts:
        out.add(text)
        out.update(text[i : i + k] for k in (1, 2, 3, 4) for i in range(0, len(text) - k + 1, 3))
    return sorted(out)


async def _turns(path: Path, conversation: str, turns: range) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id=conversation)
        for n in turns:
            async with memory.turn(f"about {n}", turn_id=f"t{n}") as t:
                t.reply = f"reply {n}"


async def test_a_turns_names_wait_in_the_queue_and_go_into_the_index_together(
    tmp_path: Path,
) -> None:
    """The conversation's document and each turn's wait in the queue while the index gets
    no new segment, and the document that fills the queue moves them all into the index;
    lookups answer the same before and after, and as on the file with every document in
    the index."""
    path = tmp_path / "store.db"
    await _turns(path, "Room-77", range(1))
    segments = _segment_rows(path)
    assert _indexed(path) == []
    await _turns(path, "Room-77", range(1, QUEUE_DOCUMENTS - 2))
    assert len(_queued(path)) == QUEUE_DOCUMENTS - 1  # its conversation's, and a turn's each
    assert _segment_rows(path) == segments
    assert sorted(documents(path)) == _queued(path)
    needles = _needles(path)
    assert searched(path, needles) == searched(_unqueued(path, tmp_path / "flat.db"), needles)
    await _turns(path, "Room-77", range(QUEUE_DOCUMENTS - 2, QUEUE_DOCUMENTS - 1))
    assert _queued(path) == []
    assert len(_indexed(path)) == QUEUE_DOCUMENTS
    assert _segment_rows(path) > segments
    assert searched(path, needles) == searched(_unqueued(path, tmp_path / "moved.db"), needles)


def test_a_transaction_of_many_turns_writes_one_segment_of_the_search_index(
    tmp_path: Path,
) -> None:
    """Queued documents moved into the index inside a transaction that also writes the
    search index (an import, callers' stores committed together) leave its words pending:
    the transaction writes one segment of it, as it did with no queue."""
    conn = connect(str(tmp_path / "store.db"), "NORMAL")()
    try:
        conn.execute("BEGIN IMMEDIATE")
        for n in range(1, 3 * QUEUE_DOCUMENTS + 2):
            conn.execute("INSERT INTO search_text (rowid, text) VALUES (?, ?)", (n, f"word {n}"))
            _name_queue.put(conn, n, f"conversation:c{n}\n\n")
        conn.execute("COMMIT")
        assert _queued_on(conn) == [3 * QUEUE_DOCUMENTS + 1]
        segments = conn.execute("SELECT count(DISTINCT segid) FROM search_text_idx").fetchone()
        assert segments == (1,)
    finally:
        conn.close()


def _queued_on(conn: sqlite3.Connection) -> list[int]:
    return [int(r[0]) for r in conn.execute("SELECT id FROM bookkeeping_names_queue")]


async def test_lookups_answer_alike_with_documents_queued_and_indexed_through_renames_and_purges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documents in both places (a queue of 5), a conversation and two turn records renamed
    (documents queued and indexed), then messages, a turn record and a conversation
    purged: every lookup answers as on the same file with every document in the index, and
    as a scan of the names would."""
    monkeypatch.setattr(_name_queue, "QUEUE_DOCUMENTS", 5)
    path = tmp_path / "store.db"
    await _turns(path, "Room-77", range(7))
    await _turns(path, "r|x:y", range(2))
    assert _queued(path)
    assert _indexed(path)
    async with EmbeddedStore.open(path) as store:
        names = {e[1]: e[0] for e in book_names(path)}
        for name, fields in (
            ("conversation:r|x:y", {"conversation_id": "moved-c"}),
            ("conversation_turn:Room-77|t1", {"session_id": "moved", "turn_id": "y"}),
            ("conversation_turn:r|x:y|t1", {"session_id": "moved", "turn_id": "z"}),
        ):
            etype = name.split(":", 1)[0]
            body = {"entity_type": etype, "target_id": names[name], **fields}
            await store.store([body], idempotency_key=f"rename-{name}")
    queued = set(_queued(path))
    with closing(sqlite3.connect(path)) as conn:
        rowid = dict(conn.execute("SELECT canonical_name, rowid FROM entities").fetchall())
    assert rowid["conversation:moved-c"] in queued  # (its new document: queued)
    assert rowid["conversation:moved-c"] not in _indexed(path)
    needles = _needles(path)
    assert searched(path, needles) == searched(_unqueued(path, tmp_path / "a.db"), needles)
    names = {e[1]: e[0] for e in book_names(path)}
    gone = [names["conversation_message:Room-77:t2"], names["conversation_turn:Room-77|t5"]]
    gone += [i for n, i in names.items() if "x:y" in n or "moved-c" in n]
    purge_entities(path, gone)
    assert _queued(path) == []  # a purge builds the index again, from the rows
    needles = _needles(path)
    assert searched(path, needles) == searched(_unqueued(path, tmp_path / "b.db"), needles)


async def test_a_version_20_file_upgrades_with_an_empty_queue_and_answers_as_before(
    tmp_path: Path,
) -> None:
    """The file the release before wrote: its documents stay in the index, the queue is
    empty, every lookup answers as before the upgrade, and a turn on it queues its
    document."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v20_store" / "store.db", path)
    old = tmp_path / "old.db"
    shutil.copyfile(path, old)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] <= BEFORE
    indexed = _indexed(path)
    needles = _needles(path)
    before = searched(old, needles)
    async with EmbeddedStore.open(path):
        pass
    assert _queued(path) == []
    assert _indexed(path) == indexed
    assert searched(path, needles) == before
    await turn_on_recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        name = "conversation_turn:chat-v2|v2-turn-3"
        sql = "SELECT rowid FROM entities WHERE canonical_name = ?"
        (turn,) = conn.execute(sql, (name,)).fetchone()
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert _queued(path) == [turn]
    assert _indexed(path) == indexed


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user, and every
    lookup of a substring of a bookkeeping name, answers the same on the file (documents
    queued) and on its copy as the version before held it (every document in the index),
    upgraded; then the same writes on both write the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("queue")
    path = tmp / "queued.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    old = _unqueued(path, tmp / "before.db")
    assert _queued(path)

    async def lookups(at: Path) -> dict[str, object]:
        return {"names": searched(at, _needles(at)), "reads": await answers(at)}

    await same_on_both(path, old, after, reads=lookups)
