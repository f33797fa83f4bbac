"""Many concurrent callers on one EmbeddedStore, and the bounded cost of a store.

No timings are asserted (a benchmark measures speed). The work a store does is checked
structurally instead: the SQL statements it runs, traced on the store's own connection,
and the size of the incremental snapshot state it keeps.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from part_of_support import clock

from neotoma_agent.exceptions import ValidationError
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.embedded._rows import encode_entity

pytestmark = pytest.mark.anyio


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(db_path) as s:
        yield s


def turn(conversation: str, n: int) -> dict[str, Any]:
    """The arguments of one turn-shaped store: conversation, message, PART_OF."""
    return {
        "entities": [
            {"entity_type": "conversation", "conversation_id": conversation,
             "title": f"Conversation {conversation}"},
            {"entity_type": "conversation_message", "role": "user", "sender_kind": "user",
             "content": f"message {n} of {conversation}", "turn_key": f"{conversation}:{n}"},
        ],
        "relationships": [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
        "idempotency_key": f"conversation-{conversation}-{n}-user-turn",
    }  # fmt: skip


async def test_fifty_concurrent_tasks_of_twenty_stores_each_are_all_visible(
    store: EmbeddedStore,
) -> None:
    stored: dict[str, list[str]] = {}

    async def task(t: int) -> None:
        ids = stored.setdefault(f"chat-{t}", [])
        for n in range(20):
            result = await store.store(**turn(f"chat-{t}", n))
            assert not result.replayed
            ids.append(result.entity_id(1))

    async with anyio.create_task_group() as tg:
        for t in range(50):
            tg.start_soon(task, t)

    messages = await store.query_entities(entity_type="conversation_message", limit=1)
    assert messages.total == 1000
    assert (await store.query_entities(entity_type="conversation")).total == 50
    all_ids = {i for ids in stored.values() for i in ids}
    assert len(all_ids) == 1000
    for conversation, ids in stored.items():
        hit = await store.retrieve_entity_by_identifier(f"conversation:{conversation}")
        conv_id = next(
            e.id for e in hit.entities if e.canonical_name == f"conversation:{conversation}"
        )
        related = await store.retrieve_related_entities(
            conv_id, relationship_types=["PART_OF"], direction="inbound"
        )
        assert {e.id for e in related.entities} == set(ids)
        assert (await store.get_entity_snapshot(conv_id)).observation_count == 20


async def test_concurrent_readers_see_a_consistent_growing_store(store: EmbeddedStore) -> None:
    writers_done = anyio.Event()
    reads = 0

    async def writer(w: int) -> None:
        for n in range(20):
            await store.store(**turn(f"w{w}", n))

    async def writers() -> None:
        async with anyio.create_task_group() as tg:
            for w in range(10):
                tg.start_soon(writer, w)
        writers_done.set()

    async def reader(r: int) -> None:
        nonlocal reads
        last_total = 0
        while not writers_done.is_set():
            page = await store.query_entities(entity_type="conversation_message", limit=500)
            assert page.total >= last_total
            assert len(page.entities) == page.total  # a page is one consistent read
            last_total = page.total
            hit = await store.retrieve_entity_by_identifier(f"w{r}:")
            assert all(e.entity_type == "conversation_message" for e in hit.entities)
            reads += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(writers)
        for r in range(5):
            tg.start_soon(reader, r)

    assert reads >= 5
    assert (await store.query_entities(entity_type="conversation_message")).total == 200


async def test_a_failing_store_among_concurrent_ones_rolls_back_alone(
    store: EmbeddedStore,
) -> None:
    # Stores queued together are committed together, each in its own savepoint.
    failures = 0

    async def one(i: int) -> None:
        nonlocal failures
        body = turn(f"c{i}", 0)
        if i % 3 == 0:
            body["relationships"].append(
                {"relationship_type": "MENTIONS", "source_index": 1, "target_index": 0}
            )
        try:
            await store.store(**body)
        except ValidationError:
            failures += 1

    async with anyio.create_task_group() as tg:
        for i in range(60):
            tg.start_soon(one, i)

    assert failures == 20
    page = await store.query_entities(entity_type="conversation", limit=100)
    assert sorted(e.snapshot["conversation_id"] for e in page.entities) == sorted(
        f"c{i}" for i in range(60) if i % 3
    )
    assert (await store.query_entities(entity_type="conversation_message")).total == 40


async def test_concurrent_identical_stores_write_once_and_replay(store: EmbeddedStore) -> None:
    results = []

    async def one() -> None:
        results.append(await store.store(**turn("same", 1)))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(one)

    assert sorted(r.replayed for r in results) == [False] + [True] * 9
    assert len({r.source_id for r in results}) == 1
    message = results[0].entity_id(1)
    assert len(await store.list_observations(message)) == 1


# -- bounded work -----------------------------------------------------------------------------


def _shape(sql: str) -> str:
    """A statement with its literal values replaced, to compare what was run, not with what."""
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    return re.sub(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])", "?", sql)


async def traced(store: EmbeddedStore, body: dict[str, Any]) -> list[str]:
    """The top-level SQL statements one store runs on the store's own connection."""
    statements: list[str] = []

    def trace(conn: sqlite3.Connection, body: Mapping[str, Any]) -> None:
        conn.set_trace_callback(statements.append if body["on"] else None)

    await store._run(trace, {"on": True})
    try:
        await store.store(**body)
    finally:
        await store._run(trace, {"on": False})
    # "-- ..." lines are the internals of virtual tables (FTS5 segment reads and merges).
    return [_shape(s) for s in statements if not s.startswith("--")]


#: the most one winner's meta in full adds to a snapshot doc: ``["<22>",seq,time,p,r],``
_ONE_META = 50


def state_sizes(db_path: Path, entity_id: str) -> tuple[int, ...]:
    with sqlite3.connect(db_path) as conn:
        row = conn.execute(
            "SELECT * FROM entities WHERE id = ?", (encode_entity(entity_id),)
        ).fetchone()
    return tuple(len(v) if isinstance(v, str) else 0 for v in row)


async def test_a_store_on_an_entity_with_a_thousand_observations_does_the_same_work(
    store: EmbeddedStore, db_path: Path
) -> None:
    # (one store a millisecond: a store at the time of its conversation's last observation
    # reads whether a restatement was derived then, ``_derived_restatement``)
    with clock(0):
        first = await store.store(**turn("long", 0))
        conversation = first.entity_id(0)
        early = await traced(store, turn("long", 1))
        early_sizes = state_sizes(db_path, conversation)
        for n in range(2, 1000):
            await store.store(**turn("long", n))
        late = await traced(store, turn("long", 1000))
        late_sizes = state_sizes(db_path, conversation)

    assert (await store.get_entity_snapshot(conversation)).observation_count == 1001
    # The same statements, and none of them reads the entity's observations back.
    assert late == early
    assert not [s for s in late if re.search(r"\bFROM\s+observations\b", s, re.IGNORECASE)]
    # The snapshot row does not grow with the history (ids and counters gain a few digits;
    # a field the first observation won, its meta the number 0 in the doc, may pass to a
    # later one, listed in full: one meta more, never one per observation).
    snapshot = 6  # the column of the snapshot doc
    grown = [late - early for early, late in zip(early_sizes, late_sizes, strict=True)]
    assert all(g <= (12 + _ONE_META if i == snapshot else 12) for i, g in enumerate(grown))
