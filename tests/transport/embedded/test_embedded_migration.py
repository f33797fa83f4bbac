"""A store file written by the first release opens, answers as it did, and is rewritten.

``data/v1_store/store.db`` was written by the version-1 code (turns, a company with a
correction and a merged array, a widget with a cleared field); ``answers.json`` holds what
that code answered then.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from paths_support import TESTS
from recorder_support import recorder

from neotoma_agent.exceptions import IdempotencyMismatchError
from neotoma_agent.transport.embedded import EmbeddedStore, _schema
from neotoma_agent.transport.embedded._key_digest import DIGEST_BYTES, digest
from neotoma_agent.transport.embedded._key_rows import key_seqs, key_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

DATA = TESTS / "data" / "v1_store"
ANSWERS: dict[str, Any] = json.loads((DATA / "answers.json").read_text())


@pytest.fixture
def v1_file(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "store.db", path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    return path


async def test_a_version_1_file_answers_as_it_did(v1_file: Path) -> None:
    async with EmbeddedStore.open(v1_file) as store:
        for entity_id, answer in ANSWERS["snapshots"].items():
            got = await store.request("get_entity_snapshot", {"entity_id": entity_id})
            assert got == answer
            # Same keys in the same order, as the provenance map is rebuilt from the winners.
            assert list(got["provenance"]) == list(answer["provenance"])
        for entity_id, answer in ANSWERS["observations"].items():
            assert await store.request("list_observations", {"entity_id": entity_id}) == answer
        assert await store.request("entities/query", {"limit": 500}) == ANSWERS["query"]
        for identifier, answer in ANSWERS["lookups"].items():
            body = {"identifier": identifier}
            assert await store.request("retrieve_entity_by_identifier", body) == answer


async def test_a_version_1_key_replays_and_a_changed_body_is_refused(v1_file: Path) -> None:
    async with EmbeddedStore.open(v1_file) as store:
        for key, answer in ANSWERS["replays"].items():
            entities = json.loads(json.dumps(answer_entities(key)))
            got = await store.request("store", {"entities": entities, "idempotency_key": key})
            assert got == answer
            assert got["replayed"] is True
        with pytest.raises(Exception, match="idempotency"):
            await store.store(
                [{"entity_type": "company", "name": "Globex"}], idempotency_key="company-1"
            )


def answer_entities(key: str) -> list[dict[str, Any]]:
    return {
        "company-1": [{"entity_type": "company", "name": "Acme Corp", "domain": "acme.example"}],
        "widget-1": [{"entity_type": "widget", "name": "Sprocket", "colour": None, "size": 1}],
    }[key]


async def test_opening_a_version_1_file_rewrites_it_in_the_compact_format(v1_file: Path) -> None:
    async with EmbeddedStore.open(v1_file):
        pass
    with sqlite3.connect(v1_file) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        docs = [json.loads(r[0]) for r in conn.execute("SELECT snapshot FROM entities")]
        assert docs
        assert all("o" in d and "top" not in d for d in docs)
        types = conn.execute(
            "SELECT DISTINCT typeof(id), typeof(source_id), typeof(observed_at) FROM observations"
        ).fetchall()
        assert set(types) <= {("blob", "blob", "integer"), ("blob", "null", "integer")}
        times = conn.execute(
            "SELECT DISTINCT typeof(created_at), typeof(updated_at) FROM entities"
        ).fetchall()
        assert times == [("integer", "integer")]
        keys = conn.execute("SELECT typeof(source_id), observations FROM idempotency_keys")
        for kind, written in keys:
            assert kind == "blob"
            assert isinstance(written, bytes)  # packed (_key_rows)
            assert all(isinstance(seq, int) for seq in key_seqs(written))


@pytest.mark.parametrize(
    "fixture",
    [
        "v1_store",
        "v2_store",
        "v3_store",
        "v4_store",
        "v5_store",
        "v6_store",
        "v7_store",
        "v8_store",
        "v9_store",
        "v10_store",
        "v11_store",
        "v12_store",
        "v13_store",
        "v14_store",
        "v15_store",
        "v17_store",
        "v20_store",
        "v23_store",
        "v26_store",
        "v28_store",
    ],
)
async def test_an_older_file_answers_every_read_as_the_code_that_recorded_it(
    fixture: str, tmp_path: Path
) -> None:
    """Version 1 (the first release) and version 2 (written by the release before the
    compact rows: a conversation index, turns, one source under two keys), recorded by the
    release before the compact rows; version 3 (the same content, written and recorded by
    the compact-rows release), version 4 (the same, by the shared-fields release) and
    version 5 (the same, by the summaries release, main at 05f47bf), version 6 (the same,
    by the search-index release, main at 484633c), version 7 (the same plus another user's
    turn and key, by the users release, main at dac9c07: the unscoped reads must not see
    them), version 8 (the same, by the compact format's first steps, main at ea5ef87),
    version 9 (the same, by the bookkeeping names' contentless index, main at 8fbb155),
    version 10 (the same, by the derived PART_OF edges, main at 01fb980), version 11 (the
    same, by the first observation in its entity row, main at f3f2306), version 12 (the
    same, by the packed entity ids, main at 642dc04), version 14 (the same, by the type
    codes, main at 080c616; its searches: ``test_search_rowid``), version 15 (the same, by
    the search index keyed by rowid, main at 518799f), version 17 (the same, by one
    bookkeeping-names document a turn, main at a1090f1), version 20 (the same, by the
    entity row's derivable columns, main at b7d8fd7), version 23 (the same, by the turn
    record's reserved room, main at b9b45b6), version 26 (the same, by the restatement's
    mark, main at 96376d7), version 28 (the same, by the type index's
    prefix and the derived restatements, main at 713f2dc): snapshots,
    observations, queries (sorted, filtered), lookups, replays, the GET routes (an
    observation's ``source``), recent conversations."""
    recorded = json.loads((DATA.parent / fixture / "answers.json").read_text())
    recorded.pop("searches", None)
    path = tmp_path / "store.db"
    shutil.copyfile(DATA.parent / fixture / "store.db", path)
    got = await recorder()._record(path, searches=False)
    assert list(got) == list(recorded)
    for category, answer in recorded.items():
        assert got[category] == answer, category
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_a_version_7_files_keys_are_found_by_digest_for_each_user(tmp_path: Path) -> None:
    """The users release's file: each user's keys replay for that user alone after the
    upgrade, and the key's text is no longer part of any index entry (only its digest)."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v7_store" / "store.db", path)
    company = answer_entities("company-1")
    async with EmbeddedStore.open(path) as store:
        mine = await store.store(company, idempotency_key="company-1")
        theirs = await store.for_user("other@example.test").store(
            company, idempotency_key="company-1"
        )
        fresh = await store.for_user("third@example.test").store(
            [{"entity_type": "company", "name": "Globex"}], idempotency_key="company-1"
        )
        with pytest.raises(IdempotencyMismatchError):
            await store.store(
                [{"entity_type": "company", "name": "Globex"}], idempotency_key="company-1"
            )
    assert (mine.replayed, theirs.replayed, fresh.replayed) == (True, True, False)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT uid, digest, key FROM idempotency_keys").fetchall()
        # the key of the table's B-tree, and every column of an index by source's entries
        indexed = {
            r[2] for r in conn.execute("PRAGMA index_info(sqlite_autoindex_idempotency_keys_1)")
        }
        indexed |= {r[2] for r in conn.execute("PRAGMA index_xinfo(idempotency_keys_by_source)")}
    assert len(rows) == 18  # the file's 17 keys and the third user's (replays add none)
    assert all(bytes(d) == digest(key_text(k)) and len(d) == DIGEST_BYTES for _, d, k in rows)
    assert "key" not in indexed
    assert {"uid", "digest", "slot"} <= indexed  # (and the source's prefix: test_key_rows)


async def test_an_upgrade_that_fails_midway_leaves_the_older_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade to version 8 is one transaction: a failure after its script dropped and
    rebuilt tables (here, in the step that writes the digests and builds the search index)
    leaves the version-7 file whole, and the next open upgrades it and answers as recorded."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v7_store" / "store.db", path)

    def fail(conn: sqlite3.Connection) -> None:
        raise OSError("the disk went away")

    monkeypatch.setitem(_schema._AFTER, _schema._COMPACT_FORMAT, fail)
    with pytest.raises(OSError, match="the disk went away"):
        async with EmbeddedStore.open(path):
            pass
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
        columns = {r[1] for r in conn.execute("PRAGMA table_info(idempotency_keys)")}
        assert "digest" not in columns
        assert conn.execute("SELECT count(*) FROM search_text").fetchone()[0] > 0
        assert conn.execute("SELECT count(*) FROM idempotency_keys").fetchone()[0] == 17
    monkeypatch.undo()
    recorded = json.loads((TESTS / "data" / "v7_store" / "answers.json").read_text())
    assert await recorder()._record(path, searches=False) == recorded
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
