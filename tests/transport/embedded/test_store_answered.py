"""``EmbeddedStore.store`` answered on the store's thread, and a store's new message placed
in its conversation with no read first: the same rows and the same answers.

``store`` hands its body to the store's thread and gets the :class:`StoreResult` back,
whose answer JSON (``raw``) and entries are made from what the store wrote when first
read; ``request("store", body)`` answers the JSON itself. Both are run on two files with
the same bodies (the clock fixed): every answer and every row must be the same.

A store that creates a message and gives its PART_OF edge to its conversation writes the
index row without reading whether it is there (a message the store created has no edge
but those it writes), and moves the conversation's message count in the conversation
row's own write; an entity the store loaded is checked for its row's first observation
from the loaded row. The edge cases (the edge twice, with metadata, to a conversation not
in the store, two messages of one conversation, the same content under a new key) must
count each message once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from observation_rows_support import every_table
from part_of_support import clock

from neotoma_agent import ValidationError
from neotoma_agent.transport._bodies import store_body
from neotoma_agent.transport._results import StoreResult
from neotoma_agent.transport.embedded import EmbeddedStore, _store_answer, _turn_write, _write
from neotoma_agent.transport.embedded._connect import connect

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_write, "now_iso", lambda: "2026-01-02T03:04:05.678Z")


def _turn(conversation: str, turn: int, text: str) -> dict[str, Any]:
    """A turn-shaped store: conversation, message, turn record, the message's PART_OF."""
    tid = f"t{turn}"
    return {
        "entities": [
            {"entity_type": "conversation", "conversation_id": conversation, "title": "T"},
            {
                "entity_type": "conversation_message",
                "role": "user",
                "sender_kind": "user",
                "content": text,
                "turn_key": f"{conversation}:{tid}",
            },
            {
                "entity_type": "conversation_turn",
                "session_id": conversation,
                "turn_id": tid,
                "turn_key": f"{conversation}:{tid}",
                "status": "open",
            },
        ],
        "relationships": [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
        "idempotency_key": f"{conversation}-{tid}",
    }


def _part_of(source: int, target: int, **metadata: Any) -> dict[str, Any]:
    edge: dict[str, Any] = {
        "relationship_type": "PART_OF",
        "source_index": source,
        "target_index": target,
    }
    if metadata:
        edge["metadata"] = metadata
    return edge


def _stores() -> list[dict[str, Any]]:
    """Store calls (``store``'s keywords) that reach every kind of answer and edge."""
    calls = [_turn(f"c{i % 3}", i, f"message {i}") for i in range(6)]
    calls.append(_turn("c1", 1, "message 1"))  # a replay
    same = _turn("c1", 1, "message 1")
    calls.append({**same, "idempotency_key": "same-content-new-key"})
    twice = _turn("c2", 50, "m50")
    calls.append({**twice, "idempotency_key": "edge-twice", "relationships": [_part_of(1, 0)] * 2})
    meta = _turn("c2", 51, "m51")
    relationships = [_part_of(1, 0, why="a"), _part_of(1, 0)]
    calls.append({**meta, "idempotency_key": "meta-first", "relationships": relationships})
    plain = _turn("c2", 52, "m52")
    relationships = [_part_of(1, 0), _part_of(1, 0, why="b")]
    calls.append({**plain, "idempotency_key": "plain-first", "relationships": relationships})
    two = _turn("c0", 53, "m53")
    second = _turn("c0", 54, "m54")["entities"]
    calls.append(
        {
            "entities": [*two["entities"], dict(second[0], title="U"), second[1]],
            "relationships": [_part_of(1, 0), _part_of(4, 3)],
            "idempotency_key": "two-messages",
        }
    )
    # Advisories: an undeclared field, and a message with no content.
    odd = _turn("c9", 55, "")
    odd["entities"][0]["undeclared"] = "x"
    calls.append({**odd, "idempotency_key": "advised"})
    # A message alone, with no conversation in the store (its count is read).
    alone = _turn("c0", 56, "m56")
    calls.append({"entities": [alone["entities"][1]], "idempotency_key": "alone"})
    return calls


def _ids(result: StoreResult, size: int) -> list[str | None]:
    ids: list[str | None] = []
    for index in range(size):
        try:
            ids.append(result.entity_id(index))
        except IndexError:  # a replay whose entry has no index
            ids.append(None)
    return ids


def _said(result: StoreResult, size: int) -> tuple[Any, ...]:
    return (
        result.raw,
        result.replayed,
        result.source_id,
        result.entities_created,
        result.observations_created,
        result.entities,
        _ids(result, size),
    )


@pytest.mark.parametrize("user", [None, "ada@example.test"])
async def test_store_answers_and_writes_as_its_request_does(
    tmp_path: Path, user: str | None
) -> None:
    async with (
        EmbeddedStore.open(tmp_path / "typed.db") as typed_store,
        EmbeddedStore.open(tmp_path / "json.db") as json_store,
    ):
        typed = typed_store if user is None else typed_store.for_user(user)
        by_json = json_store if user is None else json_store.for_user(user)
        for call in _stores():
            body = store_body(**call)
            answer = await typed.store(**call)
            parsed = StoreResult.from_json(
                await by_json.request("store", body), request_entities=body["entities"]
            )
            assert _said(answer, len(call["entities"])) == _said(parsed, len(call["entities"]))
        # A refusal is the same error, and leaves nothing on either file.
        bad = {
            "entities": [
                {"entity_type": "conversation_message", "role": "assistant", "turn_key": "c0:t0"}
            ],
            "idempotency_key": "refused",
        }
        with pytest.raises(ValidationError) as typed_error:
            await typed.store(**bad)
        with pytest.raises(ValidationError) as json_error:
            await by_json.request("store", store_body(**bad))
        assert str(typed_error.value) == str(json_error.value)
    assert every_table(tmp_path / "typed.db") == every_table(tmp_path / "json.db")


async def test_a_store_answer_is_made_when_first_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    inner = _store_answer.answer_json

    def counted(*args: Any) -> dict[str, Any]:
        made.append(1)
        return inner(*args)

    monkeypatch.setattr(_turn_write, "answer_json", counted)
    async with EmbeddedStore.open(tmp_path / "s.db") as store:
        answer = await store.store(**_turn("c1", 1, "hello"))
        assert made == []  # ids are read with no answer JSON made
        message_id = answer.entity_id(1)
        assert made == []
        assert answer.entities[1].entity_id == message_id
        assert answer.raw["conversation_message_count"] == 1
        assert answer.raw["entities"][1]["entity_id"] == message_id
        assert made == [1]  # once, whatever is read after


def _count_of(path: Path, conversation_id: str) -> tuple[int, int]:
    """A conversation's message count, and its rows in the conversation index."""
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute(
            "SELECT message_count FROM entities WHERE id = ?", (bytes.fromhex(conversation_id[4:]),)
        ).fetchone()
        (rows,) = conn.execute(
            "SELECT count(*) FROM conversation_messages "
            "WHERE conversation_row = (SELECT rowid FROM entities WHERE id = ?)",
            (bytes.fromhex(conversation_id[4:]),),
        ).fetchone()
    conn.close()
    return int(count), int(rows)


async def test_each_message_is_counted_once_in_its_conversation(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    answers: list[StoreResult] = []
    async with EmbeddedStore.open(path) as store:
        for call in _stores():
            answers.append(await store.store(**call))
        conversations = {
            e.entity_id: e for a in answers for e in a.entities if e.entity_type == "conversation"
        }
        messages: dict[str, set[str]] = {}
        for answer in answers:
            for e in answer.entities:
                if e.entity_type == "conversation_message":
                    related = await store.retrieve_related_entities(
                        e.entity_id, relationship_types=["PART_OF"], direction="outbound"
                    )
                    for r in related.relationships:
                        if r.source_entity_id == e.entity_id:
                            messages.setdefault(r.target_entity_id, set()).add(e.entity_id)
        # c0: 2 turns, two messages in one store, and the message alone (no edge); c1: 2
        # turns (the replay and the same content under a new key add none); c2: 2 turns
        # and three stores whose edge was given twice; c9: one.
        assert {
            conversations[c].snapshot["conversation_id"]: len(m) for c, m in messages.items()
        } == {"c0": 4, "c1": 2, "c2": 5, "c9": 1}
        for conversation, placed in messages.items():
            assert _count_of(path, conversation) == (len(placed), len(placed))
        # Each answer that carries a message says its conversation's count then.
        last = answers[-3]  # the two messages of c0 in one store
        assert last.raw["conversation_message_count"] == 4
        # The same content under a new key found the message's observation in its row.
        same = answers[7]
        assert [e.observation_id for e in same.entities] == [
            e.observation_id for e in answers[1].entities
        ]
        observations = await store.list_observations(same.entity_id(1))
        assert len(observations.observations) == 1


def test_a_new_message_is_placed_with_no_read_first(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "s.db"), "NORMAL")()
    run: list[str] = []

    def store(call: Mapping[str, Any]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        _write.store(conn, call)
        conn.execute("COMMIT")

    # (one store a millisecond: one at the time of its conversation's last observation
    # would read its restatement derived then, if any: ``_derived_restatement``)
    with clock(0):
        store(_turn("c1", 0, "first"))
        conn.set_trace_callback(run.append)
        store(_turn("c1", 1, "second"))
        conn.set_trace_callback(None)
    statements: Sequence[str] = [s for s in run if not s.startswith("--")]
    # No read of the index for the new message, no UPDATE of the count alone, no read of
    # the conversation row's first observation: the row was loaded with the plan.
    assert not [s for s in statements if "FROM conversation_messages WHERE message_row" in s]
    assert not [s for s in statements if s.startswith("UPDATE entities SET message_count")]
    assert not [s for s in statements if "first_id = " in s and s.startswith("SELECT")]
    # BEGIN and COMMIT among them; the message and the turn record, one names document
    # (queued, and a look at whether the queue is full: _name_queue); the conversation's
    # restatement derived from the message, no row (_derived_restatement)
    assert len(statements) == 14
    conversation = (
        "ent_"
        + conn.execute(
            "SELECT hex(c.id) FROM conversation_messages cm "
            "JOIN entities c ON c.rowid = cm.conversation_row LIMIT 1"
        )
        .fetchone()[0]
        .lower()
    )
    conn.close()
    assert _count_of(tmp_path / "s.db", conversation) == (2, 2)
