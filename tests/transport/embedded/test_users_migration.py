"""A store file written before users (by 0.2, schema 4, and by 0.3, schema 6) opens as
the local dev user's: every row stays the unscoped store's, with its ids; a new user
starts empty beside it, and erasing that user leaves the old rows answering as recorded.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from paths_support import TESTS
from recorder_support import recorder

from neotoma_agent import EmbeddedStore, NeotomaMemory, purge_user
from neotoma_agent._neotoma.identity import entity_id_for

pytestmark = pytest.mark.anyio

DATA = TESTS / "data"


@pytest.mark.one_backend
@pytest.mark.parametrize("fixture", ["v4_store", "v6_store"])
async def test_an_old_file_is_the_local_users_and_a_new_user_starts_empty(
    fixture: str, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / fixture / "store.db", path)
    recorded = json.loads((DATA / fixture / "answers.json").read_text())
    acme = entity_id_for("company", "Acme Corp")
    async with EmbeddedStore.open(path) as store:
        assert (await store.get_entity_snapshot(acme)).entity_type == "company"
        alice = store.for_user("alice")
        assert (await alice.query_entities(limit=100)).total == 0
        assert (await alice.conversation_summaries()).items == ()
        assert (await alice.retrieve_entity_by_identifier("Acme Corp")).entities == ()
        assert (await alice.search("Acme")).hits == ()
        mine = await NeotomaMemory(alice, conversation_id="chat-v2").remember(
            "company", name="Acme Corp"
        )
        assert mine == entity_id_for("company", "Acme Corp", "alice") != acme
        async with NeotomaMemory(alice, conversation_id="chat-v2").turn("hello") as t:
            t.reply = "hi"
    purge_user(path, "alice")
    got = await recorder()._record(path)
    for category, answer in recorded.items():
        assert got[category] == answer, category
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM users").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM entities WHERE uid != 0").fetchone() == (0,)
