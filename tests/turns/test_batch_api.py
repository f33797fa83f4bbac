"""``neotoma_agent.batch``: many finished turns recorded at once by public names.

What matters: each turn is stored as ``record_turn`` stores it (a second run replays, writing
nothing); a turn's own refusal is in its outcome and the others are stored; a turn with bad
input is refused when it is built, before any I/O; the embedded store takes a batch as one
job, any other transport turn by turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neotoma_agent import (
    EmbeddedStore,
    IdempotencyMismatchError,
    NeotomaMemory,
    ValidationError,
)
from neotoma_agent.batch import BatchOutcome, BatchStore, BatchTurn, record_batch
from neotoma_agent.reads import read_conversation
from neotoma_agent.testing import RecordingTransport

pytestmark = pytest.mark.anyio


def _turns(memory: NeotomaMemory, n: int) -> list[BatchTurn]:
    return [BatchTurn(memory, f"question {i}", f"answer {i}", f"t{i}") for i in range(n)]


async def test_a_batch_is_stored_as_record_turn_stores_it_and_replays(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        assert isinstance(store, BatchStore)
        chat = NeotomaMemory(store, conversation_id="imported")
        first = await record_batch(store, _turns(chat, 3), retrieve=False)
        assert first == [BatchOutcome()] * 3
        stored = await read_conversation(store, "imported")
        assert [(t.turn_id, t.status) for t in stored.turns] == [
            ("t0", "completed"),
            ("t1", "completed"),
            ("t2", "completed"),
        ]
        # the same turn recorded alone is a replay: the batch wrote what record_turn writes
        alone = await chat.record_turn("question 1", "answer 1", turn_id="t1", retrieve=False)
        assert alone.replayed
        again = await record_batch(store, _turns(chat, 3), retrieve=False)
        assert again == [BatchOutcome(replayed=True)] * 3


async def test_a_turns_refusal_is_its_own_and_the_others_are_stored(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        chat = NeotomaMemory(store, conversation_id="imported")
        await chat.record_turn("question 1", "answer 1", turn_id="t1", retrieve=False)
        turns = _turns(chat, 3)
        turns[1] = BatchTurn(chat, "question 1", "another answer", "t1")  # the key, reused
        outcomes = await record_batch(store, turns, retrieve=False)
        assert outcomes[0] == outcomes[2] == BatchOutcome()
        assert isinstance(outcomes[1].error, IdempotencyMismatchError)
        stored = await read_conversation(store, "imported")
        replies = {t.turn_id: t.message("assistant") for t in stored.turns}
        assert {k: m.content for k, m in replies.items() if m is not None} == {
            "t0": "answer 0",
            "t1": "answer 1",  # the first one, kept
            "t2": "answer 2",
        }


async def test_any_other_transport_records_turn_by_turn(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        wrapper = RecordingTransport(store)
        assert not isinstance(wrapper, BatchStore)
        chat = NeotomaMemory(wrapper, conversation_id="imported")
        outcomes = await record_batch(wrapper, _turns(chat, 4), retrieve=False, concurrency=2)
        assert outcomes == [BatchOutcome()] * 4
        assert len(wrapper.calls_to("store")) == 4
        assert wrapper.max_in_flight("store") <= 2


def test_a_turn_with_bad_input_is_refused_when_it_is_built() -> None:
    memory = object()  # never used: the checks run before anything reads the memory
    with pytest.raises(ValidationError, match="lone UTF-16 surrogate"):
        BatchTurn(memory, "bad \ud800", "ok", "t1")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="lone UTF-16 surrogate"):
        BatchTurn(memory, "ok", "bad \udc00", "t1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="turn_id"):
        BatchTurn(memory, "ok", "ok", "a:b")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="user_message must be a str"):
        BatchTurn(memory, 7, "ok", "t1")  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="turn_number"):
        BatchTurn(memory, "ok", "ok", "t1", turn_number=-1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="entity id"):
        BatchTurn(memory, "ok", "ok", "t1", refers_to=("Acme",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a str"):
        BatchTurn(memory, "ok", "ok", "t1", refers_to="ent_" + "0" * 24)  # type: ignore[arg-type]
    turn = BatchTurn(memory, "ok", "ok", "t1", refers_to=["ent_" + "0" * 24])  # type: ignore[arg-type]
    assert turn.refers_to == ("ent_" + "0" * 24,)
