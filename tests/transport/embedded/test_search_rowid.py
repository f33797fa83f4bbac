"""The search index keyed by the entity row's rowid (schema version 15): no ``search_docs``.

What matters: a row of ``search_text`` is the entity row of its rowid (one each, for every
live message and searchable entity), through deletions, restores, purges and the upgrade
of a version-14 file (in one transaction); every search answers as on the same file as
version 14 held it, upgraded, and as version 14 answered the file it wrote
(``tests/data/v14_store``), except the order of hits of equal rank, which is the order the
entities were created in (version 14's was its own numbering's: after an upgrade or a
purge, the entities' id order; after a restore, the restored one last).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from file_workload_support import (
    USERS,
    Step,
    compared,
    same_on_both,
    steps,
    turn_on_recorded,
    view_of,
    write_steps,
)
from hypothesis import given
from paths_support import TESTS
from recorder_support import recorder
from search_presence_support import in_presence_order, without_scores
from search_rowid_support import BEFORE, search_rows, unkeyed_copy

from neotoma_agent import EmbeddedStore, NeotomaMemory, UserStore, purge_forgotten, purge_user
from neotoma_agent.transport.embedded import _schema
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION
from neotoma_agent.transport.embedded._search_rowid import SEARCH_BY_ROWID

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

DATA = TESTS / "data" / "v14_store"
#: the workload's searches (its turns, replies, remembered people, the company)
_QUERIES = ("acme", '"acme corp"', "question", "answer", "note", "maria", '"answer 3"')


def _tables(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


def _rowids(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute(f"SELECT {entity_text('id')}, rowid FROM entities"))


async def _searches(view: EmbeddedStore | UserStore) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in _QUERIES:
        for extra in ({}, {"limit": 1}, {"conversation_id": "c0"}, {"conversation_id": "c1"}):
            out[json.dumps([q, extra])] = await view.request("text_search", {"q": q, **extra})
    return out


async def _every_search(path: Path) -> dict[str, Any]:
    async with EmbeddedStore.open(path) as store:
        return {user: await _searches(view_of(store, user)) for user in USERS}


def _texts(answer: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["entity_id"], h["text"]) for h in answer["hits"]]


async def test_a_row_of_the_index_is_the_entity_row_of_its_rowid(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="deal")
        async with memory.turn("Where is the Lisbon offsite?", turn_id="t1") as t:
            t.reply = "In the Alfama."
        note = await memory.remember("task", title="The Lisbon offsite, in May")
        await store.request("delete_entity", {"entity_id": note})
        assert [h.entity_id for h in (await store.search("may")).hits] == []
        await store.request("restore_entity", {"entity_id": note})
        hits = (await store.search("lisbon")).hits
    assert "search_docs" not in _tables(path)
    rowids = _rowids(path)
    indexed = search_rows(path)
    # the two messages and the note, each under its entity row's rowid (the restored
    # note's too: a restore puts its row back under the same number)
    assert len(indexed) == 3
    assert all(rowids[entity_id] == rowid for rowid, entity_id in indexed)
    assert note in {entity_id for _, entity_id in indexed}
    assert sorted(h.text for h in hits) == [
        "The Lisbon offsite, in May",
        "Where is the Lisbon offsite?",
    ]


async def test_hits_of_equal_rank_come_in_the_order_their_entities_were_created(
    tmp_path: Path,
) -> None:
    """Three tasks whose texts rank alike: in creation order, the first one's deletion and
    restore (version 14 numbered it anew, last) and another conversation's purge
    (version 14 numbered every row again, in id order) included."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        gone = NeotomaMemory(store, conversation_id="gone")
        async with gone.turn("A renewal call to forget", turn_id="t1") as t:
            t.reply = "Forgotten."
        memory = NeotomaMemory(store, conversation_id="deal")
        notes = [await memory.remember("task", title=f"Renewal {w}") for w in ("one", "two", "six")]
        await store.request("delete_entity", {"entity_id": notes[0]})
        await store.request("restore_entity", {"entity_id": notes[0]})
        found = await store.request("text_search", {"q": "renewal"})
        forgotten = await gone.forget()
    assert [h["entity_id"] for h in found["hits"][:3]] == notes  # the message ranks after
    assert len({h["score"] for h in found["hits"][:3]}) == 1
    purge_forgotten(path, forgotten)
    async with EmbeddedStore.open(path) as store:
        found = await store.request("text_search", {"q": "renewal"})
        assert [h["entity_id"] for h in found["hits"]] == notes
        [first] = (await store.request("text_search", {"q": "renewal", "limit": 1}))["hits"]
        assert first["entity_id"] == notes[0]


