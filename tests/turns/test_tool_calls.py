"""Tool calls inside a turn: recorded while the body runs, written in the closing store as
``tool_invocation`` entities whose snapshots hold exactly the declared fields."""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from typing import Any

import anyio
import pytest
from turn_support import db_path, edges, memory, store, turn_record

from neotoma_agent import (
    IdempotencyMismatchError,
    NeotomaMemory,
    ToolCall,
    ToolCallConflictError,
    TurnState,
    TurnStateError,
    ValidationError,
    current_turn,
)
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio

DECLARED = {"turn_key", "tool_name", "invoked_at", "duration_ms", "result_status", "harness"}


class Boom(Exception):
    pass


async def _observation(store: Transport, entity_id: str) -> dict[str, Any]:
    [obs] = (await store.list_observations(entity_id)).observations
    return dict(obs.fields)


async def test_a_call_is_one_tool_invocation_in_the_closing_store(store: Transport) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    async with m.turn("Flights to Lisbon?", turn_id="t1") as t:
        async with t.tool("search_flights", {"to": "LIS"}) as call:
            call.result = {"offers": 2}
        t.reply = "Two offers."
    assert len(recorder.calls_to("store")) == 2  # the call rides on the closing store
    [rec] = t.result.tools
    assert (rec.name, rec.status) == ("search_flights", "ok")
    assert (rec.args, rec.result) == ({"to": "LIS"}, {"offers": 2})
    assert rec.invoked_at.endswith("Z")
    assert len(rec.invoked_at) == len("2026-01-01T00:00:00.000Z")
    assert rec.duration_ms is not None
    assert rec.duration_ms >= 0
    [tool_id] = t.result.tool_ids
    snap = await store.get_entity_snapshot(tool_id)
    assert snap.entity_type == "tool_invocation"
    assert set(snap.snapshot) == DECLARED
    assert snap.snapshot["turn_key"] == "chat-1:t1"
    assert snap.snapshot["result_status"] == "ok"
    assert snap.snapshot["harness"] == "tests"
    assert snap.snapshot["invoked_at"] == rec.invoked_at
    fields = await _observation(store, tool_id)
    assert fields["arguments"] == {"to": "LIS"}
    assert fields["result"] == {"offers": 2}
    record = await turn_record(store, "chat-1", "t1")
    assert tool_id in {e.target_entity_id for e in await edges(store, record["id"], "REFERS_TO")}


async def test_twenty_calls_are_still_two_stores(store: Transport) -> None:
    recorder = RecordingTransport(store)
    async with memory(recorder).turn("go", turn_id="t1") as t:
        for i in range(20):
            async with t.tool("step", {"i": i}) as call:
                call.result = i
        t.reply = "done"
    assert len(recorder.calls_to("store")) == 2
    assert len(set(t.result.tool_ids)) == 20
    assert [c.args["i"] for c in t.result.tools] == list(range(20))


async def test_a_failing_tool_ends_error_and_the_turn_abandoned(store: Transport) -> None:
    t = memory(store).turn("go", turn_id="t1")
    failure = Boom("no")

    async def body() -> None:
        async with t:
            t.reply = "Searching"
            async with t.tool("search", {"q": 1}):
                raise failure

    with pytest.raises(Boom) as raised:
        await body()
    assert raised.value is failure  # the body's exception, unchanged
    assert t.result.status is TurnState.ABANDONED
    [rec] = t.result.tools
    assert rec.status == "error"
    assert rec.error_class == f"{Boom.__module__}.Boom"
    [tool_id] = t.result.tool_ids
    assert (await store.get_entity_snapshot(tool_id)).snapshot["result_status"] == "error"
    assert (await _observation(store, tool_id))["error_class"] == rec.error_class


async def test_an_abandoned_turn_keeps_the_calls_it_made(store: Transport) -> None:
    t = memory(store).turn("go", turn_id="t1")

    async def body() -> None:
        async with t:
            async with t.tool("lookup", {"name": "Acme"}) as call:
                call.result = []
            raise Boom

    with pytest.raises(Boom):
        await body()
    assert t.result.stored_status == "abandoned"
    [rec] = t.result.tools
    assert rec.status == "ok"
    record = await turn_record(store, "chat-1", "t1")
    [tool_id] = t.result.tool_ids
    assert tool_id in {e.target_entity_id for e in await edges(store, record["id"], "REFERS_TO")}


