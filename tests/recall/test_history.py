"""History: a conversation's earlier turns, read back exactly, in the turn's own order.

Every test runs on the embedded store and over HTTP to the dev server, on asyncio and trio
(the ``store`` fixture), unless it says otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import attrs
import pytest
from turn_support import capture_logs, db_path, memory, seed, store

from neotoma_agent import ConnectionLost
from neotoma_agent._recall.history import read_conversation, read_history
from neotoma_agent._records.keys import conversation_entity_id, new_turn_id
from neotoma_agent.testing import FaultyTransport, RecordingTransport
from neotoma_agent.transport._base import ConversationReader, Transport
from neotoma_agent.transport.embedded import EmbeddedStore, _page_rows
from neotoma_agent.transport.embedded._errors import now_iso

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


async def _turns(store: Transport, n: int, conversation_id: str = "chat-1") -> None:
    m = memory(store, conversation_id, history_turns=0)
    for i in range(1, n + 1):
        await m.record_turn(f"question {i}", f"answer {i}", turn_id=f"t{i}", retrieve=False)


async def _abandon(m: Any, text: str, turn_id: str, partial: str = "") -> None:
    """Run a turn whose body fails after showing ``partial``."""

    async def run() -> None:
        async with m.turn(text, turn_id=turn_id) as t:
            t.reply = partial
            raise RuntimeError("the model stopped")

    with pytest.raises(RuntimeError):
        await run()


class NoReader:
    """A third-party transport: every Transport method, none of the conversation reads."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("recent_conversation"):
            raise AttributeError(name)
        return getattr(self._inner, name)


async def _completed_then_abandoned(store: Transport, reply: str) -> tuple[str, Any]:
    """t1 names Acme Corp and completes with ``reply``; t2 is abandoned after "Part"."""
    [acme] = await seed(store, "Acme Corp")
    m = memory(store, history_turns=0)
    async with m.turn("Tell me about Acme Corp", turn_id="t1") as t:
        t.reply = reply
    await _abandon(m, "More", "t2", "Part")
    return acme, m


async def test_a_turn_reads_the_earlier_turns_oldest_first(store: Transport) -> None:
    [acme] = await seed(store, "Acme Corp")
    m = memory(store, history_turns=5)
    async with m.turn("Tell me about Acme Corp", turn_id="t1") as t:
        assert t.history == ()  # the first turn has none
        t.reply = "A customer.\nSince 2020."
    async with m.turn("And since when?", turn_id="t2") as t:
        t.reply = "2020."
    async with m.turn("Thanks", turn_id="t3") as t:
        pass
    assert [(h.turn_id, h.user, h.reply, h.status) for h in t.history] == [
        ("t1", "Tell me about Acme Corp", "A customer.\nSince 2020.", "completed"),
        ("t2", "And since when?", "2020.", "completed"),
    ]
    assert t.history[0].user_refers_to == (acme,)
    assert t.history[0].reply_refers_to == (acme,)
    assert t.history[1].user_refers_to == ()


async def test_history_turns_bounds_what_a_turn_reads(store: Transport) -> None:
    await _turns(store, 7)
    async with memory(store, history_turns=3).turn("next", turn_id="t8") as t:
        pass
    assert [h.turn_id for h in t.history] == ["t5", "t6", "t7"]
    async with memory(store, history_turns=0).turn("again", turn_id="t9") as t:
        pass
    assert t.history == ()


async def test_memory_history_limit_and_before(store: Transport) -> None:
    await _turns(store, 6)
    m = memory(store)
    assert [h.turn_id for h in await m.history(2)] == ["t5", "t6"]
    assert [h.turn_id for h in await m.history(2, before="t4")] == ["t2", "t3"]
    assert [h.turn_id for h in await m.history(None, before="t3")] == ["t1", "t2"]
    assert [h.turn_id for h in await m.history(10)] == [f"t{i}" for i in range(1, 7)]
    assert [h.turn_id for h in await m.history(2, before="not-stored")] == ["t5", "t6"]
    assert await m.history(0) == ()
    with pytest.raises(ValueError, match="limit"):
        await m.history(-1)


async def test_a_conversation_never_stored_has_no_history(store: Transport) -> None:
    assert await memory(store, "nobody-here").history() == ()


async def test_a_replayed_turn_reads_the_turns_before_it(store: Transport) -> None:
    await _turns(store, 4)
    m = memory(store, history_turns=10)
    async with m.turn("question 2", turn_id="t2") as t:  # a re-run of t2: a replay
        t.reply = "answer 2"
    assert [h.turn_id for h in t.history] == ["t1"]
    assert [h.turn_id for h in await m.history()] == ["t1", "t2", "t3", "t4"]


