"""An entity row's first observation's id is derived from its row, not stored, where it is
the digest of what the row gives back (``_first_id``). What matters: a turn's new rows
store none of their first ids; every read that answers one (observations, snapshots'
provenance, history pages, a key's replay) answers as on the same file with every id
stored; an id that is not the digest of what its row gives back (another one, the digest
of its fields in other JSON, a text id) is kept; ``tests/data/v28_store`` upgrades with
its ids derived; and every read and write answers as on the same file as the version
before held it."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from file_workload_support import Step, compared, same_on_both, steps, turn_on_recorded, write_steps
from first_id_support import DERIVED_IDS, derived_count, underive_ids
from hypothesis import given
from paths_support import TESTS
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_entities
from neotoma_agent.exceptions import NeotomaError
from neotoma_agent.transport.embedded._first_id import derived
from neotoma_agent.transport.embedded._rows import decode_entity
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def _stored_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` with every first id stored (this release
    reads both)."""
    shutil.copyfile(path, to)
    with closing(sqlite3.connect(to, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        underive_ids(conn)
        conn.execute("COMMIT")
    return to


def _first_ids(path: Path) -> dict[str, Any]:
    """Every entity row's ``first_id`` as stored, by entity id."""
    with closing(sqlite3.connect(path)) as conn:
        return {
            decode_entity(r[0]): r[1]
            for r in conn.execute("SELECT id, first_id FROM entities WHERE first_id IS NOT NULL")
        }


async def _observed(path: Path) -> list[Any]:
    """Every entity's observations (the GET route and the list), its snapshot and the
    conversation's history page."""
    out: list[Any] = []
    async with EmbeddedStore.open(path) as store:
        for entity_id in sorted(_first_ids(path)):
            body = {"entity_id": entity_id, "limit": 1000}
            for action in ("get_entity_observations", "list_observations", "get_entity_snapshot"):
                try:
                    out.append(await store.request(action, body))
                except NeotomaError as exc:  # another user's, as on both files
                    out.append(repr(exc))
        out.append(await NeotomaMemory(store, conversation_id="chat-1").history(limit=None))
    return out


async def _turns(path: Path, turns: range) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-1")
        for n in turns:
            async with memory.turn(f"question {n}", turn_id=f"t{n}") as t:
                t.reply = f"answer {n}"


async def test_a_turns_rows_store_no_first_id(tmp_path: Path) -> None:
    """Every row a turn creates (its messages, its record, the conversation) derives its
    first observation's id: no byte stored; every read answers as with them stored."""
    path = tmp_path / "store.db"
    await _turns(path, range(3))
    ids = _first_ids(path)
    assert len(ids) == 1 + 3 * 3
    assert set(ids.values()) == {b""}
    stored = _stored_copy(path, tmp_path / "stored.db")
    assert all(len(v) == 16 for v in _first_ids(stored).values())
    assert await _observed(path) == await _observed(stored)


async def test_a_purge_leaves_no_text_in_the_memo_of_derived_ids(tmp_path: Path) -> None:
    """The memo of derived ids is keyed by the rows' fields' text: a purge empties it, so
    an erased message's text stays nowhere in the process."""
    path = tmp_path / "store.db"
    await _turns(path, range(2))
    await _observed(path)
    assert derived.cache_info().currsize > 0
    purge_entities(path, [next(iter(_first_ids(path)))])
    assert derived.cache_info().currsize == 0


async def test_an_id_that_is_not_the_digest_of_its_row_is_kept(tmp_path: Path) -> None:
    """Upgraded from the version before, a row whose first id is another id, the digest of
    its fields in other JSON, or a text id keeps it (and every read answers it);
    every other row's is derived."""
    path = tmp_path / "store.db"
    await _turns(path, range(2))
    old = copy_at_version(path, tmp_path / "before.db", DERIVED_IDS - 1)
    with closing(sqlite3.connect(old, isolation_level=None)) as conn:
        rows = conn.execute(
            "SELECT rowid FROM entities WHERE entity_type = 'conversation_turn' ORDER BY rowid"
        ).fetchall()
        (conversation,) = conn.execute(
            "SELECT rowid FROM entities WHERE entity_type = 'conversation'"
        ).fetchone()
        other, text = int(rows[0][0]), int(rows[1][0])
        conn.execute("UPDATE entities SET first_id = ? WHERE rowid = ?", (b"\x01" * 16, other))
        conn.execute("UPDATE entities SET first_id = 'an-old-id' WHERE rowid = ?", (text,))
        # The conversation's first fields in other JSON (spaced, as another writer's): the
        # same fields, not the text its id is the digest of.
        (first,) = conn.execute(
            "SELECT first_fields FROM entities WHERE rowid = ?", (conversation,)
        ).fetchone()
        spaced = json.dumps(json.loads(first))
        assert spaced != first
        conn.execute("UPDATE entities SET first_fields = ? WHERE rowid = ?", (spaced, conversation))
        kept = conn.execute(
            "SELECT id, first_id FROM entities WHERE rowid IN (?, ?, ?)",
            (other, text, conversation),
        ).fetchall()
    before = await _observed(old)
    ids = _first_ids(old)  # (opened: upgraded)
    for entity_id, first_id in kept:
        assert ids.pop(decode_entity(entity_id)) == first_id
    assert ids
    assert set(ids.values()) == {b""}
    assert await _observed(old) == before
    assert any(
        o["id"] == "an-old-id"
        for page in before
        if isinstance(page, dict)
        for o in page.get("observations", [])
    )


async def test_a_version_28_file_upgrades_with_its_first_ids_derived(tmp_path: Path) -> None:
    """The file version 28 wrote (``tests/data/v28_store``): upgraded, its rows' first ids
    are derived, every read answers as with them stored, and it is written on as a file
    this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v28_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 28  # the file version 28 wrote
        firsts = conn.execute("SELECT count(first_id) FROM entities").fetchone()[0]
    async with EmbeddedStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert derived_count(conn) == firsts  # (this file's ids are all the digests)
    stored = _stored_copy(path, tmp_path / "stored.db")
    assert await _observed(path) == await _observed(stored)
    await turn_on_recorded(path)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user answers the
    same on the file and on its copy as the version before held it (every first id
    stored), upgraded; then the same writes on both write the same rows and answer the
    same."""
    tmp = tmp_path_factory.mktemp("first-ids")
    path = tmp / "derived.db"
    await write_steps(path, [("turn", 0, 0), *before], 0)
    with closing(sqlite3.connect(path)) as conn:
        assert derived_count(conn)
    old = copy_at_version(path, tmp / "before.db", DERIVED_IDS - 1)
    with closing(sqlite3.connect(old)) as conn:
        assert not derived_count(conn)
    await same_on_both(path, old, after)
