"""One bookkeeping-names document a turn: a turn's enter writes one
document holding its turn record's name and its two messages' names, its close writes
none, and every lookup answers as when each entity had a document of its own (the
version before): the same ids in the same order, for any substring of any name (short needles, ones
across the conversation and turn ids), for a reply never written (an abandoned or
unclosed turn), a renamed message or turn record, erased messages and conversations, and
two users' turns of the same names."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from file_workload_support import (
    USERS,
    Step,
    answers,
    compared,
    fixed_clocks,
    steps,
    turn_on_recorded,
    view_of,
    write_steps,
)
from hypothesis import given
from hypothesis import strategies as st
from packed_ids_support import entity_rows
from paths_support import TESTS
from turn_names_support import (
    book_names,
    documents,
    scanned,
    searched,
    ungrouped_copy,
)

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_entities
from neotoma_agent.transport.embedded._name_queue import index_queued
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def _enter_only(conversation: str, turn: str) -> dict[str, object]:
    """A turn's enter as a store writes it, never closed: its reply is never written."""
    return {
        "entities": [
            {"entity_type": "conversation", "conversation_id": conversation},
            {
                "entity_type": "conversation_message",
                "role": "user",
                "sender_kind": "user",
                "content": "hello",
                "turn_key": f"{conversation}:{turn}",
            },
            {
                "entity_type": "conversation_turn",
                "session_id": conversation,
                "turn_id": turn,
                "turn_key": f"{conversation}:{turn}",
                "status": "open",
            },
        ],
        "relationships": [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
        "idempotency_key": f"enter-{conversation}-{turn}",
    }


async def _turn(memory: NeotomaMemory, turn: str, *, abandon: bool = False) -> None:
    try:
        async with memory.turn(f"about {turn}", turn_id=turn) as t:
            if abandon:
                raise KeyError(turn)
            t.reply = f"reply {turn}"
    except KeyError:
        pass


async def _rename(
    store: EmbeddedStore,
    path: Path,
    entity_type: str,
    conversation: str,
    turn: str,
    fields: dict[str, str],
) -> None:
    """Give an entity the name ``fields`` derive (its old name stays, as an alias)."""
    ids = {e[1]: e[0] for e in book_names_of(path)}
    name = (
        f"conversation_message:{conversation}:{turn}"
        if entity_type == "conversation_message"
        else f"conversation_turn:{conversation}|{turn}"
    )
    if name in ids:
        body = {"entity_type": entity_type, "target_id": ids[name], **fields}
        await store.store([body], idempotency_key=f"rename-{name}")


def book_names_of(path: Path) -> list[tuple[str, str, list[str], int]]:
    """The local user's bookkeeping entities (the store's own)."""
    return [e for e in book_names(path) if e[3] == 0]


async def _workload(path: Path) -> None:
    """Turns of two users (the same names), ids holding ``:`` and ``|``, an abandoned turn,
    an enter never closed, a message stored before its turn record, renamed ones."""
    async with EmbeddedStore.open(path) as store:
        mine = NeotomaMemory(store, conversation_id="Room-77")
        for turn in ("t1", "t2", "t3"):
            await _turn(mine, turn)
        await _turn(mine, "t4", abandon=True)
        await _turn(NeotomaMemory(store, conversation_id="r|x:y"), "Tü")
        theirs = NeotomaMemory(store.for_user("alice"), conversation_id="Room-77")
        for turn in ("t1", "t2"):
            await _turn(theirs, turn)
        await store.request("store", _enter_only("c9", "t0"))
        await store.store(
            [{"entity_type": "conversation_message", "role": "user", "turn_key": "solo:t1"}],
            idempotency_key="solo-message",
        )
        await store.store(
            [{"entity_type": "conversation_turn", "session_id": "solo", "turn_id": "t1"}],
            idempotency_key="solo-record",
        )
        await store.store(
            [{"entity_type": "conversation_turn", "session_id": "odd", "turn_id": "assistant"}],
            idempotency_key="odd-record",
        )
        # named as a turn's message, of a turn with no record
        await store.store(
            [{"entity_type": "conversation_message", "role": "user", "turn_key": "lone:t9"}],
            idempotency_key="lone-message",
        )
    async with EmbeddedStore.open(path) as store:
        await _rename(store, path, "conversation_message", "Room-77", "t2", {"turn_key": "moved:x"})
        await _rename(
            store,
            path,
            "conversation_turn",
            "Room-77",
            "t3",
            {"session_id": "moved", "turn_id": "y"},
        )


def _needles(path: Path, every: int = 1) -> list[str]:
    """Every substring of one to three characters of every name and alias (at every
    ``every``-th place), each whole name, needles across the ids' joins and across two
    names of one document, and the names of replies never written."""
    texts = {t.lower() for _, name, aliases, _ in book_names(path) for t in (name, *aliases)}
    out = {"", "77:t1", "|t", "t1:a", ":assistant", "t1\nconv", "assistant\n", "t1conv"}
    out |= {"conversation_message:room-77:t4:assistant", "conversation_message:c9:t0:assistant"}
    for text in texts:
        out.add(text)
        out.update(text[i : i + k] for k in (1, 2, 3) for i in range(0, len(text) - k + 1, every))
    return sorted(out)


def _assert_lookups(path: Path, copy: Path, every: int = 1) -> None:
    needles = _needles(path, every)
    got = searched(path, needles)
    assert got == searched(copy, needles)
    book = {e[0] for e in book_names(path)}
    for (needle, kinds), ids in got.items():
        if kinds == "None":  # (and a titled conversation, found in its title, may lead)
            assert set(scanned(path, needle, None)) <= set(ids), needle
        else:
            wanted = scanned(path, needle, frozenset(("name", "alias")))
            assert [i for i in ids if i in book] == wanted, needle


async def _store_lookups(path: Path, needles: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    async with EmbeddedStore.open(path) as store:
        for user in USERS:
            view = view_of(store, user)
            for needle in needles:
                for etype in (None, "conversation_message", "conversation_turn"):
                    body = {"identifier": needle, **({"entity_type": etype} if etype else {})}
                    out[f"{user} {needle} {etype}"] = await view.request(
                        "retrieve_entity_by_identifier", body
                    )
    return out


async def test_a_turn_writes_one_document_at_its_enter_and_none_at_its_close(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="room")
        for turn in ("t1", "t2", "t3"):
            await _turn(memory, turn)
        async with memory.turn("about t4", turn_id="t4") as t:
            t.reply = "reply t4"
            before = documents(path)
    # the conversation's own, and one a turn: its record's
    rows = {name: rowid for rowid, name in _rowids(path)}
    turns = [rows[f"conversation_turn:room|t{n}"] for n in (1, 2, 3, 4)]
    assert sorted(documents(path)) == sorted([*turns, rows["conversation:room"]])
    assert documents(path) == before  # the close added none


def _rowids(path: Path) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(path)) as conn:
        return [
            (int(r[0]), str(r[1]))
            for r in conn.execute("SELECT rowid, canonical_name FROM entities")
        ]


async def test_every_lookup_answers_as_with_a_document_an_entity(tmp_path: Path) -> None:
    """Every substring of every name, through turns' documents, against the same file
    with one document an entity and against a scan of the names; then erased messages,
    a turn record and a conversation (a purge builds the index again)."""
    path = tmp_path / "store.db"
    await _workload(path)
    assert len(documents(path)) < len(book_names(path))
    _check_index(path)  # a rename took out only a document there was
    _assert_lookups(path, ungrouped_copy(path, tmp_path / "ungrouped.db", SCHEMA_VERSION))
    names = {e[1]: e[0] for e in book_names(path) if e[3] == 0}
    # a turn's user message (its record and reply stay), a turn record (its messages
    # stay), a whole conversation
    gone = [names["conversation_message:Room-77:t1"], names["conversation_turn:r|x:y|Tü"]]
    gone += [i for n, i in names.items() if "c9" in n]
    purge_entities(path, gone)
    assert not set(gone) & {e[0] for e in book_names(path)}
    _assert_lookups(path, ungrouped_copy(path, tmp_path / "after.db", SCHEMA_VERSION))
    _check_index(path)


def _varints(blob: bytes) -> list[int]:
    out, value = [], 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            out.append(value)
            value = 0
    return out


def _check_index(path: Path) -> None:
    """FTS5's check of the index, and its counts of documents and of their trigrams those
    of the documents' sizes (a document taken out that was never put in, or named by
    another text than it was put in with, would move them: FTS5 trusts the caller of a
    contentless table's ``delete``)."""
    with closing(sqlite3.connect(path)) as conn:
        index_queued(conn)
        conn.commit()  # (FTS5 writes its pending words and counts at a commit)
        conn.execute("INSERT INTO bookkeeping_names (bookkeeping_names) VALUES ('integrity-check')")
        (block,) = conn.execute("SELECT block FROM bookkeeping_names_data WHERE id = 1").fetchone()
        sizes = [
            _varints(bytes(r[0]))[0]
            for r in conn.execute("SELECT sz FROM bookkeeping_names_docsize")
        ]
    # the averages record: the count of documents, then the trigrams of the column
    assert _varints(bytes(block))[:2] == [len(sizes), sum(sizes)]


async def test_the_upgrade_groups_a_version_14_files_names_and_lookups_answer_the_same(
    tmp_path: Path,
) -> None:
    """The file the release before wrote (``tests/data/v14_store``) and one written by this
    workload as the version before held it: every lookup answers after the upgrade as before it,
    and it is written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v14_store" / "store.db", path)
    old = tmp_path / "old.db"
    shutil.copyfile(path, old)
    needles = _needles(path)
    assert len(documents(path)) == len(book_names(path))
    before = searched(old, needles)
    await turn_on_recorded(path)
    assert len(documents(path)) < len(book_names(path))
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    after = searched(path, needles)
    # the turn written since: found wherever its names hold the needle, the rest as before
    new = {e[0] for e in book_names(path)} - {e[0] for e in book_names(old)}
    assert {k: [i for i in v if i not in new] for k, v in after.items()} == before
    _assert_lookups(path, ungrouped_copy(path, tmp_path / "ungrouped.db", SCHEMA_VERSION))

    # a message whose id is not the one its name derives (a file another tool wrote):
    # a document of its own, as a turn's cannot lead to it
    odd = tmp_path / "odd.db"
    shutil.copyfile(TESTS / "data" / "v14_store" / "store.db", odd)
    with closing(sqlite3.connect(odd)) as conn:
        conn.execute(
            "UPDATE entities SET id = ? WHERE canonical_name = ? AND uid = 0",
            (bytes(range(12)), "conversation_message:chat-v2:v2-turn-1:assistant"),
        )
        conn.commit()
    async with EmbeddedStore.open(odd):
        pass
    assert "ent_000102030405060708090a0b" in scanned(odd, "v2-turn-1:assistant", None)
    _assert_lookups(odd, ungrouped_copy(odd, tmp_path / "odd-flat.db", SCHEMA_VERSION))

    written = tmp_path / "written.db"
    await _workload(written)
    copy = ungrouped_copy(written, tmp_path / "v14.db")
    lookups = ["room-77", "t1", "7", "|t", ":assistant", "moved", "Room-77:T4", "tü"]
    assert await _store_lookups(copy, lookups) == await _store_lookups(written, lookups)


_MORE = st.lists(
    st.tuples(st.sampled_from(["turn", "abandon", "enter", "rename", "purge"]), st.integers(0, 3)),
    max_size=8,
)


@compared
@given(before=steps, after=steps, more=_MORE)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step], more: list
) -> None:
    """Any mix of two users' turns, stores, corrections, deletions, edges and forgotten
    users, then of turns, abandoned and unclosed ones, renames and purges: every read of
    each user answers the same on the file and on its copy as the version before held it (one
    names document an entity), upgraded, and so does every lookup of any substring of a
    name; then the same writes on both write the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("names")
    path = tmp / "grouped.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    await _more(path, more, 1_000_000)
    old = ungrouped_copy(path, tmp / "v14.db")
    assert await answers(old) == await answers(path)
    assert entity_rows(old) == entity_rows(path)
    assert sorted(documents(old)) == sorted(documents(path))
    for copy in (path, old):
        await write_steps(copy, after, 5_000_000)
        await _more(copy, more, 6_000_000)
    assert entity_rows(old) == entity_rows(path)
    assert await answers(old) == await answers(path)
    needles = ["c0", "c1", "t1", ":assistant", "|t", "0:t", "moved", "1", "x"]
    assert await _store_lookups(old, needles) == await _store_lookups(path, needles)
    _assert_lookups(path, ungrouped_copy(path, tmp / "flat.db", SCHEMA_VERSION), every=4)


async def _more(path: Path, more: list[tuple[str, int]], start_ms: int) -> None:
    purged: list[str] = []
    with fixed_clocks(start_ms):
        await _more_on(path, more, purged)
    if purged:
        purge_entities(path, purged)


async def _more_on(path: Path, more: list[tuple[str, int]], purged: list[str]) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="c0")
        for n, (kind, k) in enumerate(more):
            turn = f"m{k}"
            if kind in ("turn", "abandon"):
                await _turn(memory, f"{turn}-{n}", abandon=kind == "abandon")
            elif kind == "enter":
                await store.request("store", _enter_only("c0", f"{turn}-{n}"))
            elif kind == "rename":
                entries = [e for e in book_names_of(path) if e[1].startswith("conversation_")]
                if entries:
                    entity_id, name = entries[(k * 7) % len(entries)][:2]
                    etype = name.split(":", 1)[0]
                    fields = (
                        {"session_id": "moved", "turn_id": f"y{n}"}
                        if etype == "conversation_turn"
                        else {"conversation_id": f"moved-{n}"}
                        if etype == "conversation"
                        else {"turn_key": f"moved:{n}"}
                    )
                    await store.store(
                        [{"entity_type": etype, "target_id": entity_id, **fields}],
                        idempotency_key=f"rename-{n}-{entity_id}",
                    )
            elif kind == "purge":
                entries = book_names_of(path)
                if entries:
                    purged.append(entries[(k * 5) % len(entries)][0])
