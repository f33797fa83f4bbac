"""The entity type as its word code (schema version 14): the entity row stores the code
(``type_code``; ``entity_type`` is computed from it), the type index holds (user, code,
id), a read by type seeks it by the code, and every read answers, and every write
writes, as on the same file as version 13 held it (the type as text in the row and the
index), upgraded."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

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
from type_codes_support import type_entries, type_index, untyped_copy

from neotoma_agent import EmbeddedStore
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._words import encode_word

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: a type no word codes: the index holds its text
_INVOICE = {"entity_type": "invoice", "name": "Invoice 7", "amount": "12"}
_TYPES = (
    "conversation",
    "conversation_message",
    "conversation_turn",
    "company",
    "person",
    "tool_invocation",
    "invoice",
)


async def _typed_reads(path: Path) -> dict[str, str]:
    """The reads by type each user has: a list of each type (and of several), a page by
    cursor, a lookup by name and by an unindexed field within a type."""
    out: dict[str, str] = {}
    async with EmbeddedStore.open(path) as store:
        for user in USERS:
            view = view_of(store, user)
            got = [
                await view.request("entities/query", {"entity_type": t, "limit": 100})
                for t in _TYPES
            ]
            got.append(await view.request("entities/query", {"entity_types": list(_TYPES[:3])}))
            got.append(
                await view.request("entities/query", {"entity_type": "conversation", "limit": 1})
            )
            for etype in ("company", "invoice"):
                for body in ({"identifier": "Acme"}, {"identifier": "12", "by": "amount"}):
                    got.append(
                        await view.request(
                            "retrieve_entity_by_identifier", {**body, "entity_type": etype}
                        )
                    )
            out[user] = repr(got)
    return out


async def _with_invoices(path: Path) -> None:
    async with EmbeddedStore.open(path) as store:
        for user in USERS:
            await view_of(store, user).store([_INVOICE], idempotency_key="invoice-7")


async def test_the_type_index_holds_each_type_as_its_code(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 3), ("store", 0, 0)], 0)
    await _with_invoices(path)
    # (then the id's first 4 bytes, an expression: ``_type_prefix``)
    assert [name for name, key in type_index(path) if key] == ["uid", "type_code", None]
    held = {entry[1] for entry in type_entries(path)}
    assert held == {encode_word(t) for t in _TYPES}
    # the types no word codes, as their text
    assert {code for code in held if not isinstance(code, int)} == {"invoice", "tool_invocation"}
    with closing(sqlite3.connect(path)) as conn:
        # the row stores the code; entity_type is computed from it (hidden 2: virtual)
        columns = {r[1]: r[6] for r in conn.execute("PRAGMA table_xinfo(entities)")}
        assert (columns["type_code"], columns["entity_type"]) == (0, 2)
        stored = {r[0] for r in conn.execute("SELECT type_code FROM entities")}
        assert stored == held
        rows = conn.execute(
            f"SELECT {entity_text('id')}, uid, entity_type FROM entities"
        ).fetchall()
    async with EmbeddedStore.open(path) as store:
        for uid, user in enumerate(USERS):  # the local dev user is uid 0, alice 1
            for etype in _TYPES:
                found = await view_of(store, user).request(
                    "entities/query", {"entity_type": etype, "limit": 100}
                )
                listed = {e["entity_id"] for e in found["entities"]}
                assert listed == {r[0] for r in rows if r[1:] == (uid, etype)}, etype


async def test_a_version_13_file_holds_codes_and_answers_as_recorded(tmp_path: Path) -> None:
    """The file the release before wrote (``tests/data/v13_store``): after the upgrade its
    type index holds codes, every entity once, and it is written on as a file this release
    wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v13_store" / "store.db", path)
    before = type_entries(path)
    assert all(isinstance(entry[1], str) for entry in before)
    await turn_on_recorded(path)
    after = type_entries(path)
    assert len(after) > len(before)
    assert {entry[1] for entry in after} <= {encode_word(str(e[1])) for e in before}
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_version_13_file(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included, and every read by type) answers the same on the file
    and on its copy as version 13 held it, upgraded; then the same writes on both write the
    same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("types")
    path = tmp / "coded.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    await _with_invoices(path)
    old = untyped_copy(path, tmp / "v13.db")
    await same_on_both(path, old, after, reads=_typed, rows=[type_entries])


async def _typed(path: Path) -> dict[str, str]:
    return {f"typed {k}": v for k, v in (await _typed_reads(path)).items()}