async def test_a_purge_keeps_every_rowid_and_search_answers_right(tmp_path: Path) -> None:
    """A purge erases rows before others' (gaps in the rowids), builds the index again and
    VACUUMs the file: every surviving entity keeps its rowid, and each search finds what
    is left, with its text, and nothing of what went."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        alice = store.for_user("alice")
        for view in (store, alice):
            gone = NeotomaMemory(view, conversation_id="gone")
            for n in range(3):
                async with gone.turn(f"The harbour code is {n}", turn_id=f"t{n}") as t:
                    t.reply = f"Noted harbour {n}."
        forgotten = await NeotomaMemory(store, conversation_id="gone").forget()
        kept = NeotomaMemory(store, conversation_id="kept")
        async with kept.turn("The harbour gate is blue", turn_id="t1") as t:
            t.reply = "Blue gate noted."
        await kept.remember("place", name="Harbour gate", colour="blue")
        bob = NeotomaMemory(store.for_user("bob"), conversation_id="bob")
        async with bob.turn("Bob's harbour", turn_id="t1") as t:
            t.reply = "Bob noted."
        before = await store.request("text_search", {"q": "harbour", "limit": 100})
    rowids = _rowids(path)
    purge_forgotten(path, forgotten)
    purge_user(path, "alice")
    after_ids = _rowids(path)
    assert len(after_ids) < len(rowids)
    assert all(rowids[entity_id] == rowid for entity_id, rowid in after_ids.items())
    assert {i for _, i in search_rows(path)} <= set(after_ids)
    async with EmbeddedStore.open(path) as store:
        found = await store.request("text_search", {"q": "harbour", "limit": 100})
        theirs = await store.for_user("bob").request("text_search", {"q": "harbour"})
        gone = await store.for_user("alice").request("text_search", {"q": "harbour"})
        scoped = await store.request("text_search", {"q": "noted", "conversation_id": "kept"})
    # the local user's soft-deleted conversation was not found before either
    assert sorted(_texts(found)) == sorted(_texts(before))
    assert sorted(t for _, t in _texts(found)) == [
        "Harbour gate\nblue",
        "The harbour gate is blue",
    ]
    assert [t for _, t in _texts(theirs)] == ["Bob's harbour"]
    assert gone["hits"] == []
    assert [t for _, t in _texts(scoped)] == ["Blue gate noted."]


async def test_a_version_14_file_answers_its_searches_as_recorded(tmp_path: Path) -> None:
    """``tests/data/v14_store`` (written and recorded by version 14, main at 080c616): after
    the upgrade its index holds the same entities, under their rowids, and every search of
    each user (words, phrases, a conversation's messages, a limit) finds the same hits, in
    the order of version 29's rule (``search_presence_support``)."""
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "store.db", path)
    before = {entity_id for _, entity_id in search_rows(path)}
    recorded: dict[str, Any] = json.loads((DATA / "answers.json").read_text())["searches"]
    async with EmbeddedStore.open(path) as store:
        got: dict[str, Any] = await recorder()._searches(store)
    assert "search_docs" not in _tables(path)
    rowids = _rowids(path)
    assert {e for _, e in search_rows(path)} == before
    assert all(rowids[e] == rowid for rowid, e in search_rows(path))
    assert list(got) == list(recorded)
    for key, answer in recorded.items():
        user, q, extra = json.loads(key)
        mine = got[key]
        # version 29 (_search_detail): each word counted once, the shorter text first
        assert in_presence_order(mine["hits"], rowids), key
        if "limit" in extra:  # the first hits of the search without a limit
            whole = got[json.dumps([user, q, {}])]
            assert mine["hits"] == whole["hits"][: extra["limit"]], key
        else:
            assert without_scores(mine["hits"]) == without_scores(answer["hits"]), key
    await turn_on_recorded(path)
    async with EmbeddedStore.open(path) as store:
        [hit] = (await store.search("again")).hits
    assert hit.text == "Acme again."


async def test_an_upgrade_that_fails_midway_leaves_the_version_14_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step is one transaction: a failure after it dropped ``search_docs`` and emptied
    the index leaves both as version 14 held them."""
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "store.db", path)
    rows = search_rows(path)
    with closing(sqlite3.connect(path)) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    assert version <= BEFORE

    def fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO search_text (search_text) VALUES ('delete-all')")
        raise OSError("the disk went away")

    monkeypatch.setitem(_schema._AFTER, SEARCH_BY_ROWID, fail)
    with pytest.raises(OSError, match="the disk went away"):
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
    assert search_rows(path) == rows
    monkeypatch.undo()
    async with EmbeddedStore.open(path) as store:
        assert len((await store.search("sprocket")).hits) == 2
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert "search_docs" not in _tables(path)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_version_14_file(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (searches
    of the workload's words and phrases, by conversation, with a limit, besides the
    Transport's reads, history, audit, backup, every GET route and point read) answers the
    same on the file and on its copy as version 14 held it (its index numbered in id
    order), upgraded; the index holds the same entities; then the same writes on both
    write the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("search")
    path = tmp / "keyed.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), ("turn", 0, 3), *before], 0)
    old = unkeyed_copy(path, tmp / "v14.db")
    assert "search_docs" in _tables(old)
    await same_on_both(path, old, after, reads=_searched, rows=[search_rows])


async def _searched(path: Path) -> dict[str, str]:
    return {"searches": repr(await _every_search(path))}
