"""The names of conversations, messages and turn records: found by any substring, stored once.

A real Neotoma server's lookup (``POST /retrieve_entity_by_identifier``, second pass) finds
these entities by any substring of their names, as any other entity
(``scripts/real_server_check.py``; checked against 0.22.0: ``"conv-77"`` finds the
conversation, its messages and its turn records). Since schema version 9 their index keeps
no copy of the names: its rows are numbered as the entity rows, whose names a search
checks. These tests hold the answers to what a scan of the names finds, through writes,
renames, a purge (and the ``VACUUM`` after it), and the upgrade of older files.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_entities
from neotoma_agent.transport.embedded._name_queue import index_queued
from neotoma_agent.transport.embedded._rows import encode_entity, entity_text

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

BOOKKEEPING = ("conversation", "conversation_message", "conversation_turn")


def scan(path: Path, needle: str) -> list[str]:
    """The ids a lookup of ``needle`` must answer: entities whose name or an alias holds it
    (lowercased, as the server compares), in the lookup's order (name, then id)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            f"SELECT {entity_text('id')}, canonical_name, aliases FROM entities WHERE uid = 0 "
            "ORDER BY canonical_name, id"
        ).fetchall()
    return [
        str(i)
        for i, name, aliases in rows
        if needle.lower() in name.lower() or needle.lower() in str(aliases).lower()
    ]


def indexed_terms(path: Path) -> set[str]:
    """The trigrams ``bookkeeping_names`` lists (its queued documents moved in and its
    segments merged first)."""
    with sqlite3.connect(path) as conn:
        index_queued(conn)
        conn.commit()  # (FTS5 writes its pending words and counts at a commit)
        conn.execute("INSERT INTO bookkeeping_names (bookkeeping_names) VALUES ('optimize')")
        conn.execute("INSERT INTO bookkeeping_names (bookkeeping_names) VALUES ('integrity-check')")
        conn.execute(
            "CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, bookkeeping_names, 'row')"
        )
        return {str(t) for (t,) in conn.execute("SELECT term FROM temp.terms WHERE doc > 0")}


_TURN_NAME = re.compile(r"conversation_turn:(.*)\|([^|]*)", re.DOTALL)


