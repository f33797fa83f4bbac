"""Forgetting a user (reversible) and erasing one (``purge_user``): every row of that user,
none of another's.

The erasure test plants a word of the user's own in its prompt, reply, tool arguments and
result, remembered fields and an orphan turn, then greps the file's bytes and its WAL for
it after ``purge_user``; the other user's reads answer byte for byte as before.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from users_support import seed_user

from neotoma_agent import (
    EmbeddedStore,
    ForgottenUser,
    InvalidUserIdError,
    NeotomaMemory,
    UserStore,
    purge_user,
)
from neotoma_agent.cli._backup import BackupStats, read_backup

pytestmark = pytest.mark.anyio

ERASED, KEPT = "user-Kw93q", "user-Pm27r"
ERASED_MARK, KEPT_MARK = "Verasedmark", "Wkeptmark"


async def _reads(view: UserStore) -> str:
    """What ``show``, ``stats`` and ``export`` read of a user, as JSON text."""
    summaries = await view.conversation_summaries()
    cids = [i.conversation_id for i in summaries.items]
    lines = [line async for line in read_backup(view, cids, everything=True, stats=BackupStats())]
    memory = NeotomaMemory(view, conversation_id="support")
    history = [(h.turn_id, h.user, h.reply, h.status) for h in await memory.history(limit=None)]
    entities = await view.query_entities(limit=100)
    return json.dumps(
        [repr(summaries), lines, history, repr(entities), repr(await view.search("mark"))]
    )


async def _content(view: UserStore) -> object:
    """What a user's memory holds (not when it last changed): its turns, its entities'
    fields, its search hits."""
    memory = NeotomaMemory(view, conversation_id="support")
    history = [(h.turn_id, h.user, h.reply, h.status) for h in await memory.history(limit=None)]
    entities = sorted(
        (e.entity_id, repr(e.snapshot)) for e in (await view.query_entities()).entities
    )
    hits = sorted(h.text for h in (await view.search("mark")).hits)
    return history, entities, hits


def _bytes(path: Path) -> bytes:
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


async def test_purge_user_erases_every_byte_of_the_user_and_nothing_of_another(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        await seed_user(store.for_user(ERASED), ERASED_MARK)
        await seed_user(store.for_user(KEPT), KEPT_MARK)
        await seed_user(store, "Tlocalmark")
        # an edge from the erased user's entity to another user's: the user's own write
        note = await NeotomaMemory(store.for_user(ERASED), conversation_id="x").remember(
            "note", title=f"{ERASED_MARK}nine"
        )
        kept_before = await _reads(store.for_user(KEPT))
        local_before = await _reads(store.for_user("00000000-0000-0000-0000-000000000000"))
        assert note
    assert ERASED_MARK.encode() in _bytes(path)

    stats = purge_user(path, ERASED)
    assert stats.entities > 0
    assert stats.observations > 0
    assert stats.idempotency_keys > 0

    data = _bytes(path).lower()  # idempotency keys hold ids folded to lower case
    assert ERASED_MARK.lower().encode() not in data
    assert ERASED.lower().encode() not in data
    assert KEPT_MARK.lower().encode() in data
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT user_id FROM users").fetchall() == [(KEPT,)]
    async with EmbeddedStore.open(path) as store:
        assert await _reads(store.for_user(KEPT)) == kept_before
        assert await _reads(store.for_user("00000000-0000-0000-0000-000000000000")) == local_before
        erased = store.for_user(ERASED)
        assert (await erased.query_entities(limit=100)).total == 0
        assert (await erased.conversation_summaries()).items == ()
        # the user may start again: a fresh, empty memory
        await seed_user(erased, "Unewmark")
        assert "Unewmark" in await _reads(erased)


async def test_purging_a_user_the_file_never_saw_erases_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        await seed_user(store.for_user(KEPT), KEPT_MARK)
        before = await _reads(store.for_user(KEPT))
    assert purge_user(path, "nobody").entities == 0
    with pytest.raises(InvalidUserIdError):
        purge_user(path, "bad\nid")
    async with EmbeddedStore.open(path) as store:
        assert await _reads(store.for_user(KEPT)) == before


async def test_forget_user_hides_everything_and_restore_brings_it_back(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        gone, kept = store.for_user(ERASED), store.for_user(KEPT)
        await seed_user(gone, ERASED_MARK)
        await seed_user(kept, KEPT_MARK)
        gone_before, kept_before = await _content(gone), await _reads(kept)
        assert ERASED_MARK in repr(gone_before)

        forgotten = await store.forget_user(ERASED)
        assert isinstance(forgotten, ForgottenUser)
        assert forgotten.user_id == ERASED
        assert len(forgotten.entity_ids) > 5
        assert ERASED_MARK not in await _reads(gone)
        assert (await gone.query_entities(limit=100)).total == 0
        assert await _reads(kept) == kept_before

        restored = await store.restore_user(forgotten)
        assert set(restored.entity_ids) == set(forgotten.entity_ids)
        assert await _content(gone) == gone_before
        assert await _reads(kept) == kept_before


async def test_forgetting_a_user_the_file_never_saw_writes_no_trace_of_its_id(
    tmp_path: Path,
) -> None:
    """A mistyped user id handed to ``forget_user`` or ``restore_user`` finds nothing and
    leaves nothing: the id is personal data, and no row of ``users`` is made for it."""
    path = tmp_path / "memory.db"
    typo = "user-Typo7xq"
    async with EmbeddedStore.open(path) as store:
        await seed_user(store.for_user(KEPT), KEPT_MARK)
        before = await _reads(store.for_user(KEPT))
        assert (await store.forget_user(typo)).entity_ids == ()
        assert (await store.restore_user(typo)).entity_ids == ()
        assert (await store.restore_user(ForgottenUser(typo, ()))).entity_ids == ()
        assert await _reads(store.for_user(KEPT)) == before
    with sqlite3.connect(path) as conn:
        users = [r[0] for r in conn.execute("SELECT user_id FROM users")]
    assert users == [KEPT]
    assert typo.encode() not in _bytes(path)
