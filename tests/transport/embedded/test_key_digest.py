"""The idempotency keys found by 4 bytes of their digest and a slot (``_key_digest``). What
matters: a key's row and each entry of its index by source hold the digest's first 4 bytes
and a slot (0 for nearly every key), never the whole digest; keys that share those bytes
each replay their own entities, are told from a mismatch (a store, a batch's check) and
are their observations' ``source``; a new key takes the slot after the last one of its
digest, whatever was erased before it; a version-23 file (``tests/data/v23_store``, and a
file whose keys share a digest) upgrades and is written on; and every read and write
answers as on the same file as the version before the step held it."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from close_row_support import closes_kept
from derived_restatement_support import rows_kept
from file_workload_support import Step, compared, same_on_both, steps, turn_on_recorded, write_steps
from hypothesis import given
from key_digest_support import SHORT, has_slots
from paths_support import TESTS
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.exceptions import IdempotencyMismatchError
from neotoma_agent.transport.embedded._key_digest import DIGEST_BYTES, digest, key_digest
from neotoma_agent.transport.embedded._key_rows import key_seqs, key_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the keys were found by 4 bytes of digest
BEFORE = SHORT - 1
DATA = TESTS / "data" / "v23_store"
#: keys whose digests share their first 4 bytes (found by a birthday search), and three
#: that all do
SHARED = ("acme-23109", "acme-45949")
THREE = ("acme-5111923", "acme-5114065", "acme-5669973")


def _rows(path: Path) -> list[tuple[Any, ...]]:
    """Every key row: (user, key text, digest, slot, source, seqs, time), by key text."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT uid, key, digest, slot, source_id, observations, created_at "
            "FROM idempotency_keys"
        ).fetchall()
    return sorted((r[0], key_text(r[1]), bytes(r[2]), *r[3:5], key_seqs(r[5]), r[6]) for r in rows)


def _key_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every key row but its slot (its digest as the first 4 bytes an older file held)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT uid, key, substr(digest, 1, {DIGEST_BYTES}), source_id, observations, "
            "created_at FROM idempotency_keys"
        ).fetchall()
    return sorted((r[0], key_text(r[1]), *r[2:4], key_seqs(r[4]), r[5]) for r in rows)


def _company(name: str) -> list[dict[str, Any]]:
    return [{"entity_type": "company", "name": name}]


def test_the_shared_keys_share_their_first_four_bytes_and_no_more() -> None:
    assert DIGEST_BYTES == 4
    for keys in (SHARED, THREE):
        assert len({digest(k) for k in keys}) == 1
        assert len({key_digest(k) for k in keys}) == len(keys)


async def test_a_key_and_its_index_entry_hold_four_bytes_of_digest_and_a_slot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        async with NeotomaMemory(store, conversation_id="deal").turn("Where?", turn_id="t1") as t:
            t.reply = "Lisbon."
        await store.store(_company("Acme Corp"), idempotency_key="acme-1")
    rows = _rows(path)
    assert len(rows) == 3
    assert all(r[2] == digest(r[1]) and r[3] == 0 for r in rows)
    with closing(sqlite3.connect(path)) as conn:
        table = [
            r[2] for r in conn.execute("PRAGMA index_info(sqlite_autoindex_idempotency_keys_1)")
        ]
        entries = [r[2] for r in conn.execute("PRAGMA index_xinfo(idempotency_keys_by_source)")]
        # a slot of 0 takes no byte in a record: the rows hold 4 bytes of digest, not 16
        (payload,) = conn.execute(
            "SELECT sum(payload) FROM dbstat WHERE name = 'idempotency_keys_by_source'"
        ).fetchone()
    assert table == ["uid", "digest", "slot"]
    assert entries == [None, "uid", "digest", "slot"]  # the source's prefix, then the key
    assert payload == 3 * (1 + 4 + 4 + 4)  # a header of 4 types, a prefix and a digest


