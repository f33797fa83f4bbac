"""The explicit API traced: ``record_turn`` is one ``turn`` span; ``open_turn`` and
``close_turn`` / ``abandon_turn`` a span each (turns spread over calls or processes)."""

from __future__ import annotations

import pytest
from otel_support import Served, Telemetry

from neotoma_agent import NeotomaMemory

pytestmark = pytest.mark.anyio


def kids(telemetry: Telemetry, parent_name: str) -> list[tuple[str, object]]:
    (parent,) = telemetry.named(parent_name)
    return sorted(
        (s.name, s.attributes.get("neotoma_agent.phase")) for s in telemetry.children(parent)
    )


async def test_record_turn_is_one_turn_span(served: Served, telemetry: Telemetry) -> None:
    memory = NeotomaMemory(served.transport, conversation_id="c", platform="tests")
    result = await memory.record_turn("What about Acme Corp?", "A customer.")
    turn = telemetry.turn()
    assert turn.attributes["neotoma_agent.turn.outcome"] == "completed"
    assert turn.attributes["gen_ai.memory.record.id"] == result.turn_record_id
    assert kids(telemetry, "turn") == [
        ("search_memory", "retrieval"),
        ("upsert_memory", "recorded"),
    ]
    (count,) = telemetry.points("neotoma_agent.turns")
    assert count.value == 1


async def test_open_and_close_are_a_span_each(served: Served, telemetry: Telemetry) -> None:
    memory = NeotomaMemory(served.transport, conversation_id="c", platform="tests")
    opened = await memory.open_turn("What about Acme Corp?")
    (first,) = telemetry.named("open_turn")
    assert first.attributes["neotoma_agent.turn.outcome"] == "open"
    assert ("upsert_memory", "user") in kids(telemetry, "open_turn")
    assert telemetry.points("neotoma_agent.turns") == []  # not a finished turn yet
    await memory.abandon_turn(opened, error=TimeoutError("the model timed out"))
    (close,) = telemetry.named("close_turn")
    assert close.attributes["neotoma_agent.turn.outcome"] == "abandoned"
    assert close.attributes["error.type"] == "TimeoutError"
    assert close.attributes["neotoma_agent.turn.id"] == opened.turn_id
    assert kids(telemetry, "close_turn") == [("upsert_memory", "abandoned")]
    (count,) = telemetry.points("neotoma_agent.turns")
    assert count.attributes["neotoma_agent.turn.outcome"] == "abandoned"
