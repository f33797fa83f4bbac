"""The whole-store audit's file fast path (the embedded store's bulk reads,
``transport/embedded/_bulk.py``) answers exactly as the
Transport reads do, on the shapes its shortcuts skip: folded (email) keys, a message in
two conversations, a turn split over two pages, names that are not turn keys, and turn
records in an older doc format or in JSON that SQLite does not read."""

from __future__ import annotations

import datetime
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from qa_support import audit_both_ways, spy_on_fast_path

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._records.keys import turn_keys, turn_record_entity_id
from neotoma_agent._records.payloads import conversation_entity, message_entity
from neotoma_agent.qa import AuditReport, FindingKind, audit
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore, _bulk
from neotoma_agent.transport.embedded._codec import fields_sql, install
from neotoma_agent.transport.embedded._rows import encode_entity

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

PART_OF = {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}


async def build_odd_store(path: Path, *, second_home: bool = True) -> datetime.datetime:
    """Fine and broken turns of every shape the fast path treats apart; returns a time
    between the first writes and the last ones (for ``since``). ``second_home``: a message
    also hangs off a second conversation."""
    async with EmbeddedStore.open(path) as store:
        for c in range(4):
            memory = NeotomaMemory(store, conversation_id=f"chat-{c}")
            for t in range(3):
                await memory.record_turn(f"q{t}", f"a{t}", turn_id=f"t{t}")
        # Ids with "@" are folded in canonical names (case, whitespace runs).
        mail = NeotomaMemory(store, conversation_id="Ann  Lee@Example.com")
        await mail.record_turn("q", "a", turn_id="T1")
        await mail.open_turn("cut off", turn_id="T2")
        if second_home:
            await add_second_home(store)
        cutoff = datetime.datetime.now(datetime.timezone.utc)
        # A turn split over two conversations: its question in chat-0, its reply in chat-2.
        k = turn_keys("chat-0", "split")
        for role, conv, key in (
            ("user", "chat-0", k.user_turn_key),
            ("assistant", "chat-2", k.assistant_turn_key),
        ):
            await store.store(
                [
                    conversation_entity(conv),
                    message_entity(role, "x", key),  # type: ignore[arg-type]
                ],
                idempotency_key=f"split-{role}",
                relationships=[PART_OF],
            )
        # Messages whose names are not turn keys.
        for i, key in enumerate(("nocolon", ":t", "chat-2:", "x:assistant")):
            await store.store(
                [
                    conversation_entity("chat-2"),
                    message_entity("user", "odd", key),
                ],
                idempotency_key=f"odd-{i}",
                relationships=[PART_OF],
            )
        await NeotomaMemory(store, conversation_id="chat-3").open_turn("o", turn_id="o1")
    # Turn records as another version of the file holds them, written in place.
    conn = sqlite3.connect(path)
    install(conn)  # the fields as objects (the field codec's, schema version 16: ``_codec``)
    with conn:
        old = turn_record_entity_id("chat-0", "t0")
        conn.execute(
            "UPDATE entities SET snapshot = "
            f"json_object('f', json({fields_sql()}), 'p', json('{{}}'), "
            "'w', json('{}')) WHERE id = ?",
            (encode_entity(old),),
        )
        # NaN is JSON to Python's reader, not to SQLite's.
        for cid, tid in (("chat-1", "t2"), ("chat-3", "o1")):
            conn.execute(
                f"UPDATE entities SET snapshot = json_set(snapshot, '$.f', json({fields_sql()})) "
                "WHERE id = ?",
                (encode_entity(turn_record_entity_id(cid, tid)),),
            )
            conn.execute(
                "UPDATE entities SET snapshot = "
                'replace(snapshot, \'"status":\', \'"n":NaN,"status":\') WHERE id = ?',
                (encode_entity(turn_record_entity_id(cid, tid)),),
            )
    conn.close()
    return cutoff


async def add_second_home(store: EmbeddedStore) -> None:
    """The user message of chat-1's t1 also hangs off chat-3."""
    k = turn_keys("chat-1", "t1")
    await store.store(
        [
            conversation_entity("chat-3"),
            message_entity("user", "q1", k.user_turn_key, turn_number=1),
        ],
        idempotency_key="second-home",
        relationships=[PART_OF],
    )


