"""A history page's tool calls, built only when read: exactly what reading them eagerly gives.

The embedded store and the dev server send each history page's tool calls with it; the
records (``RecentConversation.tool_calls``, ``HistoryTurn.tools``) are built on their first
read. These tests hold the deferred records against eager ones: a transport without the
conversation route (its history reads each turn's calls, eagerly), and records built from
the same JSON at once. Every test runs on the embedded store and over HTTP to the dev server.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import attrs
import pytest
from test_history import NoReader
from turn_support import db_path, memory, store

from neotoma_agent import HistoryTurn, NeotomaMemory
from neotoma_agent._recall.history import read_history
from neotoma_agent._records.keys import conversation_entity_id
from neotoma_agent._util.deferred import Deferring, defer
from neotoma_agent.transport._base import RecentConversation, Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio

AT = "2026-12-01T10:00:{:02d}.000Z"


def _pending(record: Deferring) -> dict[str, Any]:
    """The fields ``record`` still defers (read past the record's ``__getattr__``)."""
    try:
        pending: dict[str, Any] = object.__getattribute__(record, "_pending")
    except AttributeError:
        return {}
    return pending


async def _turns_with_calls(store: Transport) -> NeotomaMemory:
    """t1: two calls (ok, error); t2: none; t3: abandoned inside a call; t4: twelve calls,
    two of them in one millisecond."""
    m = memory(store, history_turns=0)
    async with m.turn("Flights to Lisbon?", turn_id="t1") as t:
        t.record_tool("search", args={"to": "LIS"}, result=[{"id": 1}], invoked_at=AT.format(1))
        t.record_tool(
            "book", args={"id": 1}, status="error", error_class="Full", invoked_at=AT.format(2)
        )
        t.reply = "Full."
    async with m.turn("Thanks", turn_id="t2") as t:
        t.reply = "You're welcome."
    with pytest.raises(KeyboardInterrupt):  # the person stopped it: the call is cancelled
        async with m.turn("Try again", turn_id="t3") as t, t.tool("book", {"id": 2}):
            raise KeyboardInterrupt
    async with m.turn("Everything", turn_id="t4") as t:
        for i in range(12):
            at = AT.format(10 + min(i, 10))  # the last two share one time
            t.record_tool(f"step_{i % 3}", args={"i": i}, result={"ok": i}, invoked_at=at)
        t.reply = "Done."
    return m


async def test_history_tools_from_a_page_equal_the_per_turn_reads(store: Transport) -> None:
    await _turns_with_calls(store)
    deferred = await read_history(store, "chat-1")
    eager = await read_history(NoReader(store), "chat-1")  # type: ignore[arg-type]
    assert all("tools" in _pending(h) for h in deferred)  # none built yet
    assert not any(_pending(h) for h in eager)
    assert deferred == eager
    assert [attrs.asdict(h) for h in deferred] == [attrs.asdict(h) for h in eager]
    assert [repr(h) for h in deferred] == [repr(h) for h in eager]
    assert [hash(h) for h in deferred] == [hash(h) for h in eager]
    t1, t2, t3, t4 = deferred
    assert [(c.name, c.status) for c in t1.tools] == [("search", "ok"), ("book", "error")]
    assert t2.tools == ()
    assert [(c.name, c.status) for c in t3.tools] == [("book", "cancelled")]
    assert len(t4.tools) == 12
    assert all(c.args is None and c.result is None for h in deferred for c in h.tools)
    assert not any(_pending(h) for h in deferred)  # built once, the page let go


async def test_a_deferred_history_turn_copies_pickles_and_evolves_as_an_eager_one(
    store: Transport,
) -> None:
    await _turns_with_calls(store)
    eager = await read_history(NoReader(store), "chat-1", limit=1)  # type: ignore[arg-type]
    for read in (
        pickle.loads(pickle.dumps((await read_history(store, "chat-1", limit=1))[0])),
        copy.copy((await read_history(store, "chat-1", limit=1))[0]),
        copy.deepcopy((await read_history(store, "chat-1", limit=1))[0]),
        attrs.evolve((await read_history(store, "chat-1", limit=1))[0], user="Everything"),
    ):
        assert isinstance(read, HistoryTurn)
        assert read == eager[0]
        assert read.tools == eager[0].tools


async def test_memory_tools_still_reads_arguments_and_results(store: Transport) -> None:
    m = await _turns_with_calls(store)
    [t1, _, _, t4] = await m.history()
    calls = await m.tools("t1")
    assert [(c.name, c.args, c.result) for c in calls] == [
        ("search", {"to": "LIS"}, [{"id": 1}]),
        ("book", {"id": 1}, None),
    ]
    assert calls[1].error_class == "Full"
    # The same calls, in the same order, as the history shows them (without the values).
    assert [attrs.evolve(c, args=None, result=None, error_class=None) for c in calls] == list(
        t1.tools
    )
    detailed = await m.tools("t4")
    assert [c.args for c in detailed] == [{"i": c.args["i"]} for c in detailed]
    assert sorted(c.result["ok"] for c in detailed) == list(range(12))
    assert [c.entity_id for c in detailed] == [c.entity_id for c in t4.tools]


async def test_a_turn_that_reads_only_texts_builds_no_tool_call(store: Transport) -> None:
    """``t.history`` and ``t.context()`` read the earlier turns' texts: the calls those
    turns made stay unparsed unless the agent reads ``tools``."""
    await _turns_with_calls(store)
    async with memory(store, history_turns=5).turn("And now?", turn_id="t5") as t:
        block = t.context()
        t.reply = "ok"
    assert "user: Flights to Lisbon?" in block
    assert [h.turn_id for h in t.history] == ["t1", "t2", "t3", "t4"]
    assert all("tools" in _pending(h) for h in t.history)
    assert [len(h.tools) for h in t.history] == [2, 0, 1, 12]


async def test_a_page_sends_each_call_as_its_snapshot_reads(store: Transport) -> None:
    await _turns_with_calls(store)
    reader: Any = store
    page = await reader.recent_conversation(conversation_entity_id("chat-1"), limit=20)
    assert isinstance(page, RecentConversation)
    assert "tool_calls" in _pending(page)  # not parsed yet
    sent = page.tool_calls or ()
    assert len(sent) == 15
    for call in sent:  # what the page carries is what the snapshot read gives
        snap = await store.get_entity_snapshot(call.entity_id)
        assert (call.entity_type, dict(call.snapshot), call.observation_count) == (
            "tool_invocation",
            dict(snap.snapshot),
            snap.observation_count,
        )
    # Packed, the page is the same as the same calls sent one object each (a store may).
    listed = [
        {
            "entity_id": c.entity_id,
            "entity_type": c.entity_type,
            "snapshot": dict(c.snapshot),
            "observation_count": c.observation_count,
        }
        for c in sent
    ]
    as_list = RecentConversation.from_json({**page.raw, "tool_calls": listed})
    assert as_list == page
    assert [c.raw for c in as_list.tool_calls or ()] == [c.raw for c in sent]
    # A page of a conversation without calls sends none, and reads ``None`` at once.
    await memory(store, "quiet", history_turns=0).record_turn("hi", "hello", retrieve=False)
    quiet = await reader.recent_conversation(conversation_entity_id("quiet"), limit=20)
    assert not _pending(quiet)
    assert quiet.tool_calls is None


@pytest.mark.parametrize(
    "packed",
    [
        None,
        "rows",
        {"shapes": [["tool_invocation", "tool_name"]], "rows": "x"},
        {"shapes": [["tool_invocation", "tool_name"]], "rows": [[1, "ent_1", 1, "a"]]},
        {"shapes": [["tool_invocation", "tool_name"]], "rows": [[0, "ent_1", 1]]},
        {"shapes": [[]], "rows": [[0, "ent_1", 1]]},
    ],
)
def test_a_page_whose_calls_do_not_fit_their_shapes_holds_none_of_them(packed: object) -> None:
    page = RecentConversation.from_json({"conversation_id": "c", "tool_calls": packed})
    assert page.tool_calls in (None, ())


@attrs.frozen
class _Record(Deferring):
    name: str
    value: int = 0


def test_a_deferred_field_that_fails_stays_deferred() -> None:
    attempts: list[int] = []

    def compute() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("not yet")
        return 7

    record = defer(_Record("r"), "value", compute)
    with pytest.raises(ValueError, match="not yet"):
        _ = record.value
    assert record.value == 7
    assert record.value == 7
    assert len(attempts) == 2  # computed once it succeeded
    assert record == _Record("r", 7)
    # A thread that found the slot empty just before another filled it reads the value.
    assert record.__getattr__("value") == 7
    with pytest.raises(AttributeError, match="nope"):
        _Record("plain").__getattr__("nope")  # nothing deferred: Python's own error
    with pytest.raises(AttributeError, match="valu"):
        _ = record.valu  # type: ignore[attr-defined]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        record.value = 8  # type: ignore[misc]