async def test_a_cancelled_tool_ends_cancelled_and_the_cancellation_propagates(
    store: Transport, anyio_backend: str
) -> None:
    m = memory(store)
    with anyio.CancelScope() as scope:
        async with m.turn("go", turn_id="t1") as t:
            t.reply = "partial"
            async with t.tool("slow", {"s": 60}):
                scope.cancel()
                await anyio.sleep(60)
            t.reply = "never"
    assert scope.cancelled_caught  # the cancellation reached the scope that asked for it
    assert t.result.status is TurnState.ABANDONED
    [rec] = t.result.tools
    assert rec.status == "cancelled"
    assert rec.error_class is not None
    [tool_id] = t.result.tool_ids
    assert (await store.get_entity_snapshot(tool_id)).snapshot["result_status"] == "cancelled"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_task_cancel_inside_a_tool_is_recorded_and_raised(db_path: Any) -> None:
    from neotoma_agent import EmbeddedStore

    async with EmbeddedStore.open(db_path) as embedded:
        m = memory(embedded)
        entered = asyncio.Event()
        holder: dict[str, Any] = {}

        async def agent() -> None:
            async with m.turn("go", turn_id="t1") as t:
                holder["t"] = t
                async with t.tool("slow"):
                    entered.set()
                    await asyncio.sleep(60)

        task = asyncio.ensure_future(agent())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        t = holder["t"]
        assert t.result.stored_status == "abandoned"
        assert [c.status for c in t.result.tools] == ["cancelled"]
        assert t.result.tools[0].error_class == "asyncio.exceptions.CancelledError"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is new in 3.11")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_timeout_inside_a_tool_ends_it_cancelled(db_path: Any) -> None:
    from neotoma_agent import EmbeddedStore

    async with EmbeddedStore.open(db_path) as embedded:
        m = memory(embedded)
        # its cancellation becomes its TimeoutError; the call ends cancelled
        t2 = m.turn("again", turn_id="t2")

        async def timed_out() -> None:
            deadline = asyncio.timeout(None)  # type: ignore[attr-defined, unused-ignore]
            async with deadline, t2, t2.tool("slow"):
                # Armed once the tool runs: a turn slow to open (a loaded machine) must
                # not see the deadline pass before its tool starts.
                deadline.reschedule(asyncio.get_running_loop().time() + 0.05)
                await asyncio.sleep(60)

        with pytest.raises(TimeoutError):
            await timed_out()
        assert [c.status for c in t2.result.tools] == ["cancelled"]
        assert t2.result.stored_status == "abandoned"


async def test_invoked_at_is_read_when_the_call_starts_and_duration_times_the_body(
    store: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neotoma_agent._records import tools as _tools

    start = 1_796_000_000_000  # the clock on enter; the body moves it on a minute
    monkeypatch.setattr(_tools, "now_ms", lambda: start)
    async with memory(store).turn("go", turn_id="t1") as t:
        async with t.tool("slow", {"n": 1}) as call:
            monkeypatch.setattr(_tools, "now_ms", lambda: start + 60_000)
            await anyio.sleep(0.03)
            call.result = 1
        monkeypatch.setattr(_tools, "now_ms", lambda: start)
        with t.tool("slow_sync", {"n": 2}):
            monkeypatch.setattr(_tools, "now_ms", lambda: start + 60_000)
            await anyio.sleep(0.03)  # a sync with block, awaited inside
        t.reply = "ok"
    for rec in t.result.tools:
        assert rec.invoked_at == _tools.iso_ms(start), rec.name  # read once, on enter
        assert rec.duration_ms is not None
        assert rec.duration_ms >= 25, rec.name  # the body's time (it slept 30 ms)


async def test_record_tool_keeps_a_call_a_framework_made(store: Transport) -> None:
    at = datetime.datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=datetime.timezone.utc)
    async with memory(store).turn("go", turn_id="t1") as t:
        rec = t.record_tool(
            "search_flights",
            args={"to": "LIS"},
            result={"offers": []},
            status="error",
            invoked_at=at,
            duration_ms=312.5,
            call_id="toolu_01",
            error_class="HTTPError",
        )
        t.reply = "Sorry."
    assert rec.invoked_at == "2026-12-01T10:00:00.123Z"
    [tool_id] = t.result.tool_ids
    snap = (await store.get_entity_snapshot(tool_id)).snapshot
    assert snap["duration_ms"] == 312.5
    assert snap["invoked_at"] == "2026-12-01T10:00:00.123Z"
    assert set(snap) == DECLARED  # the call id and error class stay on the observation
    fields = await _observation(store, tool_id)
    assert (fields["call_id"], fields["error_class"]) == ("toolu_01", "HTTPError")