def kinds(report: AuditReport) -> list[tuple[str, str, FindingKind]]:
    return [(f.conversation_id, f.turn_id, f.kind) for f in report.findings]


@pytest.mark.parametrize(("per_read", "batch"), [(1, 3), (2, 3), (500, 5_000)])
async def test_the_fast_path_answers_as_the_transport_reads_on_odd_shapes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_read: int, batch: int
) -> None:
    cutoff = await build_odd_store(tmp_path / "odd.db")
    used = spy_on_fast_path(monkeypatch)
    # Small pages and batches: turns and conversations fall on either side of a boundary.
    monkeypatch.setattr(_bulk, "_CONVERSATIONS_PER_READ", per_read)
    monkeypatch.setattr(_bulk, "_BATCH", batch)
    kwargs_list: list[dict[str, Any]] = [
        {},
        {"since": cutoff},
        {"thorough": True},
        {"min_age": 3600.0},
    ]
    async with EmbeddedStore.open(tmp_path / "odd.db") as store:
        reports = await audit_both_ways(store, used, kwargs_list)
    assert kinds(reports[0]) == [
        ("Ann  Lee@Example.com", "T2", FindingKind.ORPHAN_TURN),
        ("chat-3", "o1", FindingKind.ORPHAN_TURN),
    ]
    assert (reports[0].turns, reports[0].messages) == (16, 30)


async def test_a_message_in_two_conversations_read_apart_is_not_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The turn is fine in the first conversation read; the second read meets one of its
    # messages again and must neither take the turn up again, half, nor count it twice.
    await build_odd_store(tmp_path / "odd.db")
    monkeypatch.setattr(_bulk, "_CONVERSATIONS_PER_READ", 1)
    async with EmbeddedStore.open(tmp_path / "odd.db") as store:
        for transport in (store, RecordingTransport(store)):
            for kwargs in ({}, {"thorough": True}):
                report = await audit(transport, min_age=0, **kwargs)
                found = {(f.conversation_id, f.turn_id) for f in report.findings}
                assert ("chat-1", "t1") not in found, kwargs
                assert (report.turns, report.messages) == (16, 30), kwargs


async def test_the_fast_path_reads_records_whatever_their_doc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build_odd_store(tmp_path / "odd.db")
    used = spy_on_fast_path(monkeypatch)
    async with EmbeddedStore.open(tmp_path / "odd.db") as store:
        report = await audit(store, min_age=0)
    assert used == [True]
    # The rewritten records still read as they were: chat-0 t0 and chat-1 t2 completed
    # (fine), chat-3 o1 open (an orphan).
    found = {(f.conversation_id, f.turn_id) for f in report.findings}
    assert ("chat-0", "t0") not in found
    assert ("chat-1", "t2") not in found
    orphan = next(f for f in report.findings if f.turn_id == "o1")
    assert orphan.record_status == "open"


async def test_repair_through_the_fast_path_repairs_as_over_the_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build_odd_store(tmp_path / "a.db", second_home=False)
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    used = spy_on_fast_path(monkeypatch)
    async with (
        EmbeddedStore.open(tmp_path / "a.db") as on_file,
        EmbeddedStore.open(tmp_path / "b.db") as other,
    ):
        fast = await audit(on_file, repair=True, min_age=0)
        generic = await audit(RecordingTransport(other), repair=True, min_age=0)
        assert used == [True, False]
        assert fast.findings == generic.findings
        assert fast.remaining == generic.remaining
        assert [r.to_json()["outcomes"] for r in fast.repairs] == [
            r.to_json()["outcomes"] for r in generic.repairs
        ]
        assert fast.repairs
        again_fast = await audit(on_file, min_age=0)
        again_generic = await audit(RecordingTransport(other), min_age=0)
    # Each file's repairs were written at its own time: compare all but the times.
    assert kinds(again_fast) == kinds(again_generic)
    assert [f.reason for f in again_fast.findings] == [f.reason for f in again_generic.findings]
    assert (again_fast.turns, again_fast.messages) == (again_generic.turns, again_generic.messages)
    assert again_fast.clean
    assert again_generic.clean
