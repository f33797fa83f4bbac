"""The markdown turn report: exact text for a full turn, an empty turn, and issues + repairs."""

from __future__ import annotations

import pytest
from turn_support import db_path, store

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.qa import (
    Diagnosis,
    MessageObservation,
    ReportEntity,
    ReportRepair,
    TurnObservation,
    TurnReportInput,
    apply_repairs,
    diagnose_turn,
    render_turn_report,
    resolve_inspector_base_url,
    resolve_ui_url,
)
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]  # fixtures

# The report is text over a finished audit.
pytestmark = pytest.mark.one_backend

BASE = "https://inspector.example.com"
CONVERSATION_ENTITY = "ent_f15284c1f078e824e4e9bb3b"  # conversation chat-42


@pytest.fixture(autouse=True)
def _no_inspector_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEOTOMA_INSPECTOR_URL", raising=False)
    monkeypatch.delenv("NEOTOMA_AGENT_UI_URL", raising=False)
    monkeypatch.delenv("NEOTOMA_BASE_URL", raising=False)


def test_full_turn_report() -> None:
    report = TurnReportInput(
        conversation=ReportEntity("conversation", "Trip planning", CONVERSATION_ENTITY),
        retrieved=[
            ReportEntity("company", "Acme", "ent_af939bedafbd1838b259772a"),
            ReportEntity("person", "Ana Lopez", "ent_c288134d4239c01f8f06b891"),
        ],
        created=[ReportEntity("task", "Send invoice", "ent_e399693024172dde25351043")],
        updated=[ReportEntity("recipe", "My pancakes", "ent_248a495c67293b3677252e0d")],
        diagnoses=[Diagnosis("user-message-stored", "info", "User message stored.")],
    )
    assert render_turn_report(report, inspector_base_url=BASE + "/") == (
        "---\n"
        "\n"
        f"## 🧠 Neotoma — [Trip planning]({BASE}/conversations/{CONVERSATION_ENTITY})\n"
        "\n"
        "Retrieved (2)\n"
        f"- 🏢 Acme ([company]({BASE}/entities/ent_af939bedafbd1838b259772a))\n"
        f"- 👤 Ana Lopez ([person]({BASE}/entities/ent_c288134d4239c01f8f06b891))\n"
        "\n"
        "Created (1)\n"
        f"- ✅ Send invoice ([task]({BASE}/entities/ent_e399693024172dde25351043))\n"
        "\n"
        "Updated (1)\n"
        f"- 🗂️ My pancakes ([recipe]({BASE}/entities/ent_248a495c67293b3677252e0d))\n"
    )


@pytest.mark.anyio
async def test_empty_turn_report_from_the_turn_result() -> None:
    async with EmbeddedStore.open(":memory:") as store:
        memory = NeotomaMemory(store, conversation_id="chat-42")
        async with memory.turn("ok", turn_id="t1") as t:
            t.reply = "ok"
    assert render_turn_report(t.result, inspector_base_url=BASE) == (
        "---\n"
        "\n"
        f"## 🧠 Neotoma — [chat-42]({BASE}/conversations/{CONVERSATION_ENTITY})\n"
        "\n"
        "No durable facts read or written this turn.\n"
    )


def test_report_with_nothing_known() -> None:
    assert render_turn_report(TurnReportInput(), inspector_base_url=BASE) == (
        "---\n\n## 🧠 Neotoma\n\nNo durable facts read or written this turn.\n"
    )