async def test_a_repeated_call_id_is_a_no_op_and_other_content_is_refused(
    store: Transport,
) -> None:
    async with memory(store).turn("go", turn_id="t1") as t:
        first = t.record_tool("search", args={"q": 1}, result=[1], call_id="c1")
        again = t.record_tool("search", args={"q": 1}, result=[1], call_id="c1")
        assert again == first
        with pytest.raises(ToolCallConflictError):
            t.record_tool("search", args={"q": 2}, result=[1], call_id="c1")
        with pytest.raises(ValueError, match="different content"):  # a ValueError too
            t.record_tool("search", args={"q": 1}, result=[1], call_id="c1", invoked_at=_iso(0))
        t.reply = "ok"
    assert len(t.result.tools) == 1
    assert len(t.result.tool_ids) == 1


def _iso(ms: int) -> str:
    return f"2026-12-01T10:00:00.{ms:03d}Z"


async def test_two_calls_in_one_millisecond_never_merge(store: Transport) -> None:
    async with memory(store).turn("go", turn_id="t1") as t:
        a = t.record_tool("search", args={"q": "a"}, invoked_at=_iso(5))
        b = t.record_tool("search", args={"q": "b"}, invoked_at=_iso(5))
        c = t.record_tool("SEARCH", args={"q": "c"}, invoked_at=_iso(5))  # folds with search
        d = t.record_tool("other", args={"q": "d"}, invoked_at=_iso(5))
        t.reply = "ok"
    assert [a.invoked_at, b.invoked_at, c.invoked_at] == [_iso(5), _iso(6), _iso(7)]
    assert d.invoked_at == _iso(5)
    assert len(set(t.result.tool_ids)) == 4
    for tool_id in t.result.tool_ids:
        assert len((await store.list_observations(tool_id)).observations) == 1


async def test_bad_input_is_refused_before_any_io(store: Transport) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    async with m.turn("go", turn_id="t1") as t:
        recorder.reset()
        with pytest.raises(ValueError, match="must not be empty"):
            t.tool("")
        with pytest.raises(ValueError, match="whitespace"):
            t.tool(" padded")
        with pytest.raises(TypeError):
            t.tool(3)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            t.tool("x", {"when": datetime.datetime.now()})
        with pytest.raises(ValueError, match="finite"):
            t.record_tool("x", result=float("nan"))
        with pytest.raises(ValidationError):
            t.record_tool("x", result="half \ud83d")
        with pytest.raises(ValueError, match="status must be one of"):
            t.record_tool("x", status="done")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="ISO 8601"):
            t.record_tool("x", invoked_at="yesterday")
        with pytest.raises(ValueError, match="timezone"):
            t.record_tool("x", invoked_at=datetime.datetime(2026, 1, 1))  # naive
        with pytest.raises(ValueError, match="duration_ms"):
            t.record_tool("x", duration_ms=-1)
        async with t.tool("ok") as call:
            with pytest.raises(TypeError):
                call.result = object()
        assert recorder.calls == []
        t.reply = "ok"
    assert [c.name for c in t.result.tools] == ["ok"]
    with pytest.raises(TurnStateError):
        t.record_tool("late")
    with pytest.raises(TurnStateError):
        t.tool("late")


async def test_a_tool_still_running_when_the_turn_closed_is_refused(store: Transport) -> None:
    async with memory(store).turn("go", turn_id="t1") as t:
        late = t.tool("late")
        await late.__aenter__()
        t.reply = "ok"
    with pytest.raises(TurnStateError):
        await late.__aexit__(None, None, None)
    # ... and a failing one lets its own error through
    failing = t.tool  # the turn is closed: no new call may start either
    with pytest.raises(TurnStateError):
        failing("x")


