"""The embedded store's full-text index (schema 6): kept with the rows, or not at all.

What matters: after any sequence of stores (turns, a revised reply, entities whose fields
change, a correction, forget, restore) the index holds exactly one row per live message
and searchable entity, with its current text, and nothing else; a store killed before its
commit leaves neither rows nor index entries; a file of an older schema gets the index its
rows give; a purge leaves no byte of a forgotten conversation's words in the file.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, NeotomaMemory, SearchHitKind, purge_forgotten
from neotoma_agent._recall.search_text import doc_text
from neotoma_agent.transport.embedded._rows import decode_doc_fields, entity_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

DATA = TESTS / "data"


#: what the index holds of a row: its distinct words (schema 29: no positions,
#: ``_search_detail``) and its length in words
Words = tuple[tuple[str, ...], int]


def _instances(conn: sqlite3.Connection, table: str) -> dict[int, Words]:
    """Every row's words in an FTS5 table, by rowid (its ``instance`` vocabulary), and its
    length (its size record: one varint, under 128 words in one byte)."""
    conn.execute(f"CREATE VIRTUAL TABLE temp.v_{table} USING fts5vocab(main, {table}, instance)")
    rows: dict[int, set[str]] = {}
    for term, doc in conn.execute(f"SELECT term, doc FROM v_{table}"):
        rows.setdefault(int(doc), set()).add(str(term))
    sizes = {int(i): bytes(sz) for i, sz in conn.execute(f"SELECT id, sz FROM {table}_docsize")}
    assert all(len(sz) == 1 for sz in sizes.values())  # (the texts here: short)
    return {doc: (tuple(sorted(rows.get(doc, ()))), sz[0]) for doc, sz in sizes.items()}


def _words(text: str) -> Words:
    """The words the index gives ``text`` (its own tokenizer, on a table of its own)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE t USING fts5 "
            "(text, detail = none, tokenize = 'unicode61 remove_diacritics 2')"
        )
        conn.execute("INSERT INTO t (rowid, text) VALUES (1, ?)", (text,))
        return _instances(conn, "t").get(1, ((), 0))
    finally:
        conn.close()


def _indexed(path: Path) -> dict[str, Words]:
    """The index's rows (their words), by entity id: every row's rowid an entity row's
    (schema 15: no table between them), one row each (the index keeps no texts: a row is
    its words)."""
    with sqlite3.connect(path) as conn:
        rows = _instances(conn, "search_text")
        sized = [r[0] for r in conn.execute("SELECT id FROM search_text_docsize ORDER BY id")]
        entities = dict(conn.execute(f"SELECT rowid, {entity_text('id')} FROM entities"))
    assert set(rows) <= set(sized), "a row with words the index does not count"
    assert set(sized) <= set(entities), "a row no entity's"
    return {entities[rowid]: rows.get(rowid, ((), 0)) for rowid in sized}