@pytest.mark.anyio
async def test_report_with_issues_and_repairs() -> None:
    async with EmbeddedStore.open(":memory:") as store:
        memory = NeotomaMemory(store, conversation_id="chat-42")
        await memory.open_turn("Book the hotel", turn_id="t1")
        diagnoses = diagnose_turn(
            TurnObservation(
                "chat-42",
                "t1",
                user_message=MessageObservation(stored=True),
                assistant_message=MessageObservation(stored=False, content="Booked."),
                assistant_reply_produced=True,
                tools_invoked=("calendar",),
                store_first_satisfied=False,
            )
        )
        repairs = await apply_repairs(store, diagnoses, conversation_id="chat-42", turn_id="t1")
    report = TurnReportInput(
        conversation=ReportEntity("conversation", "chat-42", CONVERSATION_ENTITY),
        diagnoses=diagnoses,
    )
    repair_entity = "ent_3e9a3a87e692e18061ab9ae2"  # neotoma_repair:chat-42:t1
    assert repairs.repair_entity_id == repair_entity
    assert render_turn_report(report, repairs=repairs, inspector_base_url=BASE) == (
        "---\n"
        "\n"
        f"## 🧠 Neotoma — [chat-42]({BASE}/conversations/{CONVERSATION_ENTITY})\n"
        "\n"
        "No durable facts read or written this turn.\n"
        "\n"
        "Issues (2)\n"
        "- 🔴 A reply was shown to the user but the assistant message was not stored. "
        "(`assistant-message-missing`) — Now: The stored conversation stops at the user's "
        "message: the turn is half-stored, against the both-halves-or-neither rule. — If "
        "left: Later recall shows an unanswered question, and the next turn may repeat or "
        "contradict the reply the user already saw. — Fix: Store the reply now with its "
        "exact text and mark the turn completed.\n"
        "- 🟡 Other tools ran before the user message was stored. (`store-first-violation`) "
        "— Now: Work started from a turn that was not yet durable: a crash in those tools "
        "would have lost the user's message. — If left: If this keeps happening, turns go "
        "missing exactly when something fails, which is when they matter most. — Fix: Store "
        "the user message first (enter the turn) and only then call other tools.\n"
        "\n"
        "Repairs (1)\n"
        f"- 🛠️ Stored the missing assistant reply of turn t1 "
        f"([neotoma_repair]({BASE}/entities/{repair_entity}))\n"
    )


def test_failed_repairs_and_missing_ids_are_marked() -> None:
    report = TurnReportInput(
        created=[ReportEntity("note", "Draft")],
        repairs=[
            ReportRepair("Recorded attachment a.pdf: failed (FileNotFoundError)", None, "error")
        ],
    )
    text = render_turn_report(report, inspector_base_url=BASE)
    assert "- 📝 Draft (no id: see Issues)\n" in text
    assert "- 🔴 Recorded attachment a.pdf: failed (FileNotFoundError)\n" in text


def test_labels_cannot_break_the_markdown() -> None:
    report = TurnReportInput(
        retrieved=[ReportEntity("note", "a ] (x) [b\nsecond line", "ent_" + "0" * 24)]
    )
    line = render_turn_report(report, inspector_base_url=BASE).splitlines()[5]
    assert line == f"- 📝 a \\] (x) \\[b second line ([note]({BASE}/entities/ent_{'0' * 24}))"


def test_link_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing configured: no guess (a link must lead to a page that answers); the API
    # server's address is not an Inspector's.
    monkeypatch.setenv("NEOTOMA_BASE_URL", "http://base:1/")
    assert resolve_inspector_base_url() is None
    assert resolve_ui_url() is None
    bare = TurnReportInput(
        conversation=ReportEntity("conversation", "chat 1", "ent_x"),
        retrieved=[ReportEntity("company", "Acme", "ent_a")],
    )
    assert render_turn_report(bare) == (
        "---\n\n## 🧠 Neotoma — chat 1\n\nRetrieved (1)\n- 🏢 Acme (company)\n"
    )
    monkeypatch.setenv("NEOTOMA_INSPECTOR_URL", "http://inspector:2")
    assert resolve_inspector_base_url() == "http://inspector:2"
    assert resolve_inspector_base_url("http://explicit:3/") == "http://explicit:3"
    assert resolve_inspector_base_url("") == "http://inspector:2"
    assert "(http://inspector:2/conversations/ent_x)" in render_turn_report(bare)
    # The web view wins over the Inspector; its routes take ids as query parameters.
    monkeypatch.setenv("NEOTOMA_AGENT_UI_URL", "http://127.0.0.1:8080/ui/")
    assert resolve_ui_url() == "http://127.0.0.1:8080/ui"
    text = render_turn_report(bare)
    assert "[chat 1](http://127.0.0.1:8080/ui/conversation?id=chat%201)" in text
    assert "([company](http://127.0.0.1:8080/ui/entity?id=ent_a))" in text
    # An explicit argument wins over both variables.
    text = render_turn_report(bare, inspector_base_url="http://explicit:3")
    assert "(http://explicit:3/entities/ent_a)" in text