async def test_a_rerun_with_the_same_calls_writes_nothing_new(store: Transport) -> None:
    m = memory(store)

    async def run() -> Any:
        async with m.turn("go", turn_id="t1") as t:
            t.record_tool("search", args={"q": 1}, result=[1], invoked_at=_iso(1), call_id="c1")
            t.record_tool("book", args={"id": 1}, result="ok", invoked_at=_iso(2), duration_ms=3)
            t.reply = "Booked."
        return t.result

    first = await run()
    second = await run()
    assert second.replayed
    assert second.tool_ids == first.tool_ids
    for tool_id in first.tool_ids:
        assert len((await store.list_observations(tool_id)).observations) == 1


async def test_a_rerun_of_calls_the_turn_timed_itself_replays(store: Transport) -> None:
    # t.tool reads the clock: a re-run's calls start later and last longer, and that alone
    # must not make the re-run a mismatch (the stored calls' readings are replayed).
    m = memory(store)
    delays = iter([0.0, 0.02])

    async def run(status: str = "ok") -> Any:
        async with m.turn("go", turn_id="t1") as t:
            async with t.tool("search", {"q": 1}) as call:
                await anyio.sleep(next(delays, 0.0))
                call.result = [1]
            t.record_tool("book", args={"id": 1}, result="ok", status=status)
            t.reply = "Booked."
        return t.result

    first = await run()
    second = await run()
    assert second.replayed
    assert second.tool_ids == first.tool_ids
    assert [c.invoked_at for c in second.tools] == [c.invoked_at for c in first.tools]
    for tool_id in first.tool_ids:
        assert len((await store.list_observations(tool_id)).observations) == 1
    # ... but a call whose content differs is still a different turn
    with pytest.raises(IdempotencyMismatchError):
        await run(status="error")


async def test_a_rerun_of_an_abandoned_turn_with_timed_calls_writes_nothing_new(
    store: Transport,
) -> None:
    m = memory(store)

    async def failed() -> Any:
        try:
            async with m.turn("go", turn_id="t1") as t:
                async with t.tool("search", {"q": 1}) as call:
                    call.result = [1]
                raise Boom
        except Boom:
            return t.result
        raise AssertionError("the body's error was swallowed")

    first = await failed()
    await anyio.sleep(0.01)  # a later clock reading for the re-run's call
    second = await failed()
    assert second.tool_ids == first.tool_ids
    assert len((await store.list_observations(first.turn_record_id)).observations) == 2


async def test_a_turn_abandoned_two_ways_then_retried_writes_nothing_new(
    store: Transport,
) -> None:
    # Two abandonments of one turn id are both kept (the second under a content key); a
    # retry of the second, whose call runs again later, collapses into it.
    m = memory(store)

    class Other(Exception):
        pass

    async def failed(error: type[Exception]) -> Any:
        try:
            async with m.turn("go", turn_id="t1") as t:
                async with t.tool("search", {"q": 1}) as call:
                    call.result = [1]
                async with t.tool("search", {"q": 1}) as call:  # the same call twice
                    call.result = [1]
                raise error
        except error:
            return t.result
        raise AssertionError("the body's error was swallowed")

    await failed(Boom)
    await anyio.sleep(0.01)
    second = await failed(Other)
    await anyio.sleep(0.01)
    third = await failed(Other)
    assert third.tool_ids == second.tool_ids
    assert [c.invoked_at for c in third.tools] == [c.invoked_at for c in second.tools]
    assert len((await store.list_observations(second.turn_record_id)).observations) == 3


async def test_current_turn_is_the_turn_whose_body_runs(store: Transport) -> None:
    m = memory(store)
    assert current_turn() is None
    seen: list[Any] = []

    async def child() -> None:
        seen.append(current_turn())

    async with m.turn("outer", turn_id="t1") as outer:
        assert current_turn() is outer
        async with anyio.create_task_group() as tg:
            tg.start_soon(child)
        async with m.turn("inner", turn_id="t2") as inner:
            assert current_turn() is inner
            inner.reply = "i"
        assert current_turn() is outer
        outer.reply = "o"
    assert current_turn() is None
    assert seen == [outer]
    with pytest.raises(Boom):
        async with m.turn("failing", turn_id="t3"):
            raise Boom
    assert current_turn() is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_current_turn_in_asyncio_tasks(db_path: Any) -> None:
    from neotoma_agent import EmbeddedStore

    async with EmbeddedStore.open(db_path) as embedded:
        m = memory(embedded)
        before = asyncio.ensure_future(asyncio.sleep(0, result=None))
        async with m.turn("go", turn_id="t1") as t:

            async def child() -> Any:
                return current_turn()

            assert await asyncio.create_task(child()) is t
            await before
            t.reply = "ok"
        assert await asyncio.create_task(child()) is None