async def test_a_revision_shows_once_with_its_latest_text(store: Transport) -> None:
    m = memory(store, history_turns=0)
    async with m.turn("Summarise Acme", turn_id="t1") as t:
        t.reply = "first draft"
    async with m.turn("Summarise Acme", turn_id="t1", revision=2) as t:
        t.reply = "second draft"
    async with m.turn("Summarise Acme", turn_id="t1") as t:  # a replay of the first
        t.reply = "first draft"
    await m.record_turn("next", "ok", turn_id="t2", retrieve=False)
    history = await m.history()
    assert [(h.turn_id, h.reply) for h in history] == [("t1", "second draft"), ("t2", "ok")]


async def test_abandoned_turns_show_their_partial_reply_and_are_marked(store: Transport) -> None:
    m = memory(store, history_turns=0)
    await _abandon(m, "long answer please", "t1", "Once upon")
    await _abandon(m, "and nothing shown", "t2")
    opened = await m.open_turn("still running", turn_id="t3")
    history = await m.history()
    assert [(h.turn_id, h.status, h.reply) for h in history] == [
        ("t1", "abandoned", "Once upon"),
        ("t2", "abandoned", None),
        ("t3", "open", None),
    ]
    await m.close_turn(opened, "done now")
    assert (await m.history())[-1].status == "completed"


async def test_concurrent_turns_read_back_in_the_order_they_began(store: Transport) -> None:
    m = memory(store, history_turns=0)
    first, second = new_turn_id(), new_turn_id()
    # The later turn is written first, and closed first: write order is the reverse.
    b = await m.open_turn("second question", turn_id=second)
    a = await m.open_turn("first question", turn_id=first)
    await m.close_turn(b, "second answer")
    await m.close_turn(a, "first answer")
    history = await m.history()
    assert [h.user for h in history] == ["first question", "second question"]
    assert [h.reply for h in history] == ["first answer", "second answer"]


async def test_turn_numbers_order_turns_whatever_their_ids(store: Transport) -> None:
    m = memory(store, history_turns=0)
    await m.record_turn("third", "c", turn_id="zz", turn_number=3, retrieve=False)
    await m.record_turn("first", "a", turn_id="yy", turn_number=1, retrieve=False)
    await m.record_turn("second", "b", turn_id="xx", turn_number=2, retrieve=False)
    history = await m.history()
    assert [(h.turn_number, h.user) for h in history] == [(1, "first"), (2, "second"), (3, "third")]


async def test_a_turn_with_history_still_costs_two_round_trips(store: Transport) -> None:
    await seed(store, "Acme Corp")
    await _turns(store, 3)
    recorder = RecordingTransport(store)
    async with memory(recorder, history_turns=2).turn("What about Acme Corp?", turn_id="t4") as t:
        pass
    assert [h.turn_id for h in t.history] == ["t2", "t3"]
    methods = [c.method for c in recorder.calls]
    assert sorted(methods) == sorted(
        ["store", "recent_conversation", "retrieve_entity_by_identifier", "store"]
    )
    user_store, closing = recorder.calls_to("store")
    (read,) = recorder.calls_to("recent_conversation")
    # The read overlaps the user store (one round), and ends before the closing store.
    assert read.overlaps(user_store)
    assert not read.overlaps(closing)


async def test_a_failed_history_read_is_logged_and_the_turn_goes_on(store: Transport) -> None:
    await _turns(store, 2)
    faulty = FaultyTransport(store).fail("recent_conversation", ConnectionLost("down"))
    with capture_logs() as logs:
        async with memory(faulty, history_turns=5).turn("still here?", turn_id="t3") as t:
            t.reply = "yes"
    assert t.history == ()
    assert t.result.completed
    (failed,) = [e for e in logs if e["event"] == "history.failed"]
    assert failed["log_level"] == "info"  # best-effort read, nothing lost
    assert failed["error"] == "ConnectionLost"


async def test_a_hung_history_read_is_cut_at_the_retrieval_deadline(store: Transport) -> None:
    faulty = FaultyTransport(store).hang("recent_conversation")
    with anyio.fail_after(10):
        m = memory(faulty, history_turns=5, retrieval_timeout=0.2)
        async with m.turn("hello", turn_id="t1") as t:
            t.reply = "hi"
    assert t.history == ()
    assert t.result.completed


async def test_a_transport_without_the_route_reads_the_same_history(store: Transport) -> None:
    acme, m = await _completed_then_abandoned(store, "A customer.")
    plain = NoReader(store)
    assert not isinstance(plain, ConversationReader)
    generic = await read_history(plain, "chat-1")  # type: ignore[arg-type]
    assert generic == await m.history()
    assert [(h.status, h.reply) for h in generic] == [
        ("completed", "A customer."),
        ("abandoned", "Part"),
    ]
    assert generic[0].reply_refers_to == (acme,)
    wrapped = await read_history(RecordingTransport(plain), "chat-1")  # type: ignore[arg-type]
    assert wrapped == generic


