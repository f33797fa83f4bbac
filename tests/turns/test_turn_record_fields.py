"""The declared ``conversation_turn`` fields a real Inspector shows, and re-runs that still
replay although a clock (or retrieval) gives other values the second time."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from turn_support import db_path, memory, seed, store, turn_record

from neotoma_agent import IdempotencyMismatchError
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


def _ms(iso: str) -> int:
    moment = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(moment.timestamp() * 1000)


async def _observations(store: Transport, record_id: str) -> list[dict[str, Any]]:
    return [dict(o.fields) for o in (await store.list_observations(record_id)).observations]


async def test_a_completed_turn_record_fills_the_declared_fields(store: Transport) -> None:
    [acme] = await seed(store, "Acme Corp")
    m = memory(store)
    async with m.turn("What about Acme Corp?", model="gpt-x") as t:
        prompt = t.context()
        t.record_tool("search", args={"q": "Acme"})
        task = t.remember("task", title="Call Acme Corp", status="open")
        t.reply = "Acme Corp is a customer."
    record = await turn_record(store, "chat-1", t.turn_id)
    assert record["status"] == "completed"
    assert record["harness"] == "tests"
    assert record["model"] == "gpt-x"  # written on enter, not blanked by the close
    # a default turn id is a UUIDv7: started_at is the time it carries
    assert _ms(record["started_at"]) == int(t.turn_id.replace("-", "")[:12], 16)
    assert _ms(record["ended_at"]) >= _ms(record["started_at"])
    assert record["retrieved_entity_ids"] == [acme]
    assert record["stored_entity_ids"] == [task]
    assert record["tool_invocation_count"] == 1
    assert record["injected_context_chars"] == len(prompt)
    [closing, opening] = await _observations(store, record["id"])
    # The close sends the value the enter wrote, never a new reading: the closing
    # observation holds every field of the snapshot (one copy on the embedded store).
    assert closing["started_at"] == opening["started_at"] == record["started_at"]
    assert "ended_at" not in opening


async def test_a_close_from_another_process_keeps_started_at(store: Transport) -> None:
    opened = await memory(store).open_turn("go", turn_id="prompt-1")
    record = await turn_record(store, "chat-1", "prompt-1")
    await memory(store).close_turn("prompt-1", "done")  # knows no started_at: sends none
    closed = await turn_record(store, "chat-1", "prompt-1")
    assert closed["status"] == "completed"
    assert closed["started_at"] == record["started_at"]
    [closing, _] = await _observations(store, record["id"])
    assert "started_at" not in closing
    assert opened.turn_id == "prompt-1"


async def test_a_rerun_over_a_close_written_without_started_at_replays(
    store: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written before closes resent started_at: a re-run of its turn still replays."""
    from neotoma_agent import _phases

    new_run = _phases.closing_run
    monkeypatch.setattr(
        _phases,
        "closing_run",
        lambda *args: new_run(*args)._replace(started_at=None),
    )
    m = memory(store)
    async with m.turn("q", turn_id="t1") as t:
        t.reply = "a"
    monkeypatch.setattr(_phases, "closing_run", new_run)
    async with m.turn("q", turn_id="t1") as t:
        t.reply = "a"
    assert t.result.replayed
    assert t.result.completed
    record = await turn_record(store, "chat-1", "t1")
    assert len(await _observations(store, record["id"])) == 2


async def test_an_abandoned_turn_record_has_its_fields_too(store: Transport) -> None:
    t = memory(store).turn("go", turn_id="t1")

    async def body() -> None:
        async with t:
            t.record_tool("search", status="error", error_class="Boom")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        await body()
    record = await turn_record(store, "chat-1", "t1")
    assert record["status"] == "abandoned"
    assert record["tool_invocation_count"] == 1
    assert record["retrieved_entity_ids"] == []
    assert "started_at" in record
    assert "ended_at" in record
    assert "model" not in record  # never written as null


async def test_a_rerun_of_a_turn_with_its_own_id_replays_both_stores(store: Transport) -> None:
    """A caller's id carries no time: the re-run reads the stored clock and sends it again."""
    m = memory(store)

    async def run() -> Any:
        async with m.turn("Flights to Lisbon?", turn_id="harness-msg-7", model="m") as t:
            t.record_tool("search", args={"to": "LIS"}, invoked_at="2026-12-01T10:00:00.000Z")
            t.reply = "Two offers."
        return t.result

    first = await run()
    record = await turn_record(store, "chat-1", "harness-msg-7")
    second = await run()
    assert second.replayed
    assert second.completed
    again = await turn_record(store, "chat-1", "harness-msg-7")
    assert again["started_at"] == record["started_at"]
    assert again["ended_at"] == record["ended_at"]
    assert len(await _observations(store, record["id"])) == 2  # one per phase, not four
    assert second.tool_ids == first.tool_ids


