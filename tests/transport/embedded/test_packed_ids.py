"""Entity ids packed in their rows (schema version 12): an entity row, its unique index and
the type index hold its id as 12 bytes, and every read answers, and every write writes, as
on the same file as version 11 held it (each id its text), upgraded."""

from __future__ import annotations

import shutil
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
from packed_ids_support import entity_rows, id_types, unpacked_copy
from paths_support import TESTS
from users_support import seed_user

from neotoma_agent import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


async def test_an_entity_row_and_its_indexes_hold_its_id_as_12_bytes(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        for user in USERS:
            await seed_user(view_of(store, user), "Xmark")
    assert id_types(path) == {("blob", 12)}
    unpacked = unpacked_copy(path, tmp_path / "text.db")
    assert id_types(unpacked) == {("text", 28)}
    async with EmbeddedStore.open(unpacked):
        pass
    assert id_types(unpacked) == {("blob", 12)}
    assert entity_rows(unpacked) == entity_rows(path)


async def test_a_version_11_file_is_packed_and_answers_as_recorded(tmp_path: Path) -> None:
    """The file the release before wrote (``tests/data/v11_store``): after the upgrade its
    rows hold packed ids, and it is written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v11_store" / "store.db", path)
    assert id_types(path) == {("text", 28)}
    await turn_on_recorded(path)
    assert id_types(path) == {("blob", 12)}


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_version_11_file(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) answers the same on the file and on its copy as
    version 11 held it, upgraded; then the same writes on both write the same rows and
    answer the same."""
    tmp = tmp_path_factory.mktemp("packed")
    path = tmp / "packed.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    await same_on_both(path, unpacked_copy(path, tmp / "text.db"), after)