async def test_keys_that_share_a_digest_each_replay_their_own_entities(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    first, second = SHARED
    async with EmbeddedStore.open(path) as store:
        acme = await store.store(_company("Acme Corp"), idempotency_key=first)
        globex = await store.store(_company("Globex"), idempotency_key=second)
        again = [
            await store.store(_company("Acme Corp"), idempotency_key=first),
            await store.store(_company("Globex"), idempotency_key=second),
        ]
        for name, key in (("Globex", first), ("Acme Corp", second)):
            with pytest.raises(IdempotencyMismatchError):
                await store.store(_company(name), idempotency_key=key)
        statuses = await store.replay_status(
            [
                {"entities": _company("Acme Corp"), "idempotency_key": first},
                {"entities": _company("Globex"), "idempotency_key": second},
                {"entities": _company("Globex"), "idempotency_key": first},
                {"entities": _company("Acme Corp"), "idempotency_key": second},
                {"entities": _company("Acme Corp"), "idempotency_key": THREE[0]},
            ]
        )
        sources = [
            [
                o["source"]
                for o in (
                    await store.request(
                        "get_entity_observations", {"entity_id": written.entities[0].entity_id}
                    )
                )["observations"]
            ]
            for written in (acme, globex)
        ]
    assert (acme.replayed, globex.replayed) == (False, False)
    assert [a.replayed for a in again] == [True, True]
    assert [a.entities[0].entity_id for a in again] == [
        acme.entities[0].entity_id,
        globex.entities[0].entity_id,
    ]
    assert statuses == [True, True, False, False, None]
    assert sources == [[first], [second]]
    assert [(r[1], r[3]) for r in _rows(path)] == [(first, 0), (second, 1)]


async def test_a_new_key_takes_the_slot_after_the_last_of_its_digest(tmp_path: Path) -> None:
    """The first of three keys sharing a digest erased (its row deleted, as a purge does):
    the third takes slot 2, after the second's 1, and the second still replays."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        for n, key in enumerate(THREE[:2]):
            await store.store(_company(f"Acme {n}"), idempotency_key=key)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("DELETE FROM idempotency_keys WHERE slot = 0")
        conn.commit()
    async with EmbeddedStore.open(path) as store:
        third = await store.store(_company("Acme 2"), idempotency_key=THREE[2])
        second = await store.store(_company("Acme 1"), idempotency_key=THREE[1])
        first = await store.store(_company("Acme 9"), idempotency_key=THREE[0])  # new again
    assert (third.replayed, second.replayed, first.replayed) == (False, True, False)
    assert [(r[1], r[3]) for r in _rows(path)] == [(THREE[0], 3), (THREE[1], 1), (THREE[2], 2)]


async def test_the_version_23_file_upgrades_and_is_written_on(tmp_path: Path) -> None:
    """``tests/data/v23_store`` upgraded: the same keys, sources, lists and times, each
    found by 4 bytes of its digest in slot 0; its turns go on and its keys replay (its
    recorded answers are compared by ``test_embedded_migration``)."""
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == BEFORE
        assert not has_slots(conn)
    before = _key_rows(path)
    # (its restatements and closes as rows: ``_derived_restatement``, ``_close_row``)
    with rows_kept(), closes_kept():
        async with EmbeddedStore.open(path):
            pass
    async with EmbeddedStore.open(path) as store:
        replayed = await store.store(
            [{"entity_type": "company", "name": "Acme Corp", "domain": "acme.example"}],
            idempotency_key="company-1",
        )
    assert replayed.replayed
    assert _key_rows(path) == before
    assert all(r[2] == digest(r[1]) and r[3] == 0 for r in _rows(path))
    await turn_on_recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


async def test_an_upgrade_numbers_the_slots_of_keys_that_share_a_digest(tmp_path: Path) -> None:
    """A file as version 23 held it whose keys share 4 bytes of digest: upgraded, they take
    slots 0, 1 and 2 (in the order of their whole digests), and each replays its own."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        for n, key in enumerate(THREE):
            await store.store(_company(f"Acme {n}"), idempotency_key=key)
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    with closing(sqlite3.connect(old)) as conn:
        assert {len(r[0]) for r in conn.execute("SELECT digest FROM idempotency_keys")} == {16}
    async with EmbeddedStore.open(old) as store:
        replays = [
            await store.store(_company(f"Acme {n}"), idempotency_key=key)
            for n, key in enumerate(THREE)
        ]
    assert [r.replayed for r in replays] == [True, True, True]
    by_digest = sorted(THREE, key=key_digest)
    assert sorted((r[3], r[1]) for r in _rows(old)) == list(enumerate(by_digest))
    assert _key_rows(old) == _key_rows(path)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (replays,
    observations' sources on the GET routes, backups, the audit among them) answers the
    same on the file and on its copy as the version before held it (each key by its whole
    digest), upgraded; the key rows hold the same keys; then the same writes on both."""
    tmp = tmp_path_factory.mktemp("digest")
    path = tmp / "short.db"
    await write_steps(path, [("turn", 0, 0), ("store", 1, 3), *before], 0)
    old = copy_at_version(path, tmp / "before.db", BEFORE)
    with closing(sqlite3.connect(old)) as conn:
        assert not has_slots(conn)
    await same_on_both(path, old, after, rows=[_rows])