async def test_the_explicit_api_writes_calls_made_anywhere(store: Transport) -> None:
    m = memory(store)
    opened = await m.open_turn("go", turn_id="t1", model="gpt-x")
    here = opened.record_tool("search", args={"q": 1}, result=[1], call_id="c1")
    # another process: a record kept as JSON (e.g. in SQLite), read back at close
    kept = json.dumps(ToolCall.create("book", args={"id": 7}, result="ok").to_json())
    elsewhere = ToolCall.from_json(json.loads(kept))
    result = await m.close_turn(opened, "Booked.", tools=[elsewhere, here])
    assert {c.name for c in result.tools} == {"search", "book"}
    assert len(result.tool_ids) == 2
    record = await turn_record(store, "chat-1", "t1")
    linked = {e.target_entity_id for e in await edges(store, record["id"], "REFERS_TO")}
    assert set(result.tool_ids) <= linked


async def test_a_conflicting_call_id_handed_to_close_turn_is_refused_before_any_io(
    store: Transport,
) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    opened = await m.open_turn("go", turn_id="t1")
    opened.record_tool("search", args={"q": 1}, call_id="c1")
    recorder.reset()
    other = ToolCall.create("search", args={"q": 2}, call_id="c1")
    with pytest.raises(ToolCallConflictError):
        await m.close_turn(opened, "done", tools=[other])
    twice = [ToolCall.create("x", args={"n": n}, call_id="c2") for n in (1, 2)]
    with pytest.raises(ToolCallConflictError):
        await m.abandon_turn("t1", error="Stop", tools=twice)
    assert recorder.calls == []
    result = await m.close_turn(opened, "done")
    assert [c.args for c in result.tools] == [{"q": 1}]


async def test_a_turn_opened_elsewhere_is_closed_with_its_calls(store: Transport) -> None:
    await memory(store).open_turn("go", turn_id="t1")
    other = memory(store)  # a second process: knows only the turn id
    call = ToolCall.create("search", args={}, status="cancelled", error_class="Stop")
    result = await other.abandon_turn("t1", error="Stop", tools=[call])
    assert result.stored_status == "abandoned"
    [tool_id] = result.tool_ids
    assert (await store.get_entity_snapshot(tool_id)).snapshot["result_status"] == "cancelled"


async def test_record_turn_writes_the_calls_in_its_one_store(store: Transport) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    calls = [ToolCall.create("search", args={"q": i}, invoked_at=_iso(i)) for i in range(3)]
    result = await m.record_turn("q", "a", turn_id="t1", tools=calls, retrieve=False)
    assert len(recorder.calls_to("store")) == 1
    assert len(result.tool_ids) == 3
    again = await m.record_turn("q", "a", turn_id="t1", tools=calls, retrieve=False)
    assert again.replayed
    assert again.tool_ids == result.tool_ids


async def test_tools_takes_tool_call_records_only(store: Transport) -> None:
    m = memory(store)
    opened = await m.open_turn("go", turn_id="t1")
    with pytest.raises(TypeError):
        await m.close_turn(opened, "x", tools=[{"name": "search"}])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        await m.close_turn(opened, "x", tools=ToolCall.create("a"))  # type: ignore[arg-type]
    await m.close_turn(opened, "x")


def test_tool_call_json_round_trip_and_checks() -> None:
    rec = ToolCall.create(
        "search", args={"q": ["é", 1.5, None]}, result={"ok": True}, call_id="c", duration_ms=2
    )
    assert ToolCall.from_json(json.loads(json.dumps(rec.to_json()))) == rec
    with pytest.raises(ValueError, match="unknown keys"):
        ToolCall.from_json({"name": "x", "invoked_at": _iso(1), "extra": 1})
    with pytest.raises(ValueError, match="needs"):
        ToolCall.from_json({"name": "x"})
    with pytest.raises(ValueError, match="error_class"):
        ToolCall.create("x", status="ok", error_class="Boom")


