"""The whole-store audit streams: it keeps only the turns that may be findings, and answers
as the one-conversation audit (which holds every turn it reads) does."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from qa_support import audit_both_ways, spy_on_fast_path
from test_qa_audit import build_scenarios

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._records.keys import turn_keys
from neotoma_agent._records.payloads import message_entity, turn_record
from neotoma_agent.qa import FindingKind, audit
from neotoma_agent.qa._stream import StreamingAuditor, read_all
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store() -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(":memory:") as s:
        yield s


async def fine_turns(store: EmbeddedStore, conversation_id: str, n: int) -> NeotomaMemory:
    memory = NeotomaMemory(store, conversation_id=conversation_id)
    for i in range(n):
        await memory.record_turn(f"question {i}", f"answer {i}", turn_id=f"t{i}")
    return memory


async def test_only_the_turns_that_may_be_findings_are_kept(store: EmbeddedStore) -> None:
    for c in range(3):
        await fine_turns(store, f"chat-{c}", 10)
    await NeotomaMemory(store, conversation_id="chat-1").open_turn("cut off", turn_id="o1")
    auditor = StreamingAuditor(store, None, False, 4, page_size=2)
    read: set[str] = set()
    await read_all(auditor, read, 4)
    assert list(auditor.turns) == ["chat-1:o1"]
    assert (auditor.fine_turns, auditor.fine_messages) == (30, 60)
    assert len(read) == 3
    report = await audit(store, min_age=0)
    assert (report.turns, report.messages) == (31, 61)
    assert [f.turn_id for f in report.orphans] == ["o1"]


async def test_a_completed_record_with_no_messages_is_found(store: EmbeddedStore) -> None:
    await fine_turns(store, "chat-a", 3)
    k = turn_keys("chat-a", "ghost")
    await store.store([turn_record(k, "completed")], idempotency_key="ghost")
    whole = await audit(store, min_age=0)
    scoped = await audit(store, min_age=0, conversation_id="chat-a")
    assert [(f.turn_id, f.kind, f.record_status) for f in whole.findings] == [
        ("ghost", FindingKind.RECORD_WITHOUT_MESSAGES, "completed")
    ]
    assert whole.findings == scoped.findings
    assert whole.turns == scoped.turns == 4


async def test_a_completed_turn_with_an_unlinked_message_names_its_record(
    store: EmbeddedStore,
) -> None:
    await fine_turns(store, "chat-a", 2)
    k = turn_keys("chat-a", "loose")
    # Both messages and a completed record, but only the reply hangs off the conversation.
    memory = NeotomaMemory(store, conversation_id="chat-a")
    await memory.record_turn("q", "a", turn_id="loose")
    await store.store(
        [message_entity("user", "other writer", k.user_turn_key)], idempotency_key="other"
    )
    await fine_turns(store, "chat-b", 2)
    whole = await audit(store, min_age=0)
    scoped = await audit(store, min_age=0, conversation_id="chat-a")
    assert whole.findings == scoped.findings
    assert not whole.findings  # the user message kept its PART_OF edge: still fine

    stray = turn_keys("chat-a", "stray")
    await store.store(
        [message_entity("user", "q", stray.user_turn_key), turn_record(stray, "completed")],
        idempotency_key="stray",
    )
    await store.store(
        [message_entity("assistant", "a", stray.assistant_turn_key)], idempotency_key="stray-a"
    )
    for thorough in (False, True):
        whole = await audit(store, min_age=0, thorough=thorough)
        scoped = await audit(store, min_age=0, thorough=thorough, conversation_id="chat-a")
        assert whole.findings == scoped.findings
    found = [(f.turn_id, f.kind, f.record_status) for f in whole.findings]
    assert ("stray", FindingKind.RECORD_WITHOUT_MESSAGES, "completed") not in found
    assert whole.findings[0].turn_record_id is not None


async def test_thorough_does_not_count_a_fine_turn_twice(store: EmbeddedStore) -> None:
    await fine_turns(store, "chat-a", 5)
    plain, thorough = await audit(store, min_age=0), await audit(store, min_age=0, thorough=True)
    assert (plain.turns, plain.messages) == (thorough.turns, thorough.messages) == (5, 10)
    assert plain.clean
    assert thorough.clean


async def test_the_file_fast_path_answers_as_the_transport_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    used = spy_on_fast_path(monkeypatch)
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        await build_scenarios(store)
        await fine_turns(store, "chat-c", 3)
        cutoff = datetime.datetime.now(datetime.timezone.utc)
        memory = NeotomaMemory(store, conversation_id="chat-a")
        await memory.open_turn("a new orphan", turn_id="t9")
        await memory.abandon_turn("t2", error="KeyboardInterrupt")
        kwargs_list = ({}, {"since": cutoff}, {"thorough": True}, {"min_age": 3600.0})
        for report in await audit_both_ways(store, used, kwargs_list):
            assert report.findings
