"""The idempotency keys' rows (``_key_rows``): a key's text packed (canonical lowercase
UUIDs as their 16 bytes, long lowercase hex runs as bytes, the turn protocol's fragments
as a code, the rest as UTF-8) so that it unpacks to exactly the same text, its list of
observations as varints, its index by source on the source's first bytes; every read
answers as on the same file as the version before held it (each key and list as its
text, the index on the whole source), upgraded, and an observation's ``source`` is still
the first key (oldest, then least) of its source."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from close_row_support import closes_kept
from derived_restatement_support import rows_kept
from file_workload_support import Step, compared, same_on_both, steps, write_steps
from hypothesis import example, given
from hypothesis import strategies as st
from paths_support import TESTS
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_forgotten
from neotoma_agent._records.keys import TurnKeys
from neotoma_agent.transport.embedded import _schema, _write
from neotoma_agent.transport.embedded._key_digest import DIGEST_BYTES, digest
from neotoma_agent.transport.embedded._key_rows import (
    FRAGMENTS,
    PACKED_KEYS,
    SOURCE_PREFIX,
    _packed,
    key_seqs,
    key_text,
    pack_key,
    pack_seqs,
)
from neotoma_agent.transport.embedded._schema import MIGRATIONS, SCHEMA_VERSION

pytestmark = [pytest.mark.anyio]

#: the version before the keys were packed
BEFORE = MIGRATIONS.index(PACKED_KEYS)
DATA = TESTS / "data" / "v17_store"
_UUID = "01a250a7-b92e-7e0f-a10e-cafc0e880945"


def _key_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every key row, its key as its text (the row's value as stored beside it), its digest
    as the bytes version 24 keeps (``_key_digest``: the first of those an older file held)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT uid, substr(digest, 1, {DIGEST_BYTES}), key, source_id, observations, "
            "created_at FROM idempotency_keys"
        ).fetchall()
    return sorted((r[0], r[1], key_text(r[2]), r[3], key_seqs(r[4]), r[5]) for r in rows)


#: the index by source as the version before held it (the whole source)
_BY_SOURCE_BEFORE = "CREATE INDEX idempotency_keys_by_source ON idempotency_keys (source_id)"


def unpacked_copy(path: Path, to: Path) -> Path:
    """A copy of the (closed) file at ``path`` with every key and list of observations as
    its text and the index by source on the whole source, at the version before the step
    (opening it upgrades it)."""
    return copy_at_version(path, to, BEFORE, _unpack_keys)


def _unpack_keys(conn: sqlite3.Connection) -> None:
    conn.create_function("key_text", 1, key_text, deterministic=True)
    conn.create_function("seqs_json", 1, lambda v: json.dumps(key_seqs(v)).replace(" ", ""))
    conn.execute("UPDATE idempotency_keys SET key = key_text(key)")
    conn.execute("UPDATE idempotency_keys SET observations = seqs_json(observations)")
    conn.execute("DROP INDEX idempotency_keys_by_source")
    conn.execute(_BY_SOURCE_BEFORE)


# -- the codec -------------------------------------------------------------------------------

_HEX = "0123456789abcdef"
#: pieces of keys, near misses included: uppercase and short hex, UUIDs with a digit too
#: many or the wrong case, fragments cut short, characters beyond ASCII
_PIECES = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=_HEX, min_size=1, max_size=40),
    st.text(alphabet=_HEX.upper() + _HEX, min_size=7, max_size=20),
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.uuids().map(lambda u: str(u) + "0"),
    st.uuids().map(lambda u: str(u).replace("-", "")),
    st.sampled_from([*FRAGMENTS, "conversation", "-user", "assistant-", "é", "\x00", "\uffff"]),
)


@given(st.lists(_PIECES, max_size=8).map("".join))
@example(f"conversation-conv-0-{_UUID}-assistant-b1082d26b4b8f05d")
@example(f"conversation-{_UUID.upper()}-user-B1082D26B4B8F05D")
@example("abcdef0" + _UUID)  # a hex run reaching into a UUID
@example("0" * 600)  # a hex run longer than one token
@example("deadbeef\xff\xfe")
def test_a_packed_key_unpacks_to_exactly_its_text(key: str) -> None:
    packed = pack_key(key)
    assert key_text(packed) == key
    if isinstance(packed, bytes):
        assert len(packed) < len(key.encode())
    else:
        assert packed == key
    assert pack_key(packed) == packed  # a packed key stays as it is


def test_the_turn_protocols_keys_are_packed_token_by_token() -> None:
    """Each phase's key, with a UUID turn id and a short one, a revision, and ids that fold:
    a fragment, the UUID and the digest each packed."""
    for conversation, turn in (("conv-0", _UUID), ("peers-0004", "t52"), ("Chat 42", "T1")):
        for revision in (None, 3):
            keys = TurnKeys(conversation, turn, revision)
            for phase in ("user", "assistant", "abandoned", "recorded"):
                key = keys.idempotency_key(phase)
                packed = pack_key(key)
                assert isinstance(packed, bytes), key
                assert key_text(packed) == key
                # the digest's 16 digits in 10 bytes, the prefix and the phase in 2 each,
                # a UUID's 36 characters in 17 bytes
                saved = 6 + (len("conversation-") - 2) + len(phase) + 19 * (turn == _UUID)
                assert len(key) - len(packed) == saved, key


@given(
    st.lists(_PIECES, max_size=6).map("".join),
    st.sampled_from(["user", "assistant", "abandoned", "recorded"]),
    st.text(alphabet=_HEX, min_size=16, max_size=16),
)
@example("conversation-peers-0004-t52", "user", "b1082d26b4b8f05d")
@example("conversation-conv-user", "assistant", "0" * 16)  # "-user-" reaches the phase's "-"
@example("conversation-a-conversation", "user", "0" * 16)
@example(f"conversation-{_UUID[:23]}", "abandoned", "abcdefabcdefabcd")  # a UUID cut short
@example("", "recorded", "0" * 16)
def test_a_turns_key_packs_as_one_scan_of_its_whole_text(head: str, phase: str, hexes: str) -> None:
    """A key of a turn's shape is packed from its head's packing (memoised: the enter's and
    the close's share it), and that is byte for byte what one scan of the key gives."""
    key = f"{head}-{phase}-{hexes}"
    try:
        size = len(key.encode())
    except UnicodeEncodeError:
        return
    whole = _packed(key)
    assert pack_key(key) == (whole if whole is not None and len(whole) < size else key)


@given(st.lists(st.integers(-(2**63), 2**63 - 1)))
@example([-174, -173, 105])
@example([0, -1, 1, 63, -64, 64, -65, 2**63 - 1, -(2**63)])
def test_a_packed_list_of_observations_unpacks_to_exactly_its_seqs(seqs: list[int]) -> None:
    packed = pack_seqs(seqs)
    assert key_seqs(packed) == seqs
    assert key_seqs(json.dumps(seqs)) == seqs  # a list as a file before held it
    # a number of up to 6 bits takes a byte, of up to 13 bits two
    assert len(packed) <= sum(1 if -64 <= n < 64 else 2 if -8192 <= n < 8192 else 10 for n in seqs)


def test_a_near_miss_stays_text_where_packing_would_not_give_it_back() -> None:
    assert pack_key(_UUID.upper()) == _UUID.upper()
    assert pack_key("company-1") == "company-1"
    assert pack_key("abc") == "abc"
    assert pack_key("\ud800-0123456789abcdef") == "\ud800-0123456789abcdef"  # not storable
    assert key_text(pack_key(_UUID.upper() + "-user-")) == _UUID.upper() + "-user-"


# -- the store ----------------------------------------------------------------------------------


async def test_a_turns_keys_are_stored_packed_and_found_by_their_digest(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="deal")
        async with memory.turn("Where is the offsite?", turn_id=_UUID) as t:
            t.reply = "Lisbon."
        replayed = await store.store(
            [{"entity_type": "company", "name": "Acme Corp"}], idempotency_key=f"co-{_UUID}"
        )
        again = await store.store(
            [{"entity_type": "company", "name": "Acme Corp"}], idempotency_key=f"co-{_UUID}"
        )
    assert (replayed.replayed, again.replayed) == (False, True)
    with closing(sqlite3.connect(path)) as conn:
        stored = [r[0] for r in conn.execute("SELECT key FROM idempotency_keys")]
    keys = TurnKeys("deal", _UUID)
    expected = {keys.idempotency_key("user"), keys.idempotency_key("assistant"), f"co-{_UUID}"}
    assert all(isinstance(k, bytes) for k in stored)
    with closing(sqlite3.connect(path)) as conn:
        lists = [r[0] for r in conn.execute("SELECT observations FROM idempotency_keys")]
    assert all(isinstance(x, bytes) and key_seqs(x) for x in lists)
    assert {key_text(k) for k in stored} == expected
    assert sum(len(k) for k in stored) < sum(len(k) for k in expected) - 3 * 16


async def test_the_first_key_of_a_source_is_the_least_text_among_keys_of_one_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two keys store the same entities in the same millisecond: an observation's ``source``
    is the key first in text order (``a-...``, packed), not the one first as the rows
    hold them (a text row sorts before a blob)."""
    path = tmp_path / "store.db"
    first, second = "a-0123456789abcdef", "b"
    assert isinstance(pack_key(first), bytes)
    assert isinstance(pack_key(second), str)
    monkeypatch.setattr(_write, "now_iso", lambda: "2030-01-01T00:00:00.000Z")
    async with EmbeddedStore.open(path) as store:
        entities = [{"entity_type": "company", "name": "Acme Corp"}]
        stored = await store.store(entities, idempotency_key=second)
        await store.store(entities, idempotency_key=first)
        entity_id = stored.entities[0].entity_id
        page = await store.request("get_entity_observations", {"entity_id": entity_id})
    [observation] = page["observations"]
    assert observation["source"] == first


async def test_the_index_by_source_holds_a_prefix_and_a_shared_one_answers_right(
    tmp_path: Path,
) -> None:
    """The index by source holds each source's first bytes (and the row's user and
    digest); a source sharing them (a key row written by hand, older than the real one)
    is not taken for it: the observation's ``source`` is its own source's key."""
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        stored = await store.store(
            [{"entity_type": "company", "name": "Acme Corp"}], idempotency_key="acme-1"
        )
    entity_id = stored.entities[0].entity_id
    with closing(sqlite3.connect(path)) as conn:
        columns = list(conn.execute("PRAGMA index_xinfo(idempotency_keys_by_source)"))
        [(source, at)] = conn.execute("SELECT source_id, created_at FROM idempotency_keys")
        conn.execute(
            "INSERT INTO idempotency_keys VALUES (0, ?, 0, 'acme-0', ?, '[]', ?)",
            (digest("acme-0"), source[:SOURCE_PREFIX] + bytes(16 - SOURCE_PREFIX), at - 1),
        )
        conn.commit()
    # an expression (the prefix), then the table's key: its user, digest and slot
    assert [(c[1], c[2]) for c in columns] == [(-2, None), (0, "uid"), (1, "digest"), (2, "slot")]
    async with EmbeddedStore.open(path) as store:
        page = await store.request("get_entity_observations", {"entity_id": entity_id})
    assert [o["source"] for o in page["observations"]] == ["acme-1"]


def _company(key: str, name: str) -> dict[str, Any]:
    return {"entities": [{"entity_type": "company", "name": name}], "idempotency_key": key}


async def test_a_batch_tells_a_packed_keys_replay_from_a_mismatch(tmp_path: Path) -> None:
    """``replay_status`` finds packed keys by their digests, as a store does."""
    keys = [TurnKeys("c", _UUID).idempotency_key(p) for p in ("user", "assistant", "recorded")]
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        await store.store_many([_company(keys[0], "Acme"), _company(keys[1], "Globex")])
        statuses = await store.replay_status(
            [_company(keys[0], "Acme"), _company(keys[1], "Initech"), _company(keys[2], "Acme")]
        )
    assert statuses == [True, False, None]


async def test_a_purge_drops_the_packed_keys_of_what_it_erases(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        for conversation in ("gone", "kept"):
            async with NeotomaMemory(store, conversation_id=conversation).turn(
                "Hello there", turn_id=_UUID
            ) as t:
                t.reply = "Hi."
        forgotten = await NeotomaMemory(store, conversation_id="gone").forget()
    before = {r[2] for r in _key_rows(path)}
    stats = purge_forgotten(path, forgotten)
    after = {r[2] for r in _key_rows(path)}
    gone, kept = TurnKeys("gone", _UUID), TurnKeys("kept", _UUID)
    erased = {gone.idempotency_key("user"), gone.idempotency_key("assistant")}
    assert erased <= before - after
    assert {kept.idempotency_key("user"), kept.idempotency_key("assistant")} <= after
    assert stats.idempotency_keys == len(before - after)


async def test_the_release_befores_file_is_packed_and_answers_as_recorded(
    tmp_path: Path,
) -> None:
    """``tests/data/v17_store`` upgraded: every key packed where that is shorter (the turn
    protocol's), the rest as text, each found by the digest of its text, every list of
    observations packed, the same keys and lists; its recorded answers are compared by
    ``test_embedded_migration``."""
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "store.db", path)
    before = _key_rows(path)
    # (its restatements and closes as rows: ``_derived_restatement``, ``_close_row``)
    with rows_kept(), closes_kept():
        async with EmbeddedStore.open(path):
            pass
    assert _key_rows(path) == before
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        stored = conn.execute("SELECT digest, key FROM idempotency_keys").fetchall()
        lists = {r[0] for r in conn.execute("SELECT typeof(observations) FROM idempotency_keys")}
    assert lists == {"blob"}
    assert all(bytes(d) == digest(key_text(k)) for d, k in stored)
    packed = [key_text(k) for _, k in stored if isinstance(k, bytes)]
    assert packed
    assert all(k.startswith("conversation-") for k in packed)
    assert {k for _, k in stored if isinstance(k, str)} >= {"company-1", "company-1-again"}


async def test_an_upgrade_that_fails_midway_leaves_the_keys_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "store.db", path)
    index = "SELECT sql FROM sqlite_master WHERE name = 'idempotency_keys_by_source'"
    with closing(sqlite3.connect(path)) as conn:
        before = conn.execute("SELECT * FROM idempotency_keys ORDER BY digest").fetchall()
        assert conn.execute(index).fetchone() == (_BY_SOURCE_BEFORE,)

    def fail(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE idempotency_keys SET key = CAST(key AS BLOB)")
        raise OSError("the disk went away")

    monkeypatch.setitem(_schema._AFTER, PACKED_KEYS, fail)
    with pytest.raises(OSError, match="the disk went away"):
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT * FROM idempotency_keys ORDER BY digest").fetchall() == before
        assert conn.execute(index).fetchone() == (_BY_SOURCE_BEFORE,)
        assert conn.execute("PRAGMA user_version").fetchone()[0] < BEFORE + 1


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_with_keys_as_text(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns, stores, corrections, deletions, edges and forgotten
    users: every read each user has (observations' sources on the GET routes, replays,
    backups, the audit among them) answers the same on the file and on its copy with every
    key as its text at the version before, upgraded; the key rows hold the same keys; then
    the same writes on both."""
    tmp = tmp_path_factory.mktemp("keys")
    path = tmp / "packed.db"
    await write_steps(path, [("turn", 0, 0), ("store", 1, 3), *before], 0)
    old = unpacked_copy(path, tmp / "text.db")
    with closing(sqlite3.connect(old)) as conn:
        rows = conn.execute("SELECT key, observations FROM idempotency_keys").fetchall()
    assert all(isinstance(k, str) and isinstance(o, str) for k, o in rows)
    await same_on_both(path, old, after, rows=[_key_rows])