async def test_payload_settings_cap_summarise_and_redact(store: Transport) -> None:
    big = "x" * 50
    secret = {"token": "s3cret", "q": "LIS"}

    def redact(tool_name: str, field: str, value: Any) -> Any:
        if field == "args" and isinstance(value, dict) and "token" in value:
            return {**value, "token": "***"}
        return value

    m = memory(store, tool_payload_chars=20, redact_tool=redact)
    async with m.turn("go", turn_id="t1") as t:
        t.record_tool("search", args=secret, result=big)
        t.reply = "ok"
    fields = await _observation(store, t.result.tool_ids[0])
    assert "s3cret" not in json.dumps(fields)
    assert fields["arguments"].startswith('{"token":"***"')  # redacted, then cut
    assert fields["arguments_chars"] == len('{"token":"***","q":"LIS"}')
    assert fields["result"] == '"' + "x" * 19 + f"…[+{len(big) + 2 - 20} chars]"
    assert fields["result_chars"] == len(big) + 2
    assert t.result.tools[0].args == secret  # the record keeps what the caller gave

    none = memory(store, conversation_id="chat-2", tool_payloads="none")
    async with none.turn("go", turn_id="t1") as t:
        t.record_tool("search", args=secret, result=big)
        t.reply = "ok"
    fields = await _observation(store, t.result.tool_ids[0])
    assert "arguments" not in fields
    assert "result" not in fields

    summary = memory(store, conversation_id="chat-3", tool_payloads="summary")
    async with summary.turn("go", turn_id="t1") as t:
        t.record_tool("search", args={"q": "LIS\nline2"}, result=list(range(100)))
        t.reply = "ok"
    fields = await _observation(store, t.result.tool_ids[0])
    assert fields["arguments"] == '{"q":"LIS\\nline2"}'
    assert "\n" not in fields["arguments"]
    assert fields["result"].endswith(" chars]")


async def test_a_failing_redactor_stores_neither_value_and_keeps_the_turn(
    store: Transport,
) -> None:
    def redact(tool_name: str, field: str, value: Any) -> Any:
        raise RuntimeError("bug")

    m = memory(store, redact_tool=redact)
    async with m.turn("go", turn_id="t1") as t:
        t.record_tool("search", args={"token": "s3cret"}, result="s3cret too")
        t.reply = "ok"
    assert t.result.completed
    fields = await _observation(store, t.result.tool_ids[0])
    assert "s3cret" not in json.dumps(fields)