def _expected(path: Path) -> dict[str, Words]:
    """What the index must hold: each live entity's text, from its row."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            f"SELECT {entity_text('id')}, entity_type, snapshot, canonical_name FROM entities"
        ).fetchall()
    expected = {}
    for entity_id, entity_type, doc, name in rows:
        fields, deleted = decode_doc_fields(doc, name)
        text = None if deleted else doc_text(entity_type, fields)
        if text is not None:
            expected[entity_id] = _words(text)
    return expected


async def test_the_index_follows_every_store(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        deal = NeotomaMemory(store, conversation_id="deal")
        acme = await deal.remember("company", name="Acme Corp", website="acme.test")
        async with deal.turn("What about Acme Corp?", turn_id="t1") as t:
            t.reply = "First answer."
        async with deal.turn("What about Acme Corp?", turn_id="t1", revision=2) as t:
            t.reply = "Second answer."
        await deal.remember("company", name="Acme Corp", website="acme.example", notes="renewal")
        await store.correct(acme, "company", "notes", "churned", idempotency_key="fix-1")
        await deal.remember("task", title="OPS-412: Rotate TLS certificates")
        other = NeotomaMemory(store, conversation_id="other")
        async with other.turn("Something to forget", turn_id="t1") as t:
            t.reply = "Forgettable."
        forgotten = await other.forget()
        assert _indexed(path) == _expected(path)
        assert _words("Forgettable.") not in _indexed(path).values()
        await other.restore(forgotten)
    indexed = _indexed(path)
    assert indexed == _expected(path)
    assert indexed[acme] == _words("Acme Corp\nacme.example\nchurned")
    assert _words("Second answer.") in indexed.values()
    assert _words("First answer.") not in indexed.values()
    assert _words("Forgettable.") in indexed.values()
    # The conversation, turn records and tool calls are the protocol's own: not searched.
    assert len(indexed) == 2 + 2 + 2  # two entities, a revised turn's two messages, two restored


def _kill_child(db: Path, point: str) -> None:
    done = subprocess.run(
        [sys.executable, str(TESTS / "crash_child.py"), str(db), point, "asyncio"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr)


@pytest.mark.parametrize(("point", "replies"), [("during:2", 0), ("after:2", 1)])
async def test_a_store_killed_before_its_commit_leaves_no_index_entry(
    tmp_path: Path, point: str, replies: int
) -> None:
    db = tmp_path / "memory.db"
    _kill_child(db, point)  # the child dies inside (or right after) turn t1's closing store

    assert _indexed(db) == _expected(db)
    async with EmbeddedStore.open(db) as store:
        memory = NeotomaMemory(store, conversation_id="crash-conv")
        assert len((await memory.search("lisbon")).hits) == 1  # the user store committed
        assert len((await memory.search('"when do you want to go"')).hits) == replies


@pytest.mark.parametrize(
    "fixture", ["v1_store", "v2_store", "v3_store", "v4_store", "v5_store", "v6_store", "v7_store"]
)
async def test_an_older_file_gets_the_index_its_rows_give(tmp_path: Path, fixture: str) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / fixture / "store.db", path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION

    async with EmbeddedStore.open(path) as store:
        result = await store.search("sprocket")
        memory = NeotomaMemory(store, conversation_id="chat-v2")
        scoped = await memory.search("sprocket", conversation_id="chat-v2")

    assert _indexed(path) == _expected(path)
    kinds = [h.kind for h in result.hits]
    assert SearchHitKind.ENTITY in kinds  # the widget named Sprocket
    if fixture != "v1_store":  # the first release's file has no turns; the others two
        [message] = scoped.hits
        assert (message.conversation_id, message.turn_id, message.role) == (
            "chat-v2",
            "v2-turn-2",
            "user",
        )
        assert message.text == "And Sprocket?"


async def test_a_purge_leaves_no_word_of_the_conversation(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    marker = "zqxwvmarker"  # one word, as the index stores its words
    async with EmbeddedStore.open(path) as store:
        gone = NeotomaMemory(store, conversation_id="gone")
        for n in range(5):
            async with gone.turn(f"Remember {marker}{n} for me", turn_id=f"t{n}") as t:
                t.reply = f"Noted {marker}{n}."
        kept = NeotomaMemory(store, conversation_id="kept")
        async with kept.turn("Keep this one", turn_id="t1") as t:
            t.reply = "Kept."
        forgotten = await gone.forget()

    def holds(needle: bytes) -> bool:
        return any(needle in p.read_bytes() for p in path.parent.glob(path.name + "*"))

    assert holds(marker.encode())  # a soft deletion keeps the bytes (index segments too)
    purge_forgotten(path, forgotten)
    assert not holds(marker.encode())
    assert _indexed(path) == _expected(path)
    async with EmbeddedStore.open(path) as store:
        assert len((await store.search("kept")).hits) == 1


async def test_the_index_keeps_no_copy_of_the_texts(tmp_path: Path) -> None:
    """Schema 8: a turn's words are stored once, in the snapshots; a hit's text is read
    from its entity's snapshot."""
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="deal")
        async with memory.turn("Where is the Lisbon offsite?", turn_id="t1") as t:
            t.reply = "In the Alfama, near the castle."
        [hit] = (await memory.search("alfama")).hits
    assert hit.text == "In the Alfama, near the castle."
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        stored = conn.execute("SELECT * FROM search_text").fetchall()
    assert "search_text_content" not in tables
    assert stored
    assert all(value is None for row in stored for value in row)
