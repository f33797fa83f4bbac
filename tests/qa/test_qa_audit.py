"""``audit``: every kind of broken turn, repairs that close them once, and the same answer
from the embedded store and from a server over HTTP."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from server_support import TOKEN

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._records.keys import turn_keys
from neotoma_agent._records.payloads import (
    ConversationSettings,
    closing_payload,
    conversation_entity,
    message_entity,
    turn_record,
    user_payload,
)
from neotoma_agent.exceptions import ConnectionLost, ValidationError
from neotoma_agent.qa import (
    AUDIT_CLOSE_TIMEOUT,
    AUDIT_DEFAULT_MIN_AGE,
    AUDIT_REPAIR_REASON,
    AUDIT_REPLY_MARGIN,
    AbandonTurn,
    AuditReport,
    CompleteTurn,
    FindingKind,
    LinkToConversation,
    apply_repairs,
)
from neotoma_agent.qa import _audit as audit_module
from neotoma_agent.qa import audit as qa_audit
from neotoma_agent.qa._scan import Auditor
from neotoma_agent.server import create_app, serving
from neotoma_agent.testing import FaultyTransport, RecordingTransport
from neotoma_agent.transport._base import EntityQueryResult, Transport
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

ORPHAN, NO_USER, NO_MESSAGES, UNCLOSED, UNLINKED, ABANDONED = (
    FindingKind.ORPHAN_TURN,
    FindingKind.ASSISTANT_WITHOUT_USER,
    FindingKind.RECORD_WITHOUT_MESSAGES,
    FindingKind.UNCLOSED_TURN,
    FindingKind.MESSAGE_NOT_IN_CONVERSATION,
    FindingKind.ABANDONED_TURN,
)

#: what build_scenarios leaves, as (conversation, turn, kind) in the audit's order
EXPECTED = [
    ("chat-a", "t2", ORPHAN),
    ("chat-a", "t3", ABANDONED),
    ("chat-a", "t4", ABANDONED),
    ("chat-a-2", "x1", ORPHAN),
    ("chat-b", "b1", NO_USER),
    ("chat-b", "b2", NO_MESSAGES),
    ("chat-b", "b3", UNCLOSED),
    ("chat-b", "b4", ORPHAN),
    ("chat-b", "b4", UNLINKED),
    ("chat-b", "b5", ORPHAN),
]


async def audit(transport: Transport, **kwargs: Any) -> AuditReport:
    """``qa.audit`` with ``min_age=0`` unless given: these stores were written a moment ago,
    so every turn is young, and the default ``min_age`` would leave the open ones alone."""
    kwargs.setdefault("min_age", 0)
    return await qa_audit(transport, **kwargs)


async def _raw(
    t: Transport,
    key: str,
    entities: Sequence[Mapping[str, Any]],
    rels: Sequence[Mapping[str, Any]] = (),
) -> None:
    await t.store(entities, idempotency_key=key, relationships=rels)


async def _fail_turn(
    memory: NeotomaMemory, text: str, turn_id: str, partial: str, error: Exception
) -> None:
    async with memory.turn(text, turn_id=turn_id) as turn:
        turn.reply = partial
        raise error


async def build_scenarios(t: Transport) -> None:
    """One store with every shape of turn, written as a protocol run or a partial write."""
    memory = NeotomaMemory(t, conversation_id="chat-a")
    await memory.record_turn("first question", "first answer", turn_id="t1")
    await memory.open_turn("the orphan", turn_id="t2")  # killed before closing
    with pytest.raises(RuntimeError):
        await _fail_turn(memory, "third", "t3", "partial", RuntimeError("model crashed"))
    with pytest.raises(TimeoutError):
        await _fail_turn(memory, "fourth", "t4", "", TimeoutError())
    # A conversation whose id contains another's, with its own orphan.
    await NeotomaMemory(t, conversation_id="chat-a-2").open_turn("x", turn_id="x1")

    b = ConversationSettings()
    part_of = {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}
    # b1: a reply whose question was lost (written by a partial closing store).
    k = turn_keys("chat-b", "b1")
    await _raw(
        t,
        "b1",
        [
            conversation_entity("chat-b"),
            message_entity("assistant", "lonely", k.assistant_turn_key),
        ],
        [part_of],
    )
    # b2: a turn record with no message at all.
    await _raw(t, "b2", [turn_record(turn_keys("chat-b", "b2"), "open")])
    # b3: both messages stored, the record never closed.
    k = turn_keys("chat-b", "b3")
    up = user_payload(b, k, "question three")
    await _raw(t, "b3u", list(up.entities), list(up.relationships))
    cp = closing_payload(b, k, "answer three", conversation_entity_id=None, user_message_id=None)
    await _raw(
        t,
        "b3a",
        [e for e in cp.entities if e["entity_type"] != "conversation_turn"],
        [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
    )
    # b4: the user message and its open record, but no PART_OF edge.
    k = turn_keys("chat-b", "b4")
    await _raw(
        t, "b4", [message_entity("user", "unlinked", k.user_turn_key), turn_record(k, "open")]
    )
    # b5: a reference client's turn (no record) cut off before its reply.
    k = turn_keys("chat-b", "b5")
    await _raw(
        t,
        "b5",
        [conversation_entity("chat-b"), message_entity("user", "q5", k.user_turn_key)],
        [part_of],
    )
    # b6: a reference client's complete turn (no record): consistent.
    k = turn_keys("chat-b", "b6")
    await _raw(
        t,
        "b6",
        [
            conversation_entity("chat-b"),
            message_entity("user", "q6", k.user_turn_key),
            message_entity("assistant", "a6", k.assistant_turn_key),
        ],
        [part_of, {"relationship_type": "PART_OF", "source_index": 2, "target_index": 0}],
    )


def shape(report: AuditReport) -> list[tuple[str, str, FindingKind]]:
    return [(f.conversation_id, f.turn_id, f.kind) for f in report.findings]


async def totals(t: Transport) -> tuple[int, int]:
    entities = observations = offset = 0
    while True:
        page = await t.query_entities(limit=500, offset=offset)
        entities += len(page.entities)
        observations += sum(e.observation_count for e in page.entities)
        offset += len(page.entities)
        if not page.entities or offset >= page.total:
            return entities, observations


@pytest.fixture
async def store() -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(":memory:") as s:
        yield s


async def test_an_empty_store_is_clean(store: EmbeddedStore) -> None:
    report = await audit(store)
    assert report.clean
    assert not report.findings
    assert (report.conversations, report.turns, report.messages) == (0, 0, 0)


async def test_every_kind_of_broken_turn_is_found(store: EmbeddedStore) -> None:
    await build_scenarios(store)
    report = await audit(store)
    assert shape(report) == EXPECTED
    assert not report.clean
    assert [f.turn_id for f in report.orphans] == ["t2", "x1", "b4", "b5"]
    assert [f.turn_id for f in report.remaining] == ["t2", "x1", "b1", "b2", "b3", "b4", "b4", "b5"]
    assert report.conversations == 3
    assert report.turns == 11

    found = {(f.turn_id, f.kind): f for f in report.findings}
    orphan = found["t2", ORPHAN]
    assert orphan.severity == "error"
    assert orphan.record_status == "open"
    assert orphan.user_message_id
    assert orphan.turn_record_id
    assert orphan.conversation_entity_id
    assert orphan.assistant_message_id is None
    assert orphan.repair == AbandonTurn("chat-a", "t2", AUDIT_REPAIR_REASON)
    assert set(orphan.entity_ids) == {
        orphan.conversation_entity_id,
        orphan.user_message_id,
        orphan.turn_record_id,
    }
    assert found["b5", ORPHAN].record_status is None
    assert "missing" in found["b5", ORPHAN].message
    assert found["b1", NO_USER].repair is None  # the question's text is unknown
    assert found["b2", NO_MESSAGES].repair == AbandonTurn("chat-b", "b2", AUDIT_REPAIR_REASON)
    assert found["b3", UNCLOSED].severity == "warn"
    assert found["b3", UNCLOSED].repair == CompleteTurn("chat-b", "b3")
    link = found["b4", UNLINKED]
    assert link.repair == LinkToConversation("chat-b", "b4", link.user_message_id or "", "user")
    partial, empty = found["t3", ABANDONED], found["t4", ABANDONED]
    assert (partial.severity, partial.reason, partial.problem) == ("info", "RuntimeError", False)
    assert partial.assistant_message_id is not None
    assert empty.assistant_message_id is None
    assert empty.reason == "TimeoutError"
    assert report.to_json()["findings"][0]["kind"] == "orphan_turn"


async def test_repair_closes_what_it_can_once(store: EmbeddedStore) -> None:
    await build_scenarios(store)
    repaired = await audit(store, repair=True)
    assert [(f.turn_id, f.kind) for f in repaired.remaining] == [("b1", NO_USER)]
    assert [(r.conversation_id, r.turn_id) for r in repaired.repairs] == [
        ("chat-a", "t2"),
        ("chat-a-2", "x1"),
        ("chat-b", "b2"),
        ("chat-b", "b3"),
        ("chat-b", "b4"),
        ("chat-b", "b5"),
    ]
    assert all(r.ok and r.repair_entity_id for r in repaired.repairs)

    after = await audit(store)
    assert [(f.turn_id, f.kind) for f in after.problems] == [("b1", NO_USER)]
    assert [(f.turn_id, f.repaired) for f in after.abandoned] == [
        ("t2", True),
        ("t3", False),
        ("t4", False),
        ("x1", True),
        ("b2", True),
        ("b4", True),
        ("b5", True),
    ]
    assert all(f.reason == AUDIT_REPAIR_REASON for f in after.abandoned if f.repaired)

    # The same repairs again write nothing: every store replays.
    before = await totals(store)
    by_turn = {(f.conversation_id, f.turn_id): f for f in repaired.findings}
    for result in repaired.repairs:
        diagnoses = [o.diagnosis for o in result.outcomes]
        again = await apply_repairs(
            store, diagnoses, conversation_id=result.conversation_id, turn_id=result.turn_id
        )
        assert [o.status for o in again] == ["replayed"] * len(diagnoses)
        assert not again.wrote
        assert (result.conversation_id, result.turn_id) in by_turn
    rerun = await audit(store, repair=True)
    assert rerun.findings == after.findings
    assert not rerun.repairs
    assert await totals(store) == before


@pytest.mark.parametrize(
    ("conversation_id", "turn_id"),
    [
        ("Ana.Lopez@Example.com", "T1"),  # a name holding an email is stored lowercased
        ("Chat  With   Spaces", "turn  one"),  # whitespace runs collapse in names
        ("Mixed Case", "ends-with@"),  # only the reply's name "...@:assistant" is an email
        ("chat:with:colons", "t1"),
    ],
)
async def test_awkward_ids_pair_messages_with_their_record(
    store: EmbeddedStore, conversation_id: str, turn_id: str
) -> None:
    memory = NeotomaMemory(store, conversation_id=conversation_id)
    await memory.record_turn("question", "answer", turn_id=turn_id)
    await memory.open_turn("cut off", turn_id="orphan")
    for report in (
        await audit(store),
        await audit(store, conversation_id=conversation_id),
        await audit(store, thorough=True),
    ):
        assert shape(report) == [(conversation_id, "orphan", ORPHAN)]
        assert report.turns == 2
    assert (await audit(store, repair=True)).clean
    assert (await audit(store, conversation_id=conversation_id)).clean


async def test_a_turn_closed_while_the_audit_ran_is_left_alone(store: EmbeddedStore) -> None:
    memory = NeotomaMemory(store, conversation_id="chat-a")
    await memory.open_turn("still running", turn_id="t1")
    record_id = (await audit(store)).orphans[0].turn_record_id

    class ClosesTheTurn(RecordingTransport):
        closed = False

        async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
            # The live turn's reply lands between the scan and the repair's re-read.
            if method == "get_entity_snapshot" and args[0] == record_id and not self.closed:
                self.closed = True
                await memory.close_turn("t1", "done after all")
            return await super()._call(method, *args, **kwargs)

    report = await audit(ClosesTheTurn(store), repair=True)
    assert [f.turn_id for f in report.orphans] == ["t1"]
    assert report.clean
    assert not report.repairs
    after = await audit(store)
    assert after.clean
    assert not after.findings


async def test_a_conversation_scope_sees_only_that_conversation(store: EmbeddedStore) -> None:
    await build_scenarios(store)
    for scope in ("chat-a", "chat-a-2", "chat-b"):
        report = await audit(store, conversation_id=scope)
        assert shape(report) == [s for s in EXPECTED if s[0] == scope], scope
        assert report.conversation_id == scope
    assert not (await audit(store, conversation_id="nobody")).findings
    repaired = await audit(store, conversation_id="chat-a", repair=True)
    assert repaired.clean
    assert [f.turn_id for f in (await audit(store)).orphans] == ["x1", "b4", "b5"]


async def test_since_limits_the_audit_to_recent_turns(store: EmbeddedStore) -> None:
    await build_scenarios(store)
    await anyio.sleep(0.01)
    cutoff = datetime.datetime.now(datetime.timezone.utc)
    await anyio.sleep(0.01)
    memory = NeotomaMemory(store, conversation_id="chat-a")
    await memory.open_turn("a new orphan", turn_id="t9")
    # An old turn abandoned just now, with no reply: only its record is written.
    await memory.abandon_turn("t2", error="KeyboardInterrupt")

    recent = await audit(store, since=cutoff)
    assert shape(recent) == [("chat-a", "t2", ABANDONED), ("chat-a", "t9", ORPHAN)]
    assert recent.since == cutoff.isoformat()
    everything = [s for s in EXPECTED if s[1] != "t2"] + [
        ("chat-a", "t2", ABANDONED),
        ("chat-a", "t9", ORPHAN),
    ]
    order = list(FindingKind)
    everything.sort(key=lambda s: (s[0], s[1], order.index(s[2])))
    assert shape(await audit(store, since="2000-01-01T00:00:00Z")) == everything
    assert not (await audit(store, since="2999-01-01T00:00:00+00:00")).findings
    with pytest.raises(ValueError, match="ISO 8601"):
        await audit(store, since="yesterday")
    with pytest.raises(ValueError, match="timezone"):
        await audit(store, since=datetime.datetime(2020, 1, 1))


async def test_by_default_a_turn_that_may_still_be_running_is_left_alone(
    store: EmbeddedStore,
) -> None:
    memory = NeotomaMemory(store, conversation_id="chat-a")
    await memory.open_turn("in flight", turn_id="t1")
    report = await qa_audit(store, repair=True)
    assert 2 * attrs.fields(NeotomaMemory).close_timeout.default <= AUDIT_DEFAULT_MIN_AGE
    # the default is the library's close_timeout plus a margin for a reply still written
    assert attrs.fields(NeotomaMemory).close_timeout.default == AUDIT_CLOSE_TIMEOUT
    assert AUDIT_DEFAULT_MIN_AGE == AUDIT_CLOSE_TIMEOUT + AUDIT_REPLY_MARGIN
    assert report.min_age == AUDIT_DEFAULT_MIN_AGE
    assert report.skipped_recent == 1
    assert report.skipped_turns == (("chat-a", "t1"),)
    assert not report.repairs
    reason = f"younger than --min-age {AUDIT_DEFAULT_MIN_AGE:g}s: may still be running"
    assert report.skipped_reason == reason
    assert report.to_json()["skipped"] == {
        "count": 1,
        "min_age": AUDIT_DEFAULT_MIN_AGE,
        "reason": reason,
        "turns": [{"conversation_id": "chat-a", "turn_id": "t1"}],
    }
    assert [f.turn_id for f in (await qa_audit(store, min_age=0)).orphans] == ["t1"]


async def test_min_age_leaves_turns_that_may_still_be_running(store: EmbeddedStore) -> None:
    memory = NeotomaMemory(store, conversation_id="chat-a")
    await memory.open_turn("in flight", turn_id="t1")
    young = await audit(store, min_age=60, repair=True)
    assert young.clean
    assert young.skipped_recent == 1
    assert not young.repairs
    assert [f.turn_id for f in (await audit(store)).orphans] == ["t1"]


async def test_thorough_finds_messages_with_no_record_and_no_conversation(
    store: EmbeddedStore,
) -> None:
    k = turn_keys("chat-c", "c1")
    await _raw(store, "c1", [message_entity("user", "stray", k.user_turn_key)])
    assert not (await audit(store)).findings  # invisible to the record and PART_OF reads
    report = await audit(store, thorough=True)
    assert shape(report) == [("chat-c", "c1", ORPHAN), ("chat-c", "c1", UNLINKED)]
    assert (await audit(store, thorough=True, repair=True)).clean
    assert (await audit(store, thorough=True)).clean


class OffsetPaging(RecordingTransport):
    """A server without cursors: it pages by offset only (as some Neotoma versions do)."""

    async def query_entities(
        self,
        *,
        entity_type: str | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> EntityQueryResult:
        result = await super().query_entities(
            entity_type=entity_type, search=search, limit=limit, offset=offset
        )
        raw = {k: v for k, v in result.raw.items() if k != "next_cursor"}
        return EntityQueryResult.from_json(raw)


async def test_cursor_paging_reads_every_page_in_order(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build_scenarios(store)
    expected = shape(await audit(OffsetPaging(store)))
    monkeypatch.setattr(audit_module, "_PAGE", 2)
    recorder = RecordingTransport(store)
    assert shape(await audit(recorder)) == expected
    cursors = [c.kwargs.get("cursor") for c in recorder.calls_to("query_entities")]
    assert any(cursors)  # later pages went by cursor, not by offset


async def test_scans_page_through_many_entities(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build_scenarios(store)
    expected = shape(await audit(store))
    monkeypatch.setattr(audit_module, "_PAGE", 2)
    assert shape(await audit(store, thorough=True)) == expected

    class CapsPages(OffsetPaging):
        async def query_entities(
            self,
            *,
            entity_type: str | None = None,
            search: str | None = None,
            limit: int = 100,
            offset: int = 0,
            cursor: str | None = None,
        ) -> EntityQueryResult:
            # A server whose page size is smaller than the one asked for.
            return await super().query_entities(
                entity_type=entity_type, search=search, limit=min(limit, 3), offset=offset
            )

    capped = CapsPages(store)
    assert shape(await audit(capped, concurrency=3)) == expected
    assert capped.max_in_flight("query_entities") > 1  # later pages run concurrently


async def test_a_server_that_stops_paging_makes_a_partial_audit(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build_scenarios(store)
    monkeypatch.setattr(audit_module, "_PAGE", 2)
    # A Neotoma server refuses offsets past 2,000; here, past 4.
    capped = FaultyTransport(OffsetPaging(store)).fail(
        "query_entities",
        lambda: ValidationError("offset must be <= 4", status=400),
        when=lambda m, a, kw: kw["offset"] > 4,
    )
    report = await audit(capped)
    assert report.partial
    assert not report.clean
    assert report.to_json()["partial"] is True
    assert not (await audit(store)).partial


async def test_a_failing_read_is_raised_as_is(store: EmbeddedStore) -> None:
    await build_scenarios(store)
    faulty = FaultyTransport(store).fail("retrieve_related_entities", ConnectionLost("down"))
    with pytest.raises(ConnectionLost):
        await audit(faulty)


async def test_arguments_are_checked(store: EmbeddedStore) -> None:
    with pytest.raises(ValueError, match="conversation_id"):
        await audit(store, conversation_id="")
    with pytest.raises(ValueError, match="concurrency"):
        await audit(store, concurrency=0)
    with pytest.raises(ValueError, match="min_age"):
        await audit(store, min_age=-1)


# -------------------------------------------------------------------------- over HTTP


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_http_audit_finds_what_the_file_audit_finds(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with EmbeddedStore.open(db) as store:
        await build_scenarios(store)
        on_file = await audit(store)
        scoped = await audit(store, conversation_id="chat-b", thorough=True)
        async with (
            serving(create_app(store, token=TOKEN)) as url,
            HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
        ):
            over_http = await audit(http)
            assert over_http.findings == on_file.findings
            assert over_http == on_file
            assert await audit(http, conversation_id="chat-b", thorough=True) == scoped
            repaired = await audit(http, repair=True)
            assert [(f.turn_id, f.kind) for f in repaired.remaining] == [("b1", NO_USER)]
        after_on_file = await audit(store)
    assert [(f.turn_id, f.kind) for f in after_on_file.problems] == [("b1", NO_USER)]
    assert sum(f.repaired for f in after_on_file.abandoned) == 5


@pytest.mark.parametrize("later_first", [True, False])
async def test_a_message_seen_by_two_reads_keeps_its_later_activity(later_first: bool) -> None:
    # A scoped audit reads a conversation's messages twice, concurrently: the report's
    # last activity must not depend on which read lands first.
    async with EmbeddedStore.open(":memory:") as store:
        await NeotomaMemory(store, conversation_id="chat").open_turn("hello", turn_id="t1")
        user = (await store.query_entities(entity_type="conversation_message")).entities[0]
        auditor = Auditor(store, "chat", True, 4, timed=True)
        stamps = ["2026-01-01T00:00:05.000Z", "2026-01-01T00:00:01.000Z"]
        for stamp in stamps if later_first else stamps[::-1]:
            auditor.add_message(user.entity_id, user.canonical_name, True, None, stamp)
        (state,) = auditor.turns.values()
        assert state.user is not None
        assert state.user.activity == stamps[0]