async def test_the_context_block_includes_the_history(store: Transport) -> None:
    await _turns(store, 2)
    async with memory(store, history_turns=5).turn("and then?", turn_id="t3") as t:
        block = t.context()
    assert "Earlier in this conversation (oldest first):" in block
    assert block.index("user: question 1") < block.index("assistant: answer 2")


def _next_millisecond() -> None:
    """Return once the store's clock has moved on (within a millisecond): a creation time
    is in milliseconds, and two turns written within one keep no order between them."""
    written = now_iso()
    while now_iso() == written:
        pass


class RealServerLike(RecordingTransport):
    """Answers the conversation route as a real server does: the extension is ignored."""

    async def recent_conversation(
        self, conversation_entity_id: str, *, limit: int | None = None, before: str | None = None
    ) -> Any:
        return await super().recent_conversation(conversation_entity_id)


async def test_a_server_without_the_extension_gives_the_same_history(store: Transport) -> None:
    m = memory(store, history_turns=0)
    first, second = new_turn_id(), new_turn_id()
    b = await m.open_turn("second question", turn_id=second)
    a = await m.open_turn("first question", turn_id=first)
    await m.close_turn(b, "second answer\n")
    await _abandon(m, "third", new_turn_id(), "par")
    await m.abandon_turn(a, error="Stopped", partial_reply="fir")
    real = RealServerLike(store)
    history = await read_history(real, "chat-1", limit=2)
    assert [(h.user, h.status, h.reply) for h in history] == [
        ("second question", "completed", "second answer\n"),  # exact, untrimmed
        ("third", "abandoned", "par"),
    ]
    assert history == await m.history(2)
    # One read of the whole conversation, then the two kept turns' records and their four
    # messages' snapshots (the route trims what it lists), side by side.
    assert [c.method for c in real.calls] == ["recent_conversation"] + ["get_entity_snapshot"] * 6


async def test_a_revised_turn_keeps_its_place_on_a_server_that_lists_by_activity(
    store: Transport,
) -> None:
    m = memory(store, history_turns=0)
    for n in (1, 2, 3):
        await m.record_turn(f"question {n}", f"answer {n}", turn_id=f"t{n}", retrieve=False)
        _next_millisecond()
    await m.record_turn("question 1", "answer 1, revised", turn_id="t1", revision=2, retrieve=False)
    real = RealServerLike(store)
    history = await read_history(real, "chat-1", limit=None)
    assert [(h.turn_id, h.reply) for h in history] == [
        ("t1", "answer 1, revised"),
        ("t2", "answer 2"),
        ("t3", "answer 3"),
    ]
    assert history == await m.history(None)
    # Ids that do not say their order: one more read, for each message's creation time.
    assert [c.method for c in real.calls][:2] == [
        "recent_conversation",
        "retrieve_related_entities",
    ]


async def test_history_reads_every_turn_as_show_does(store: Transport) -> None:
    # t.history builds its records straight from the page; show goes through StoredTurn.
    acme, m = await _completed_then_abandoned(store, "A customer of Acme Corp.")
    await m.open_turn("still open", turn_id="t3")
    conversation = conversation_entity_id("chat-1")
    # Other writers' keys: a turn id holding ":", the reserved id, another conversation's.
    for n, key in enumerate(("chat-1:x:y", "chat-1:x:y:assistant", "chat-1:assistant", "o:t9")):
        await store.store(
            [{"entity_type": "conversation_message", "content": f"m{n}", "turn_key": key}],
            idempotency_key=f"foreign-{n}",
            relationships=[
                {
                    "relationship_type": "PART_OF",
                    "source_index": 0,
                    "target_entity_id": conversation,
                }
            ],
        )
    shown = await read_conversation(store, "chat-1")
    history = await read_history(store, "chat-1", limit=None)
    assert history == tuple(turn.to_history() for turn in shown.turns)
    assert [h.turn_id for h in history] == ["t1", "t2", "t3", "x:y", "chat-1:assistant", "o:t9"]
    assert history[0].reply_refers_to == (acme,)
    assert [h.status for h in history] == ["completed", "abandoned", "open", "completed"] + [
        "open"
    ] * 2


class SamePageForever(RecordingTransport):
    """A store whose conversation route always says there is more, and repeats its page."""

    async def recent_conversation(
        self, conversation_entity_id: str, *, limit: int | None = None, before: str | None = None
    ) -> Any:
        page = await super().recent_conversation(conversation_entity_id, limit=4)
        return attrs.evolve(page, has_more=True)