@pytest.mark.anyio
async def test_report_lists_what_the_turn_created_and_updated(store: Transport) -> None:
    # The split comes from the closing store's answer: on both transports.
    memory = NeotomaMemory(store, conversation_id="chat-42")
    async with memory.turn("Add a task", turn_id="t1") as t:
        t.remember("task", title="Send invoice")
        t.reply = "Added."
    first = t.result
    async with memory.turn("Rename it", turn_id="t2") as t2:
        t2.remember("task", title="Send invoice", status="done")
        t2.remember("company", name="Globex")
        t2.reply = "Done."
    (task,) = first.produced_ids
    assert first.created_ids == (task,)
    assert render_turn_report(t, ui_url="http://ui").splitlines()[4:6] == [
        "Created (1)",
        f"- ✅ Send invoice ([task](http://ui/entity?id={task}))",
    ]
    globex = next(i for i in t2.result.produced_ids if i != task)
    assert t2.result.created_ids == (globex,)
    text = render_turn_report(t2)
    assert "Created (1)\n- 🏢 Globex (company)\n\nUpdated (1)\n- ✅ Send invoice (task)\n" in text
    # From the result alone the split is the same; names are the ids.
    by_result = render_turn_report(t2.result)
    assert f"Created (1)\n- 🗂️ {globex} (entity)\n" in by_result
    assert f"Updated (1)\n- 🗂️ {task} (entity)\n" in by_result


@pytest.mark.anyio
async def test_turn_result_lists_retrieved_and_cited_entities() -> None:
    async with EmbeddedStore.open(":memory:") as store:
        seeded = await store.store(
            [
                {"entity_type": "company", "name": "Acme Corp.", "website": "acme.com"},
                {"entity_type": "task", "title": "Send invoice"},
            ],
            idempotency_key="seed",
        )
        acme, task = seeded.entity_id(0), seeded.entity_id(1)
        memory = NeotomaMemory(store, conversation_id="chat-42")
        async with memory.turn("What do we know about Acme Corp?", turn_id="t1") as t:
            t.reply = "A client."
            t.cite(task)
    by_result = render_turn_report(t.result, inspector_base_url=BASE)
    assert "Retrieved (2)\n" in by_result
    assert f"({BASE}/entities/{acme})" in by_result
    assert f"({BASE}/entities/{task})" in by_result
    # From the turn itself the retrieved entities are at hand: type and name are shown.
    by_turn = render_turn_report(t, inspector_base_url=BASE)
    assert f"- 🏢 Acme Corp. ([company]({BASE}/entities/{acme}))\n" in by_turn
    assert "Issues" not in by_turn


@pytest.mark.anyio
async def test_abandoned_turn_reports_its_issue() -> None:
    async with EmbeddedStore.open(":memory:") as store:
        memory = NeotomaMemory(store, conversation_id="chat-42")
        turn = memory.turn("hi", turn_id="t1")

        async def body() -> None:
            async with turn as t:
                t.reply = "par"
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await body()
    text = render_turn_report(turn.result, inspector_base_url=BASE)
    assert "Issues (1)\n- 🟡 The turn was abandoned after RuntimeError; a partial reply " in text
    assert "(`turn-abandoned`)" in text
