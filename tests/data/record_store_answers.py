"""Record what the code on ``PYTHONPATH`` answers on a store file, for the migration tests.

    PYTHONPATH=/path/to/that/release python tests/data/record_store_answers.py v1_store
    PYTHONPATH=/path/to/main python tests/data/record_store_answers.py v2_store --build
    PYTHONPATH=/path/to/v3 python tests/data/record_store_answers.py v3_store --build
    PYTHONPATH=/path/to/v4 python tests/data/record_store_answers.py v4_store --build
    PYTHONPATH=/path/to/v5 python tests/data/record_store_answers.py v5_store --build
    PYTHONPATH=/path/to/v6 python tests/data/record_store_answers.py v6_store --build
    PYTHONPATH=/path/to/v7 python tests/data/record_store_answers.py v7_store --build
    PYTHONPATH=/path/to/v8 python tests/data/record_store_answers.py v8_store --build
    PYTHONPATH=/path/to/v9 python tests/data/record_store_answers.py v9_store --build
    PYTHONPATH=/path/to/v10 python tests/data/record_store_answers.py v10_store --build
    PYTHONPATH=/path/to/v11 python tests/data/record_store_answers.py v11_store --build
    PYTHONPATH=/path/to/v12 python tests/data/record_store_answers.py v12_store --build
    PYTHONPATH=/path/to/v14 python tests/data/record_store_answers.py v14_store --build
    PYTHONPATH=/path/to/v15 python tests/data/record_store_answers.py v15_store --build
    PYTHONPATH=/path/to/v17 python tests/data/record_store_answers.py v17_store --build
    PYTHONPATH=/path/to/v20 python tests/data/record_store_answers.py v20_store --build
    PYTHONPATH=/path/to/v23 python tests/data/record_store_answers.py v23_store --build
    PYTHONPATH=/path/to/v26 python tests/data/record_store_answers.py v26_store --build
    PYTHONPATH=/path/to/v28 python tests/data/record_store_answers.py v28_store --build

Reads ``DIR/store.db`` (a copy: the file itself is never opened for writing) and writes
``DIR/answers.json``. With ``--build``, first writes ``DIR/store.db``: the version-1 file
opened (so migrated) by that code, plus two turns of a conversation and a second key
storing the same entities as an earlier one (so one source has two keys); from version 7
on, also a turn and a store of another user's (``for_user``), which the unscoped reads
recorded here must not see. From version 14 on, also the full-text searches of each
user (``searches``: phrases, a conversation's messages, a limit, another user's view).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import anyio

from neotoma_agent import EmbeddedStore, NeotomaMemory

HERE = Path(__file__).parent
LOOKUPS = ("Acme Corp", "acme.test", "sprocket", "ent_af939bedafbd1838b259772a")
REPLAYS = {
    "company-1": [{"entity_type": "company", "name": "Acme Corp", "domain": "acme.example"}],
    "widget-1": [{"entity_type": "widget", "name": "Sprocket", "colour": None, "size": 1}],
}
#: the full-text searches recorded (words, phrases, none that matches, none that is a word)
SEARCHES = ("acme", '"acme corp"', "reply", "sprocket", "what about", '"about acme"', "zz", "**")
#: the users whose searches are recorded ("": the unscoped store)
SEARCHERS = ("", "other@example.test")


async def _build(path: Path) -> None:
    shutil.copyfile(HERE / "v1_store" / "store.db", path)
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-v2", platform="fixture")
        for n, question in enumerate(("What about Acme Corp?", "And Sprocket?"), 1):
            async with memory.turn(question, turn_id=f"v2-turn-{n}") as t:
                t.reply += f"Reply {n}."
        await store.store(REPLAYS["company-1"], idempotency_key="company-1-again")
        if hasattr(store, "for_user"):  # version 7: rows of another user's
            other = store.for_user("other@example.test")
            theirs = NeotomaMemory(other, conversation_id="chat-v2", platform="fixture")
            async with theirs.turn("What about Acme Corp?", turn_id="v2-turn-1") as t:
                t.reply += "Their reply."
            await other.store(REPLAYS["company-1"], idempotency_key="company-1")


async def _searches(store: EmbeddedStore) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for user in SEARCHERS:
        view = store.for_user(user) if user else store
        for q in SEARCHES:
            for extra in ({}, {"limit": 1}, {"conversation_id": "chat-v2"}):
                key = json.dumps([user, q, extra])
                out[key] = await view.request("text_search", {"q": q, **extra})
    return out


async def _record(path: Path, searches: bool = True) -> dict[str, Any]:
    """Every read recorded; ``searches``: the searches too (a fixture before version 14's
    did not record them)."""
    with sqlite3.connect(path) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(entities)")]
        mine = "WHERE uid = 0" if "uid" in columns else ""  # the unscoped store's own
        # the id as text whether the row holds it so or packed (schema 12: 12 bytes)
        text = "CASE typeof(id) WHEN 'blob' THEN 'ent_' || lower(hex(id)) ELSE id END"
        rows = conn.execute(
            f"SELECT {text}, entity_type FROM entities {mine} ORDER BY id"
        ).fetchall()
    ids = [str(r[0]) for r in rows]
    conversations = [str(r[0]) for r in rows if r[1] == "conversation"]
    out: dict[str, Any] = {}
    async with EmbeddedStore.open(path) as store:

        async def each(action: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
            return {i: await store.request(action, {"entity_id": i, **(extra or {})}) for i in ids}

        out["snapshots"] = await each("get_entity_snapshot")
        out["observations"] = await each("list_observations")
        out["query"] = await store.request("entities/query", {"limit": 500})
        out["lookups"] = {
            i: await store.request("retrieve_entity_by_identifier", {"identifier": i})
            for i in LOOKUPS
        }
        out["replays"] = {
            key: await store.request("store", {"entities": body, "idempotency_key": key})
            for key, body in REPLAYS.items()
        }
        out["get_entity"] = await each("get_entity")
        out["get_observations"] = await each("get_entity_observations")
        out["get_relationships"] = await each("get_entity_relationships")
        out["sorted_query"] = await store.request(
            "entities/query",
            {
                "entity_type": "company",
                "sort_by": "snapshot.name",
                "sort_order": "desc",
                "snapshot_filters": {"name": {"op": "contains", "value": "a"}},
            },
        )
        out["recent_conversations"] = await store.get_route("/recent_conversations", {})
        out["conversations"] = {
            c: await store.get_route(f"/recent_conversations/{c}", {"limit": 10})
            for c in conversations
        }
        if searches:
            out["searches"] = await _searches(store)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--build", action="store_true")
    args = parser.parse_args()
    target = HERE / args.dir
    target.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.build:
            built = Path(tmp) / "built.db"
            await _build(built)
            with sqlite3.connect(built) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                conn.execute("PRAGMA journal_mode = DELETE")
            shutil.copyfile(built, target / "store.db")
        copy = Path(tmp) / "store.db"
        shutil.copyfile(target / "store.db", copy)
        answers = await _record(copy)
    text = json.dumps(answers, indent=1, sort_keys=False, ensure_ascii=False)
    (target / "answers.json").write_text(text + "\n")


if __name__ == "__main__":
    anyio.run(main)
