"""Properties of tool-call records over any JSON arguments and results: any Unicode, huge
values, the cap and its marker, the JSON round trip, and what a store keeps."""

from __future__ import annotations

import json
from typing import Any

import anyio
import json_support
from hypothesis import given, settings
from hypothesis import strategies as st

from neotoma_agent import EmbeddedStore, NeotomaMemory, ToolCall
from neotoma_agent._neotoma.js import js_json
from neotoma_agent._records.tool_payload import ToolPayloads, summarize, tool_entity
from neotoma_agent._records.tools import ToolLog, merge_tools

# Integers a JavaScript server keeps exactly; text is any Unicode hypothesis draws (it never
# draws lone surrogates, which the library refuses: test_tool_calls checks that).
json_values = json_support.json_values()
# Small enough to be stored whole under the default cap (the cap has its own property).
small_values = json_support.json_values(size=3, max_leaves=8)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=100)
@given(args=json_values, result=json_values)
def test_a_record_round_trips_through_json(args: Any, result: Any) -> None:
    call = ToolCall.create("tool", args=args, result=result, call_id="c", duration_ms=1.5)
    assert ToolCall.from_json(json.loads(json.dumps(call.to_json()))) == call


@settings(max_examples=100)
@given(value=json_values, cap=st.integers(1, 200))
def test_a_stored_value_is_whole_or_cut_with_its_length(value: Any, cap: int) -> None:
    call = ToolCall.create("tool", args=value, invoked_at="2026-12-01T10:00:00.000Z")
    entity = tool_entity(call, "c:t", None, ToolPayloads(max_chars=cap))
    text = _compact(value)
    if value is None:
        assert "arguments" not in entity
    elif len(text) <= cap:
        assert entity["arguments"] == value
        assert "arguments_chars" not in entity
    else:
        stored = entity["arguments"]
        assert stored == f"{text[:cap]}…[+{len(text) - cap} chars]"
        assert entity["arguments_chars"] == len(text)
    # the snapshot's declared fields never depend on the value
    assert [k for k in entity if k not in ("arguments", "arguments_chars")] == [
        "entity_type",
        "turn_key",
        "tool_name",
        "invoked_at",
        "result_status",
    ]


@settings(max_examples=100)
@given(value=json_values)
def test_a_summary_is_one_short_line(value: Any) -> None:
    line = summarize(value)
    assert "\n" not in line
    assert "\r" not in line
    assert len(line) <= 120 + len("…[+ chars]") + len(str(len(_compact(value))))


@settings(max_examples=100)
@given(names=st.lists(st.sampled_from(["search", "Search", "SEARCH ", "book"]), max_size=12))
def test_calls_on_one_millisecond_never_share_an_identity(names: list[str]) -> None:
    log = ToolLog("c:t")
    for n, name in enumerate(names):
        log.add(ToolCall.create(name.strip(), args={"n": n}, invoked_at="2026-12-01T10:00:00.000Z"))
    identities = [(c.name.casefold(), c.invoked_at) for c in log.calls]
    assert len(set(identities)) == len(names)


@settings(max_examples=60)
@given(
    calls=st.lists(
        st.tuples(st.sampled_from(["search", "Search", "book"]), st.integers(0, 2), st.booleans()),
        max_size=10,
    )
)
def test_calls_handed_over_again_are_the_same_calls(calls: list[tuple[str, int, bool]]) -> None:
    # A redelivered hook or a retried close hands the same records over again: nothing new,
    # whatever millisecond a call was moved to, with or without a call id.
    records = [
        ToolCall.create(
            name,
            args={"n": n},
            invoked_at=f"2026-12-01T10:00:00.00{ms}Z",
            call_id=f"c{n}" if with_id else None,
        )
        for n, (name, ms, with_id) in enumerate(calls)
    ]
    once = merge_tools("c:t", records)
    assert merge_tools("c:t", records, records) == once
    assert merge_tools("c:t", records, list(reversed(records))) == once
    assert len(once) == len(records)


def _as_javascript_holds_it(value: Any) -> Any:
    # What a JavaScript server gives back: its numbers (an integral float past 2**53 reads
    # back as the integer JavaScript prints for it), keys in its order.
    return json.loads(js_json(value))


@settings(max_examples=8, deadline=None)
@given(pairs=st.lists(st.tuples(small_values, small_values), min_size=1, max_size=8))
def test_what_the_store_keeps_is_what_was_given(pairs: list[tuple[Any, Any]]) -> None:
    async def run() -> tuple[list[Any], list[dict[str, Any]]]:
        async with EmbeddedStore.open(":memory:") as store:
            memory = NeotomaMemory(store, conversation_id="c", history_turns=0)
            async with memory.turn("go", turn_id="t") as t:
                for args, result in pairs:
                    t.record_tool("tool", args=args, result=result)
                t.reply = "ok"
            calls = await memory.tools("t")
            snaps = [await store.get_entity_snapshot(i) for i in t.result.tool_ids]
            return [(c.args, c.result) for c in calls], [dict(s.snapshot) for s in snaps]

    stored, snapshots = anyio.run(run)
    assert stored == [(_as_javascript_holds_it(a), _as_javascript_holds_it(r)) for a, r in pairs]
    for snapshot in snapshots:
        assert set(snapshot) == {"turn_key", "tool_name", "invoked_at", "result_status"}


def test_a_huge_value_is_stored_capped_and_the_turn_still_completes() -> None:
    huge = {"rows": ["ü" * 1000] * 1000}  # a million characters

    async def run() -> tuple[Any, int | None, bool]:
        async with EmbeddedStore.open(":memory:") as store:
            memory = NeotomaMemory(store, conversation_id="c", history_turns=0)
            async with memory.turn("go", turn_id="t") as t:
                t.record_tool("dump", args={"q": 1}, result=huge)
                t.reply = "ok"
            [call] = await memory.tools("t")
            return call.result, call.result_chars, t.result.completed

    result, chars, completed = anyio.run(run)
    assert completed
    assert chars == len(_compact(huge))
    assert isinstance(result, str)
    assert result.endswith(f"…[+{chars - 4096} chars]")
    assert len(result) < 4200