async def test_a_rerun_with_another_reply_is_still_a_mismatch(store: Transport) -> None:
    m = memory(store)
    async with m.turn("q", turn_id="t1") as t:
        t.reply = "one"
    with pytest.raises(IdempotencyMismatchError):
        async with m.turn("q", turn_id="t1") as t:
            t.reply = "two"


async def test_a_rerun_whose_retrieval_found_more_still_replays(store: Transport) -> None:
    m = memory(store)
    async with m.turn("What about Acme Corp?", turn_id="t1") as t:
        t.reply = "Nothing known."
    assert t.retrieved_ids == ()
    await seed(store, "Acme Corp")
    async with m.turn("What about Acme Corp?", turn_id="t1") as t:
        t.reply = "Nothing known."
    assert len(t.retrieved_ids) == 1
    assert t.result.replayed
    record = await turn_record(store, "chat-1", "t1")
    assert record["retrieved_entity_ids"] == []  # what the first run stored


async def test_a_redelivered_open_and_close_replay(store: Transport) -> None:
    """A hook fired twice: the explicit API over a caller's id, in two processes."""
    for _ in range(2):
        m = memory(store)
        opened = await m.open_turn("go", turn_id="prompt-1")
        result = await m.close_turn(opened, "done")
    assert opened.replayed
    assert result.replayed
    record = await turn_record(store, "chat-1", "prompt-1")
    assert len(await _observations(store, record["id"])) == 2


async def test_a_differently_abandoned_rerun_is_kept_and_its_retry_collapses(
    store: Transport,
) -> None:
    m = memory(store)
    for error in ("A", "B", "B"):
        opened = await m.open_turn("go", turn_id="t1")
        result = await m.abandon_turn(opened, error=error)
        assert result.stored_status == "abandoned"
    record = await turn_record(store, "chat-1", "t1")
    closes = [o for o in await _observations(store, record["id"]) if o["status"] == "abandoned"]
    assert sorted(o["error_class"] for o in closes) == ["A", "B"]


async def test_the_conversation_gets_harness_and_started_at_once(store: Transport) -> None:
    m = memory(store)

    async def run(turn_id: str) -> Any:
        async with m.turn("hello", turn_id=turn_id) as t:
            t.reply = "hi"
        return t.result

    first = await run("first")
    record = await turn_record(store, "chat-1", "first")
    conversation = (await store.get_entity_snapshot(first.conversation_entity_id)).snapshot
    assert conversation["harness"] == "tests"
    assert conversation["started_at"] == record["started_at"]
    await run("second")
    again = (await store.get_entity_snapshot(first.conversation_entity_id)).snapshot
    assert again["started_at"] == record["started_at"]  # the second turn did not move it
    rerun = await run("first")  # a re-run of the first turn: its user store replays
    assert rerun.replayed
    assert len(await _observations(store, record["id"])) == 2


async def test_the_explicit_api_names_the_model_on_the_turn_record(store: Transport) -> None:
    m = memory(store)
    await m.open_turn("go", turn_id="opened", model="m-open")
    await memory(store).close_turn("opened", "done")  # another process: knows no model
    assert (await turn_record(store, "chat-1", "opened"))["model"] == "m-open"
    await m.open_turn("go", turn_id="closed")
    await memory(store).close_turn("closed", "done", model="m-close")
    assert (await turn_record(store, "chat-1", "closed"))["model"] == "m-close"
    await m.open_turn("go", turn_id="abandoned")
    await memory(store).abandon_turn("abandoned", error="Stop", model="m-abandon")
    assert (await turn_record(store, "chat-1", "abandoned"))["model"] == "m-abandon"
    await m.record_turn("q", "a", turn_id="recorded", retrieve=False, model="m-record")
    assert (await turn_record(store, "chat-1", "recorded"))["model"] == "m-record"


async def test_started_at_is_the_time_a_uuid7_turn_id_carries_whenever_it_runs(
    store: Transport,
) -> None:
    from neotoma_agent.testing import RecordingTransport

    # A UUIDv7 minted on 2020-01-01T00:00:00.000Z: its turn started then, not when it runs.
    ms = 1_577_836_800_000
    turn_id = f"{ms:012x}"[:8] + "-" + f"{ms:012x}"[8:] + "-7000-8000-000000000001"
    m = memory(store)
    async with m.turn("q", turn_id=turn_id) as t:
        t.reply = "a"
    record = await turn_record(store, "chat-1", turn_id)
    assert record["started_at"] == "2020-01-01T00:00:00.000Z"
    # A re-run sends the same started_at: its user store replays at once; only the
    # closing store (ended_at is a clock reading) reads the record's observations.
    recorder = RecordingTransport(store)
    async with memory(recorder).turn("q", turn_id=turn_id) as again:
        again.reply = "a"
    assert again.result.replayed
    assert len(recorder.calls_to("list_observations")) <= 1
