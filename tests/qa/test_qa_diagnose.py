"""``diagnose_turn`` and ``apply_repairs``: every check, every repair, and repairs run twice."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.exceptions import ConnectionLost, NotFoundError
from neotoma_agent.qa import (
    AbandonTurn,
    AttachmentObservation,
    AuditReport,
    Diagnosis,
    MessageObservation,
    StoreAssistantMessage,
    StoreAttachment,
    StoreUserMessage,
    TurnObservation,
    apply_repairs,
    diagnose_turn,
)
from neotoma_agent.qa import audit as qa_audit
from neotoma_agent.qa._actions import message_id_for
from neotoma_agent.testing import FaultyTransport, key_phase
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

CID = "chat-42"


async def audit(transport: Transport, **kwargs: Any) -> AuditReport:
    """``qa.audit`` with ``min_age=0`` unless given: these stores were written a moment ago,
    so every turn is young, and the default ``min_age`` would leave the open ones alone."""
    kwargs.setdefault("min_age", 0)
    return await qa_audit(transport, **kwargs)


@pytest.fixture
async def store() -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(":memory:") as s:
        yield s


async def totals(transport: Transport) -> tuple[int, int]:
    """(entities, observations) in the whole store."""
    entities = observations = offset = 0
    while True:
        page = await transport.query_entities(limit=500, offset=offset)
        entities += len(page.entities)
        observations += sum(e.observation_count for e in page.entities)
        offset += len(page.entities)
        if not page.entities or offset >= page.total:
            return entities, observations


def by_id(diagnoses: list[Diagnosis]) -> dict[str, Diagnosis]:
    return {d.id: d for d in diagnoses}


async def test_a_complete_turn_is_a_checklist_of_ok_items() -> None:
    found = diagnose_turn(
        TurnObservation(
            CID,
            "t1",
            user_message=MessageObservation(True),
            assistant_message=MessageObservation(True),
            assistant_reply_produced=True,
            attachments=[AttachmentObservation("notes.pdf", True)],
            tools_invoked=("search",),
            store_first_satisfied=True,
            turn_status="completed",
        )
    )
    assert [(d.id, d.severity) for d in found] == [
        ("user-message-stored", "info"),
        ("assistant-message-stored", "info"),
        ("attachment-stored:notes.pdf", "info"),
    ]
    assert all(d.repair is None for d in found)


async def test_missing_user_message_is_stored_with_its_exact_text(store: EmbeddedStore) -> None:
    text = "Book the Lisbon hotel  for Ana\n(exactly this)"
    found = diagnose_turn(TurnObservation(CID, "t1", user_message=MessageObservation(False, text)))
    (problem,) = found
    assert problem.id == "user-message-missing"
    assert problem.severity == "error"
    assert problem.meaning
    assert problem.risk
    assert problem.resolution
    assert problem.repair == StoreUserMessage(CID, "t1", text)

    first = await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    assert [o.status for o in first] == ["applied"]
    message = await store.get_entity_snapshot(message_id_for(CID, "t1", "user"))
    assert message.snapshot["content"] == text
    assert message.snapshot["role"] == "user"
    related = await store.retrieve_related_entities(message.entity_id, direction="outbound")
    assert [
        (r.relationship_type, e.entity_type)
        for r, e in zip(related.relationships, related.entities, strict=True)
    ] == [("PART_OF", "conversation")]

    before = await totals(store)
    second = await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    assert [o.status for o in second] == ["replayed"]
    assert second.replayed
    assert not second.wrote
    assert second.repair_entity_id == first.repair_entity_id
    assert await totals(store) == before


async def _recorded(store: EmbeddedStore, repair_entity_id: str) -> Mapping[str, Any]:
    # The neotoma_repair record's fields as written: its observation. A 0.22.0 server
    # declares only title, diagnosis, ... for the type, so its snapshot (and the embedded
    # store's, which keeps what the server keeps) drops these.
    (observation,) = (await store.list_observations(repair_entity_id)).observations
    return observation.fields


async def test_unknown_user_text_is_never_invented(store: EmbeddedStore) -> None:
    found = diagnose_turn(TurnObservation(CID, "t1", user_message=MessageObservation(False)))
    assert found[0].repair is None
    result = await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    assert [o.status for o in result] == ["skipped"]
    with pytest.raises(NotFoundError):
        await store.get_entity_snapshot(message_id_for(CID, "t1", "user"))
    # The issue is still recorded, so a report can link it.
    assert result.repair_entity_id is not None
    summary = await _recorded(store, result.repair_entity_id)
    assert summary["repairs"] == [{"diagnosis_id": "user-message-missing", "outcome": "skipped"}]


async def test_missing_reply_with_known_text_is_stored_and_closes_the_turn(
    store: EmbeddedStore,
) -> None:
    memory = NeotomaMemory(store, conversation_id=CID)
    await memory.open_turn("Book the hotel", turn_id="t1")
    observation = TurnObservation(
        CID,
        "t1",
        user_message=MessageObservation(True),
        assistant_message=MessageObservation(False, "Booked: Hotel Avenida, 3 nights."),
        assistant_reply_produced=True,
        turn_status="open",
    )
    found = diagnose_turn(observation)
    problem = by_id(found)["assistant-message-missing"]
    assert problem.repair == StoreAssistantMessage(CID, "t1", "Booked: Hotel Avenida, 3 nights.")
    assert "turn-left-open" not in by_id(found)  # one repair closes the turn, not two

    await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    reply = await store.get_entity_snapshot(message_id_for(CID, "t1", "assistant"))
    assert reply.snapshot["content"] == "Booked: Hotel Avenida, 3 nights."
    assert (await audit(store)).clean
    assert not (await audit(store)).findings  # completed, not abandoned

    before = await totals(store)
    again = await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    assert not again.wrote
    assert await totals(store) == before


async def test_a_lost_reply_closes_the_turn_as_abandoned_without_text(
    store: EmbeddedStore,
) -> None:
    memory = NeotomaMemory(store, conversation_id=CID)
    await memory.open_turn("Book the hotel", turn_id="t1")
    found = diagnose_turn(
        TurnObservation(
            CID,
            "t1",
            user_message=MessageObservation(True),
            assistant_message=MessageObservation(False),
            assistant_reply_produced=True,
        )
    )
    problem = by_id(found)["assistant-message-missing"]
    assert problem.repair == AbandonTurn(CID, "t1", "assistant_reply_lost")
    await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    with pytest.raises(NotFoundError):
        await store.get_entity_snapshot(message_id_for(CID, "t1", "assistant"))
    report = await audit(store)
    assert report.clean
    (abandoned,) = report.abandoned
    assert abandoned.reason == "assistant_reply_lost"

    before = await totals(store)
    assert not (await apply_repairs(store, found, conversation_id=CID, turn_id="t1")).wrote
    assert await totals(store) == before


async def test_a_missing_attachment_is_recorded_by_its_hash(
    store: EmbeddedStore, tmp_path: Path
) -> None:
    memory = NeotomaMemory(store, conversation_id=CID)
    await memory.record_turn("See the attached contract", "Read it.", turn_id="t1")
    path = tmp_path / "contract.pdf"
    path.write_bytes(b"%PDF-1.4 contract")
    found = diagnose_turn(
        TurnObservation(CID, "t1", attachments=[AttachmentObservation(str(path), False)])
    )
    (problem,) = found
    assert problem.id == f"attachment-missing:{path}"
    assert problem.repair == StoreAttachment(CID, "t1", str(path))

    result = await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    (outcome,) = result
    assert outcome.status == "applied"
    asset = await store.get_entity_snapshot(outcome.entity_ids[0])
    assert asset.entity_type == "file_asset"
    assert asset.snapshot["content_hash"] == hashlib.sha256(b"%PDF-1.4 contract").hexdigest()
    assert asset.snapshot["original_filename"] == "contract.pdf"
    assert asset.snapshot["file_size"] == len(b"%PDF-1.4 contract")
    embeds = await store.retrieve_related_entities(
        message_id_for(CID, "t1", "user"), relationship_types=["EMBEDS"], direction="outbound"
    )
    assert [e.id for e in embeds.entities] == [asset.entity_id]

    before = await totals(store)
    assert not (await apply_repairs(store, found, conversation_id=CID, turn_id="t1")).wrote
    assert await totals(store) == before


async def test_a_failing_repair_is_reported_and_the_others_still_run(
    store: EmbeddedStore, tmp_path: Path
) -> None:
    found = diagnose_turn(
        TurnObservation(
            CID,
            "t1",
            user_message=MessageObservation(False, "hello"),
            attachments=[AttachmentObservation(str(tmp_path / "gone.pdf"), False)],
        )
    )
    result = await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    assert [o.status for o in result] == ["applied", "failed"]
    assert result.outcomes[1].error is not None
    assert result.outcomes[1].error.startswith("FileNotFoundError")
    assert not result.ok
    assert result.repair_entity_id is not None
    summary = await _recorded(store, result.repair_entity_id)
    assert summary["repair_count"] == 1
    assert summary["error_count"] == 1
    assert summary["repairs"][1] == {
        "diagnosis_id": f"attachment-missing:{tmp_path / 'gone.pdf'}",
        "outcome": "failed",
        "action": "store_attachment",
        "error_class": "FileNotFoundError",
    }


async def test_a_store_failure_is_an_outcome_not_an_exception(store: EmbeddedStore) -> None:
    faulty = FaultyTransport(store).fail("store", ConnectionLost("down"), times=1)
    found = diagnose_turn(TurnObservation(CID, "t1", user_message=MessageObservation(False, "x")))
    result = await apply_repairs(faulty, found, conversation_id=CID, turn_id="t1")
    assert [o.status for o in result] == ["failed"]
    assert result.repair_entity_id is not None  # the summary store went through
    # Once the store is back, the same call repairs it.
    assert [
        o.status for o in await apply_repairs(faulty, found, conversation_id=CID, turn_id="t1")
    ] == ["applied"]


async def test_store_first_violation_is_a_warning_with_advice_only() -> None:
    found = diagnose_turn(
        TurnObservation(CID, "t1", tools_invoked=("web_search",), store_first_satisfied=False)
    )
    (problem,) = found
    assert (problem.id, problem.severity, problem.repair) == ("store-first-violation", "warn", None)
    assert not diagnose_turn(TurnObservation(CID, "t1", store_first_satisfied=False))


async def test_a_turn_left_open_is_closed_as_abandoned(store: EmbeddedStore) -> None:
    memory = NeotomaMemory(store, conversation_id=CID)
    await memory.open_turn("hello", turn_id="t1")
    found = diagnose_turn(
        TurnObservation(CID, "t1", user_message=MessageObservation(True), turn_status="open")
    )
    problem = by_id(found)["turn-left-open"]
    assert problem.repair == AbandonTurn(CID, "t1", "turn_left_open")
    assert not (await audit(store)).clean
    await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    assert (await audit(store)).clean


async def test_degraded_retrieval_is_a_warning(store: EmbeddedStore) -> None:
    faulty = FaultyTransport(store).fail("retrieve_entity_by_identifier", ConnectionLost("x"))
    memory = NeotomaMemory(faulty, conversation_id=CID)
    async with memory.turn("Tell me about Acme Corp and Ana Lopez", turn_id="t1") as t:
        t.reply = "Nothing found."
    found = by_id(diagnose_turn(t.result))
    assert found["retrieval-degraded"].severity == "warn"
    # Both names' lookups failed (Ana Lopez's among people and by surname too).
    assert t.retrieval.failures >= 2
    assert found["retrieval-degraded"].message.startswith(f"{t.retrieval.failures} lookups failed")
    assert found["assistant-message-stored"].ok


async def test_a_failed_closing_store_is_diagnosed_from_the_turn(store: EmbeddedStore) -> None:
    faulty = FaultyTransport(store).fail(
        "store",
        ConnectionLost("down"),
        when=lambda m, a, kw: key_phase(kw["idempotency_key"]) == "assistant",
    )
    memory = NeotomaMemory(faulty, conversation_id=CID, close_timeout=5)
    with pytest.raises(Exception, match="closing store"):
        async with memory.turn("hello", turn_id="t1") as t:
            t.reply = "Hi there."
    # The result alone does not keep the text: the only honest repair is to abandon.
    from_result = by_id(diagnose_turn(t.result))
    assert from_result["assistant-message-missing"].repair == AbandonTurn(
        CID, "t1", "assistant_reply_lost"
    )
    # The turn still has the reply: store exactly it.
    from_turn = diagnose_turn(t)
    assert by_id(from_turn)["assistant-message-missing"].repair == StoreAssistantMessage(
        CID, "t1", "Hi there."
    )
    await apply_repairs(store, from_turn, conversation_id=CID, turn_id="t1")
    report = await audit(store)
    assert report.clean
    assert not report.findings


async def test_ids_are_checked_before_any_io(store: EmbeddedStore) -> None:
    with pytest.raises(ValueError, match="turn_id"):
        TurnObservation(CID, "a:b")
    with pytest.raises(ValueError, match="conversation_id"):
        await apply_repairs(store, [], conversation_id="", turn_id="t1")
    with pytest.raises(ValueError, match="reason"):
        AbandonTurn(CID, "t1", "Not A Token")
    with pytest.raises(TypeError):
        StoreAssistantMessage(CID, "t1", None)  # type: ignore[arg-type]
    assert await totals(store) == (0, 0)


async def test_nothing_wrong_writes_nothing(store: EmbeddedStore) -> None:
    found = diagnose_turn(TurnObservation(CID, "t1", user_message=MessageObservation(True)))
    result = await apply_repairs(store, found, conversation_id=CID, turn_id="t1")
    assert len(result) == 0
    assert result.repair_entity_id is None
    assert await totals(store) == (0, 0)


def test_one_severity_vocabulary_grades_checks_findings_and_report_lines() -> None:
    from neotoma_agent.qa import Finding, FindingKind, ReportRepair, Severity

    assert [s.value for s in Severity] == ["info", "warn", "error"]
    passed = Diagnosis("user-message-stored", "info", "User message stored.")
    assert passed.severity is Severity.INFO
    assert passed.ok
    assert passed.to_json()["severity"] == "info"
    abandoned = Finding(FindingKind.ABANDONED_TURN, "info", CID, "t1", "closed as abandoned")
    # The audit's "nothing to fix" and a passed check are one word, not two.
    assert abandoned.severity is Severity.INFO
    assert not abandoned.problem
    assert abandoned.diagnosis().severity is Severity.INFO
    assert abandoned.diagnosis().ok
    assert abandoned.to_json()["severity"] == "info"
    assert ReportRepair("closed").severity is Severity.INFO
    with pytest.raises(ValueError, match="severity must be one of info, warn, error"):
        Diagnosis("x", "fatal", "bad")
    with pytest.warns(DeprecationWarning, match=r'"ok" is deprecated'):
        old = Diagnosis("x", "ok", "the older word")
    assert old.severity is Severity.INFO


async def test_repair_status_is_a_str_enum_of_the_json_words(store: EmbeddedStore) -> None:
    from neotoma_agent.qa import RepairStatus

    found = diagnose_turn(
        TurnObservation(CID, "t9", user_message=MessageObservation(False, "exact text"))
    )
    result = await apply_repairs(store, found, conversation_id=CID, turn_id="t9")
    (outcome,) = result.outcomes
    assert outcome.status is RepairStatus.APPLIED
    assert outcome.status == "applied"
    assert result.to_json()["outcomes"][0]["status"] == "applied"
    again = await apply_repairs(store, found, conversation_id=CID, turn_id="t9")
    assert again.outcomes[0].status is RepairStatus.REPLAYED
    assert not again.wrote