def named_terms(path: Path) -> set[str]:
    """The trigrams of every bookkeeping entity's names (every user's): one text a turn
    (its record's: its first name, its messages' derived from it, then its names since),
    and one for each other entity or one renamed (its name and aliases), each text its
    names one a line, then a blank line."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT entity_type, canonical_name, aliases, uid FROM entities "
            "WHERE entity_type IN (?, ?, ?) ORDER BY entity_type DESC",
            BOOKKEEPING,
        ).fetchall()
    texts: list[list[str]] = []
    grouped: set[tuple[int, str]] = set()
    for entity_type, name, aliases, uid in rows:  # turn records first
        first = ([*json.loads(aliases), name])[0]
        turn = _TURN_NAME.fullmatch(first) if entity_type == "conversation_turn" else None
        if turn is not None:
            user = f"conversation_message:{turn[1]}:{turn[2]}"
            since = [name, *json.loads(aliases)[1:]] if aliases != "[]" else []
            texts.append([first, user, f"{user}:assistant", *since])
            grouped.update({(uid, user), (uid, f"{user}:assistant")})
        elif aliases != "[]" or (uid, name) not in grouped:
            texts.append([name, *json.loads(aliases)])
    joined = ["\n".join(t).lower() + "\n\n" for t in texts]
    return {t[i : i + 3] for t in joined for i in range(len(t) - 2)}


async def found(store: EmbeddedStore, needle: str) -> list[str]:
    answer = await store.retrieve_entity_by_identifier(needle)
    assert answer.match_mode in ("direct", "none")
    return [e.entity_id for e in answer.entities]


NEEDLES = (
    "zq-room-77",
    "room-7",
    "conversation:zq-room",
    "conversation_message:zq-room-77:t1",
    "zq-room-77:t2:assistant",
    "zq-room-77|t1",
    "message:zq",
    "assistant",
    "m-77:t",
    "zq",
    "7",
)


async def _turns(path: Path, conversation: str) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id=conversation)
        for n in (1, 2, 3):
            async with memory.turn(f"Question {n}", turn_id=f"t{n}") as t:
                t.reply = f"Answer {n}."


async def test_every_substring_of_their_names_finds_them_and_the_index_holds_no_copy(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await _turns(path, "zq-room-77")
    await _turns(path, "other-room")
    async with EmbeddedStore.open(path) as store:
        # named by their titles: a name shorter than a trigram, one not in ASCII
        for n, title in enumerate(("Q", "Café")):
            await store.store(
                [{"entity_type": "conversation", "title": title}], idempotency_key=f"k{n}"
            )
        for needle in (*NEEDLES, "q", "é", "fé", "caf"):
            assert await found(store, needle) == scan(path, needle), needle
        assert len(await found(store, "zq-room-77")) == 1 + 6 + 3
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        (rows,) = conn.execute("SELECT count(*) FROM bookkeeping_names_data").fetchone()
    assert "bookkeeping_names_content" not in tables  # the names are in the entity rows only
    assert rows > 0
    with sqlite3.connect(path) as conn:
        dumped = list(conn.iterdump())  # every table can be read whole, as ever
    assert any("bookkeeping_names" in line for line in dumped)


async def test_a_renamed_conversation_is_found_by_its_old_name_and_its_new_one(
    tmp_path: Path,
) -> None:
    """Its old name is an alias, found by a lookup as a server finds aliases; its new one
    takes the index row's place (the row is named by the texts it held)."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        first = await store.store(
            [{"entity_type": "conversation", "title": "Zq planning"}], idempotency_key="k1"
        )
        entity_id = first.entity_id(0)
        for n, conversation_id in enumerate(("conv-zq-9", "c-3"), 2):
            await store.store(
                [
                    {
                        "entity_type": "conversation",
                        "target_id": entity_id,
                        "conversation_id": conversation_id,
                    }
                ],
                idempotency_key=f"k{n}",
            )
            with sqlite3.connect(path) as conn:
                name = conn.execute(
                    "SELECT canonical_name FROM entities WHERE id = ?", (encode_entity(entity_id),)
                ).fetchone()[0]
            assert name == f"conversation:{conversation_id}"
            for needle in ("zq planning", "conv-zq-9", "zq", "conversation:", conversation_id):
                assert await found(store, needle) == scan(path, needle) == [entity_id], needle
    assert indexed_terms(path) == named_terms(path)


async def test_a_purge_takes_their_rows_out_and_the_others_keep_theirs(tmp_path: Path) -> None:
    """Purged entities leave gaps in the entity rows' numbers; the ``VACUUM`` after the
    purge keeps the numbers (the table has an index), so every other name still leads to
    its own entity."""
    path = tmp_path / "store.db"
    await _turns(path, "gone-room")
    await _turns(path, "zq-room-77")
    await _turns(path, "also-gone")
    gone = scan(path, "gone")
    assert len(gone) == 20
    assert "gon" in indexed_terms(path)
    purge_entities(path, gone)
    assert "gon" not in indexed_terms(path)  # no trigram of a purged name is left
    assert indexed_terms(path) == named_terms(path)
    async with EmbeddedStore.open(path) as store:
        assert await found(store, "gone") == []
        for needle in NEEDLES:
            assert await found(store, needle) == scan(path, needle), needle
        assert len(await found(store, "room")) == 10


@pytest.mark.parametrize("fixture", ["v1_store", "v7_store", "v8_store"])
async def test_an_older_files_names_are_found_after_the_upgrade(
    fixture: str, tmp_path: Path
) -> None:
    """The upgrade to version 9 builds the index from the entity rows."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / fixture / "store.db", path)
    async with EmbeddedStore.open(path) as store:
        for needle in ("chat-v2", "v2-turn-2", "conversation_message:", "turn-1:assistant"):
            assert await found(store, needle) == scan(path, needle), needle
        if fixture != "v1_store":
            assert len(await found(store, "chat-v2")) == 1 + 4 + 2
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "bookkeeping_names_content" not in tables
    assert indexed_terms(path) == named_terms(path)
