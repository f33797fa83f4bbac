"""The embedded store's per-conversation summary (``GET /conversation_summaries``).

What matters: the counts the store keeps as turns are stored are the counts a reader gets by
reading every turn, through every way a turn's state changes (enter, close, abandon, an
orphan, an audit's repair, forget, restore, purge); a store file of the previous format gets
the same rows when it opens; the list pages by keyset (ties, deep pages, a bad cursor); a
refused store moves nothing.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent._neotoma.forget import DELETION_PRIORITY
from neotoma_agent._recall.history import read_conversation
from neotoma_agent._records.keys import turn_keys
from neotoma_agent._records.payloads import ConversationSettings, user_payload
from neotoma_agent.exceptions import NeotomaError
from neotoma_agent.qa import audit
from neotoma_agent.transport.embedded._purge import purge_forgotten
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


async def _recount(store: EmbeddedStore, conversation_id: str) -> dict[str, Any]:
    """What reading the whole conversation counts (the summary must agree)."""
    stored = await read_conversation(store, conversation_id)
    counts = Counter(t.status for t in stored.turns)
    return {
        "turns": len(stored.turns),
        "completed": counts["completed"],
        "abandoned": counts["abandoned"],
        "open": counts["open"],
    }


async def _summaries(store: EmbeddedStore) -> dict[str, dict[str, Any]]:
    page = await store.conversation_summaries(limit=100)
    assert page.next is None
    return {
        i.conversation_id: {
            "turns": i.turns,
            "completed": i.completed,
            "abandoned": i.abandoned,
            "open": i.open,
        }
        for i in page.items
    }


async def _orphan(store: EmbeddedStore, conversation_id: str, turn_id: str) -> None:
    # The enter store alone: what a crash between a turn's two stores leaves.
    conv = ConversationSettings(platform="t")
    p = user_payload(conv, turn_keys(conversation_id, turn_id), "never answered")
    await store.store(p.entities, idempotency_key=p.idempotency_key, relationships=p.relationships)


async def _abandon(memory: NeotomaMemory) -> None:
    async def turn() -> None:
        async with memory.turn("and then?") as t:
            t.reply = "Half a rep"
            raise RuntimeError("model went away")

    with pytest.raises(RuntimeError):
        await turn()


async def test_the_kept_counts_are_the_counts_of_every_turn_through_each_change(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        a = NeotomaMemory(store, conversation_id="a", platform="helpdesk")
        b = NeotomaMemory(store, conversation_id="b", platform="cli")
        for n in range(3):
            await a.record_turn(f"q{n}", f"r{n}", turn_id=f"t{n}", retrieve=False)
        await _abandon(a)
        await _orphan(store, "a", "lost")
        await b.record_turn("hello", "hi", turn_id="t0", retrieve=False)
        expected = {"a": await _recount(store, "a"), "b": await _recount(store, "b")}
        assert expected["a"] == {"turns": 5, "completed": 3, "abandoned": 1, "open": 1}
        assert await _summaries(store) == expected

        # The audit's repair closes the orphan as abandoned: the counts follow.
        report = await audit(store, repair=True, min_age=0)
        assert report.to_json()["findings"]
        expected["a"] = await _recount(store, "a")
        assert expected["a"] == {"turns": 5, "completed": 3, "abandoned": 2, "open": 0}
        assert await _summaries(store) == expected

        # One turn record deleted on its own (Neotoma's /delete_entity observation): it
        # counts nowhere; undeleted, it counts again.
        record = next(t.record for t in (await read_conversation(store, "a")).turns if t.record)
        status = record.snapshot["status"]
        for flag, step in ((True, -1), (False, 0)):
            await store.store(
                [
                    {
                        "entity_type": "conversation_turn",
                        "target_id": record.entity_id,
                        "_deleted": flag,
                    }
                ],
                idempotency_key=f"delete-record-{flag}",
                source_priority=DELETION_PRIORITY,
            )
            got = (await _summaries(store))["a"]
            assert (got["turns"], got[status]) == (
                expected["a"]["turns"] + step,
                expected["a"][status] + step,
            )

        # Forget: gone from the list; restore: back, with the same counts.
        forgotten = await a.forget()
        assert list(await _summaries(store)) == ["b"]
        assert (await store.conversation_summaries()).total == 1
        await a.restore(forgotten)
        assert await _summaries(store) == expected
        [row] = [i for i in (await store.conversation_summaries()).items if i.platform == "cli"]
        assert (row.conversation_id, row.title) == ("b", None)
        forgotten = await b.forget()
    # Purge erases the forgotten conversation's row too.
    purge_forgotten(path, forgotten)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT conversation_id FROM conversation_summaries").fetchall()
    assert rows == [("a",)]


async def test_a_refused_store_moves_no_count(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="a", platform="t")
        await memory.record_turn("q", "r", turn_id="t0", retrieve=False)
        before = await _summaries(store)
        conv = ConversationSettings(platform="t")
        p = user_payload(conv, turn_keys("a", "t1"), "q1")
        # A valid turn plus an element no identity resolves: the whole store is refused.
        with pytest.raises(NeotomaError):
            await store.store(
                [*p.entities, {"entity_type": "company"}],
                idempotency_key="refused",
                relationships=p.relationships,
            )
        assert await _summaries(store) == before


async def test_the_list_pages_by_keyset_newest_first_ties_by_id(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        for n in range(7):
            memory = NeotomaMemory(store, conversation_id=f"c{n}", platform="t")
            await memory.record_turn("q", "r", turn_id="t0", retrieve=False)
        # Seven conversations, some in the same millisecond: every one exactly once.
        seen, after, pages = [], None, 0
        while True:
            page = await store.conversation_summaries(limit=3, after=after)
            assert page.total == 7
            seen += [(i.last_activity, i.conversation_id) for i in page.items]
            pages += 1
            if page.next is None:
                break
            after = page.next
        assert pages == 3
        assert seen == sorted(seen, reverse=True)
        assert sorted(c for _, c in seen) == [f"c{n}" for n in range(7)]
        with pytest.raises(NeotomaError):
            await store.conversation_summaries(after="not a cursor")
        with pytest.raises(NeotomaError):
            await store.conversation_summaries(limit=101)


async def test_the_list_reads_an_index_not_the_table(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path):
        pass
    with sqlite3.connect(path) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT entity_id FROM conversation_summaries WHERE uid = 0 "
            "AND live = 1 "
            "AND (last_activity, conversation_id) < (?, ?) "
            "ORDER BY last_activity DESC, conversation_id DESC LIMIT 26",
            (0, ""),
        ).fetchall()
    [(*_, detail)] = plan
    assert "USING INDEX conversation_summaries_by_activity" in detail
    assert "TEMP B-TREE" not in detail


async def test_a_version_4_file_gets_the_rows_its_turns_give(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v4_store" / "store.db", path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
    async with EmbeddedStore.open(path) as store:
        page = await store.conversation_summaries()
        listed = await store.query_entities(entity_type="conversation")
        assert page.total == len(page.items) == listed.total >= 2
        for item in page.items:
            counts = {
                "turns": item.turns,
                "completed": item.completed,
                "abandoned": item.abandoned,
                "open": item.open,
            }
            assert counts == await _recount(store, item.conversation_id), item
            snapshot = await store.get_entity_snapshot(item.entity_id)
            assert item.last_activity == snapshot.last_observation_at
        chat = next(i for i in page.items if i.conversation_id == "chat-v2")
        assert (chat.platform, chat.turns, chat.completed) == ("fixture", 2, 2)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