def test_bad_payload_settings_fail_when_the_memory_is_made() -> None:
    with pytest.raises(ValueError, match="tool_payloads"):
        NeotomaMemory(None, conversation_id="c", tool_payloads="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tool_payload_chars"):
        NeotomaMemory(None, conversation_id="c", tool_payload_chars=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        NeotomaMemory(None, conversation_id="c", redact_tool="x")  # type: ignore[arg-type]


async def test_history_and_memory_tools_read_the_calls_back(store: Transport) -> None:
    m = memory(store, history_turns=3)
    async with m.turn("first", turn_id="t1") as t:
        t.record_tool(
            "search", args={"q": "LIS"}, result=[1, 2], invoked_at=_iso(1), duration_ms=12.5
        )
        t.record_tool(
            "book", args={"id": 1}, status="error", error_class="Full", invoked_at=_iso(2)
        )
        t.reply = "Could not book."
    async with m.turn("second", turn_id="t2") as t2:
        [earlier] = t2.history  # what the agent did last turn, without asking
        t2.reply = "ok"
    assert [(c.name, c.status) for c in earlier.tools] == [("search", "ok"), ("book", "error")]
    assert [c.entity_id for c in earlier.tools] == list(t.result.tool_ids)
    assert [c.duration_ms for c in earlier.tools] == [12.5, None]
    assert earlier.tools[0].args is None  # the snapshot only: arguments need memory.tools
    [h1, h2] = await m.history()
    assert h1.tools == earlier.tools
    assert h2.tools == ()
    calls = await m.tools("t1")
    assert [c.args for c in calls] == [{"q": "LIS"}, {"id": 1}]
    assert calls[0].result == [1, 2]
    assert calls[1].error_class == "Full"
    assert await m.tools("t2") == ()
    assert await m.tools("never-stored") == ()


async def test_history_with_tool_calls_costs_no_extra_request(store: Transport) -> None:
    """The embedded store and the dev server send a page's tool calls with it."""
    recorder = RecordingTransport(store)
    m = memory(recorder, history_turns=3)
    async with m.turn("first", turn_id="t1") as t:
        t.record_tool("search", args={"q": 1}, invoked_at=_iso(1))
        t.reply = "ok"
    recorder.reset()
    async with m.turn("second", turn_id="t2") as t2:
        t2.reply = "ok"
    assert [c.name for c in t2.history[0].tools] == ["search"]
    methods = [c.method for c in recorder.calls]
    assert sorted(methods) == ["recent_conversation", "store", "store"]


async def test_a_sync_tool_body_is_recorded_too(store: Transport) -> None:
    async with memory(store).turn("go", turn_id="t1") as t:
        with t.tool("add", {"a": 1, "b": 2}) as call:
            assert call.invoked_at is not None
            call.result = 3
        with pytest.raises(ZeroDivisionError), t.tool("divide", {"a": 1, "b": 0}):
            _ = 1 / 0
        t.reply = "3, and no quotient"
    assert [(c.name, c.status, c.result) for c in t.result.tools] == [
        ("add", "ok", 3),
        ("divide", "error", None),
    ]
    assert t.result.tools[1].error_class == "ZeroDivisionError"
    assert call.call == t.result.tools[0]
    with pytest.raises(TurnStateError):
        call.result = 4  # recorded: no longer changes


async def test_alike_calls_timed_now_are_two_calls_and_a_handed_over_record_is_one(
    store: Transport,
) -> None:
    m = memory(store)
    async with m.turn("go", turn_id="t1") as t:
        for _ in range(3):
            with t.tool("ping", {"host": "a"}) as call:
                call.result = "pong"
            t.record_tool("ping", args={"host": "a"}, result="pong")
        t.reply = "ok"
    assert len(t.result.tool_ids) == 6
    opened = await m.open_turn("again", turn_id="t2")
    kept = opened.record_tool("ping", args={"host": "a"}, invoked_at=_iso(1))
    result = await m.close_turn(opened, "ok", tools=[kept, ToolCall.from_json(kept.to_json())])
    assert len(result.tool_ids) == 1


async def test_an_open_turn_refuses_calls_once_it_is_closed(store: Transport) -> None:
    m = memory(store)
    opened = await m.open_turn("go", turn_id="t1")
    opened.record_tool("search", args={"q": 1})
    result = await m.close_turn(opened, "done")
    assert [c.name for c in result.tools] == ["search"]
    with pytest.raises(TurnStateError, match="closed"):
        opened.record_tool("late")
    assert [c.name for c in opened.tools] == ["search"]


async def test_calls_timed_on_one_millisecond_get_distinct_times(
    store: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neotoma_agent._records import tools as _tools

    monkeypatch.setattr(_tools, "now_ms", lambda: 1_796_000_000_000)  # a frozen clock
    async with memory(store).turn("go", turn_id="t1") as t:
        for n in range(3):
            async with t.tool("search", {"n": n}) as call:
                call.result = n
        with t.tool("search", {"n": 3}):  # a sync body, on the same millisecond
            pass
        t.reply = "ok"
    times = [c.invoked_at for c in t.result.tools]
    assert len(set(times)) == 4
    assert times == sorted(times)
    assert len(set(t.result.tool_ids)) == 4


_CHILD = """
import json, sys
from neotoma_agent import ToolCall
for n in range(3):
    call = ToolCall.create("lookup", args={"n": n}, result={"ok": n}, call_id=f"toolu_{n}")
    print(json.dumps(call.to_json()))
"""


async def test_calls_recorded_in_another_process_are_written_by_the_close(
    store: Transport, tmp_path: Any
) -> None:
    import subprocess

    from cli_support import clean_env

    m = memory(store)
    opened = await m.open_turn("go", turn_id="t1")
    child = await anyio.run_process(
        [sys.executable, "-c", _CHILD], env=clean_env(tmp_path), stderr=subprocess.PIPE
    )
    assert child.stderr == b""  # the library is silent
    calls = [ToolCall.from_json(json.loads(line)) for line in child.stdout.splitlines()]
    # the same calls handed over twice (a redelivered hook) are still three calls
    result = await memory(store).close_turn("t1", "done", tools=[*calls, *calls])
    assert result.stored_status == "completed"
    assert sorted(c.call_id or "" for c in result.tools) == ["toolu_0", "toolu_1", "toolu_2"]
    assert len(set(result.tool_ids)) == 3
    stored = await m.tools("t1")
    assert [c.result for c in stored] == [{"ok": 0}, {"ok": 1}, {"ok": 2}]
    assert opened.turn_id == "t1"