async def test_a_route_that_never_ends_its_pages_still_ends_the_read(store: Transport) -> None:
    await _turns(store, 3)
    looping = SamePageForever(store)
    with anyio.fail_after(10):
        history = await read_history(looping, "chat-1", limit=5)
    assert [h.turn_id for h in history] == ["t3"]  # t2 may be cut: the page says more
    assert len(looping.calls) == 2  # the page, then the same page again: nothing new


async def test_a_page_changed_by_its_reader_reads_back_as_stored(store: Transport) -> None:
    # A store that keeps decoded rows between reads (the embedded store does) must hand
    # each reader its own: one caller's changes never reach the next answer.
    m = memory(store, "chat-1", history_turns=0)
    for i in range(1, 4):  # the records list the entity ids they retrieved and stored
        async with m.turn(f"question {i}", turn_id=f"t{i}") as t:
            t.reply = f"answer {i}"
    reader = cast(ConversationReader, store)
    entity_id = conversation_entity_id("chat-1")
    first = await reader.recent_conversation(entity_id, limit=6)
    assert first.turn_records
    lists = 0
    for record in first.turn_records:
        for value in record.snapshot.values():
            if isinstance(value, list):  # a record's entity-id lists, kept decoded too
                value.append("tampered")
                lists += 1
        cast(dict[str, Any], record.snapshot)["status"] = "tampered"
        cast(dict[str, Any], record.provenance).clear()
    assert lists
    again = await reader.recent_conversation(entity_id, limit=6)
    assert again.turn_records
    assert {r.snapshot["status"] for r in again.turn_records} == {"completed"}
    for record in again.turn_records:
        assert not [v for v in record.snapshot.values() if isinstance(v, list) and "tampered" in v]
    assert all(r.provenance for r in again.turn_records)
    assert [m.content for m in again.messages] == [m.content for m in first.messages]


async def test_a_turn_record_read_while_open_reads_completed_once_closed(store: Transport) -> None:
    m = memory(store, history_turns=0)
    reader = memory(store, history_turns=5)
    opened = await m.open_turn("question 1", turn_id="t1")
    async with reader.turn("question 2", turn_id="t2") as t:
        t.reply = "answer 2"
    assert [(h.turn_id, h.status) for h in t.history] == [("t1", "open")]
    await m.close_turn(opened, "answer 1")
    assert [(h.turn_id, h.status, h.reply) for h in await reader.history(5)] == [
        ("t1", "completed", "answer 1"),
        ("t2", "completed", "answer 2"),
    ]


async def test_a_closed_store_keeps_none_of_the_texts_it_read(tmp_path: Path) -> None:
    # The embedded store keeps decoded history rows between reads; closing it lets them go.
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        await _turns(store, 3)
        reader = cast(ConversationReader, store)
        await reader.recent_conversation(conversation_entity_id("chat-1"), limit=6)
        assert _page_rows._messages
        assert _page_rows._records
    assert not _page_rows._messages
    assert not _page_rows._records


@pytest.mark.parametrize(("limit", "before"), [(5, None), (2, "t7"), (3, "t2"), (None, None)])
async def test_a_history_read_in_the_callers_thread_reads_the_same_turns(
    tmp_path: Path, limit: int | None, before: str | None
) -> None:
    """``paged_history`` (a hook opening a turn, its pages answered by the store file's own
    reads in the caller's thread) reads the turns ``read_history`` reads, over the same
    pages (several, for a small limit), but for the tool calls it leaves out."""
    from neotoma_agent._engine.requests import HistoryPage, Request, run
    from neotoma_agent._recall.history import paged_history
    from neotoma_agent.transport.embedded._turns import TurnFile

    db = tmp_path / "memory.db"
    async with EmbeddedStore.open(db) as store:
        await _turns(store, 8)
        m = memory(store, "chat-1")
        await _abandon(m, "question 9", "t9", partial="Part")
        wanted = await read_history(store, "chat-1", limit=limit, before=before)
    pages: list[int] = []
    with TurnFile(str(db)) as file:

        def page(request: Request) -> Any:
            assert isinstance(request, HistoryPage)
            pages.append(request.limit)
            return file.answer(request)

        got = run(paged_history("chat-1", limit=limit, before=before), page)
        assert run(paged_history("chat-never", limit=limit, before=None), page) == ()
    assert got == tuple(attrs.evolve(h, tools=()) for h in wanted)
    assert [h.entities for h in got] == [h.entities for h in wanted]  # eq=False: compared here
    assert got
    assert pages
