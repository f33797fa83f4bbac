"""What one turn leaves in the store, read back through the transport."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from server_support import TOKEN
from turn_support import (
    capture_logs,
    conversations,
    db_path,
    memory,
    messages,
    seed,
    store,
    targets,
    turn_record,
)

from neotoma_agent import NeotomaMemory, OpenTurn, TurnState
from neotoma_agent.exceptions import IdempotencyMismatchError, TurnStateError
from neotoma_agent.testing import FaultyTransport, RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio

EXACT_TEXTS = {
    "emoji": "Hi 👋🏽 — naïve café, 東京, 👨‍👩‍👧 and a ZWJ",
    "newlines": "line one\nline two\r\n\ttabbed\n\n  trailing spaces  \n",
    "one_megabyte": ("0123456789abcdef" * 65536) + "🙂",
}


@pytest.mark.parametrize("kind", sorted(EXACT_TEXTS))
async def test_turn_stores_both_messages_byte_exact(store: EmbeddedStore, kind: str) -> None:
    text = EXACT_TEXTS[kind]
    mem = memory(store)
    async with mem.turn(text) as t:
        t.reply = text[::-1]
    stored = await messages(store, t.conversation_entity_id)
    assert stored[t.turn_key]["content"] == text
    assert stored[f"{t.turn_key}:assistant"]["content"] == text[::-1]
    assert stored[t.turn_key]["role"] == "user"
    assert stored[f"{t.turn_key}:assistant"]["role"] == "assistant"


async def test_both_messages_are_part_of_the_conversation(store: EmbeddedStore) -> None:
    async with memory(store).turn("hello") as t:
        t.reply = "hi"
    r = t.result
    assert await targets(store, r.user_message_id or "", "PART_OF") == {r.conversation_entity_id}
    assert await targets(store, r.assistant_message_id or "", "PART_OF") == {
        r.conversation_entity_id
    }


async def test_refers_to_edges_user_to_retrieved_assistant_to_retrieved_and_cited(
    store: EmbeddedStore,
) -> None:
    acme, globex = await seed(store, "Acme Corp", "Globex")
    (ana,) = await seed(store, "Ana Lopez", entity_type="person")
    async with memory(store).turn("What do we know about Acme Corp and Globex?") as t:
        assert set(t.retrieved_ids) == {acme, globex}
        t.reply = "Both are clients; Ana runs procurement."
        t.cite(ana)
    r = t.result
    assert await targets(store, r.user_message_id or "", "REFERS_TO") == {acme, globex}
    assert await targets(store, r.assistant_message_id or "", "REFERS_TO") == {acme, globex, ana}
    assert r.cited_ids == (ana,)


async def test_cite_accepts_entities_and_refuses_malformed_ids(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")
    async with memory(store).turn("Tell me about Acme Corp") as t:
        t.cite(*t.retrieved)
        with pytest.raises(ValueError, match="entity id"):
            t.cite("acme")
        t.reply = "ok"
    assert await targets(store, t.result.assistant_message_id or "", "REFERS_TO") == {acme}


async def test_turn_record_goes_open_then_completed(store: EmbeddedStore) -> None:
    mem = memory(store)
    async with mem.turn("hello", turn_id="t1") as t:
        record = await turn_record(store, "chat-1", "t1")
        assert record["status"] == "open"
        t.reply = "hi"
    record = await turn_record(store, "chat-1", "t1")
    assert record["status"] == "completed"
    assert record["turn_key"] == "chat-1:t1"
    assert record["id"] == t.result.turn_record_id


async def test_one_conversation_entity_across_instances_and_a_reopened_file(
    db_path: Path,
) -> None:
    async with EmbeddedStore.open(db_path) as first:
        for mem in (memory(first), memory(first)):
            async with mem.turn("hello") as t:
                t.reply = "hi"
        first_conversation = t.conversation_entity_id
    async with EmbeddedStore.open(db_path) as reopened:
        async with memory(reopened).turn("again") as t:
            t.reply = "hi again"
        assert t.conversation_entity_id == first_conversation
        assert await conversations(reopened, "chat-1") == [first_conversation]
        assert len(await messages(reopened, first_conversation)) == 6


async def test_replaying_a_turn_keeps_ids_and_adds_no_observations(store: EmbeddedStore) -> None:
    mem = memory(store)
    async with mem.turn("Same question", turn_id="t1") as first:
        first.reply = "Same answer"
    ids = [first.result.user_message_id, first.result.assistant_message_id]
    counts = [len(await store.list_observations(i or "")) for i in ids]
    async with mem.turn("Same question", turn_id="t1") as again:
        again.reply = "Same answer"
    assert [again.result.user_message_id, again.result.assistant_message_id] == ids
    assert again.result.replayed
    assert [len(await store.list_observations(i or "")) for i in ids] == counts


async def test_a_different_reply_for_the_same_turn_is_refused_with_a_hint(
    store: EmbeddedStore,
) -> None:
    mem = memory(store)
    async with mem.turn("Question", turn_id="t1") as t:
        t.reply = "First answer"
    with pytest.raises(IdempotencyMismatchError) as caught:
        async with mem.turn("Question", turn_id="t1") as t:
            t.reply = "Regenerated answer"
    assert caught.value.hint is not None
    assert "revision=" in caught.value.hint
    assert t.state is TurnState.FAILED
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == "First answer"


async def test_revision_2_shows_the_new_reply_and_keeps_the_old_one(store: EmbeddedStore) -> None:
    mem = memory(store)
    async with mem.turn("Question", turn_id="t1") as t:
        t.reply = "First answer"
    async with mem.turn("Question", turn_id="t1", revision=2) as t2:
        t2.reply = "Regenerated answer"
    assistant = t2.result.assistant_message_id or ""
    assert assistant == t.result.assistant_message_id
    snap = await store.get_entity_snapshot(assistant)
    assert snap.snapshot["content"] == "Regenerated answer"
    observed = [
        o.fields.get("content") for o in (await store.list_observations(assistant)).observations
    ]
    assert set(observed) == {"First answer", "Regenerated answer"}


async def crashing_turn(mem: NeotomaMemory, turn_id: str, partial: str) -> None:
    async with mem.turn("Question", turn_id=turn_id) as t:
        t.reply = partial
        raise RuntimeError("model crashed")


async def test_abandoned_then_completed_under_the_same_turn_id_ends_completed(
    store: EmbeddedStore,
) -> None:
    mem = memory(store)
    with pytest.raises(RuntimeError):
        await crashing_turn(mem, "t1", "Partial")
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"
    async with mem.turn("Question", turn_id="t1") as t:
        t.reply = "Partial, then complete"
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "completed"
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == "Partial, then complete"


async def test_a_failed_rerun_does_not_overwrite_a_completed_turn(store: EmbeddedStore) -> None:
    mem = memory(store)
    async with mem.turn("Question", turn_id="t1") as t:
        t.reply = "The full answer"
    with pytest.raises(RuntimeError):
        await crashing_turn(mem, "t1", "The f")
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "completed"
    stored = await messages(store, t.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == "The full answer"


async def test_a_turn_costs_two_stores_and_lookups_overlap_the_user_store(
    store: EmbeddedStore,
) -> None:
    await seed(store, "Acme Corp", "Globex", "Initech")
    # Slow stores: run one after the other, lookups and the user store could not overlap.
    recorder = RecordingTransport(FaultyTransport(store).delay("store", 0.05))
    async with memory(recorder).turn("Compare Acme Corp, Globex and Initech") as t:
        t.reply = "..."
    stores = recorder.calls_to("store")
    lookups = recorder.calls_to("retrieve_entity_by_identifier")
    assert len(stores) == 2
    assert len(lookups) == 3
    assert any(lookup.overlaps(stores[0]) for lookup in lookups)
    assert all(lookup.ended is not None and lookup.ended < stores[1].started for lookup in lookups)
    assert [c.method for c in recorder.calls if c.method == "store"] == ["store", "store"]


async def test_refers_to_on_enter_writes_user_edges_before_the_body(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")
    recorder = RecordingTransport(store)
    async with memory(recorder, refers_to_on_enter=True).turn("Tell me about Acme Corp") as t:
        assert await targets(store, t.user_message_id, "REFERS_TO") == {acme}
        t.reply = "A client."
    lookups = recorder.calls_to("retrieve_entity_by_identifier")
    first_store = recorder.calls_to("store")[0]
    assert all(c.ended is not None and c.ended < first_store.started for c in lookups)
    assert len(recorder.calls_to("store")) == 2


async def test_entering_twice_and_writing_after_exit_raise(store: EmbeddedStore) -> None:
    t = memory(store).turn("hello")
    with pytest.raises(TurnStateError):
        t.reply = "too early"
    with pytest.raises(TurnStateError):
        _ = t.result
    async with t:
        t.append("hi")
    with pytest.raises(TurnStateError):
        async with t:
            pass
    with pytest.raises(TurnStateError):
        t.append("more")
    with pytest.raises(TurnStateError):
        t.reply += "more"
    with pytest.raises(TurnStateError):
        t.cite("ent_" + "0" * 24)
    assert t.reply == "hi"
    assert t.state is TurnState.COMPLETED


async def test_open_close_turn_leaves_the_same_graph_as_turn(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")
    mem = memory(store)
    opened = await mem.open_turn("Tell me about Acme Corp", turn_id="t1")
    assert isinstance(opened, OpenTurn)
    assert opened.retrieved_ids == (acme,)
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "open"
    result = await mem.close_turn("t1", "A client.", refers_to=opened.retrieved_ids)
    assert result.status is TurnState.COMPLETED
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "completed"
    assert await targets(store, opened.user_message_id, "REFERS_TO") == {acme}
    assert await targets(store, result.assistant_message_id or "", "REFERS_TO") == {acme}
    assert await targets(store, result.assistant_message_id or "", "PART_OF") == {
        opened.conversation_entity_id
    }


async def test_close_turn_from_another_process_finds_the_user_message(
    store: EmbeddedStore,
) -> None:
    (acme,) = await seed(store, "Acme Corp")
    opened = await memory(store).open_turn("Tell me about Acme Corp", turn_id="t1")
    elsewhere = memory(store)  # no record of the open turn
    result = await elsewhere.close_turn("t1", "A client.", retrieved_ids=[acme])
    assert result.user_message_id == opened.user_message_id
    assert await targets(store, opened.user_message_id, "REFERS_TO") == {acme}
    assert await targets(store, result.assistant_message_id or "", "REFERS_TO") == {acme}


async def test_abandon_turn_records_the_partial_reply(store: EmbeddedStore) -> None:
    mem = memory(store)
    opened = await mem.open_turn("hello", turn_id="t1")
    result = await mem.abandon_turn(opened, error=KeyboardInterrupt(), partial_reply="Hel")
    assert result.status is TurnState.ABANDONED
    assert result.error_class == "KeyboardInterrupt"
    stored = await messages(store, opened.conversation_entity_id)
    assert stored["chat-1:t1:assistant"]["content"] == "Hel"
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"


async def test_record_turn_is_one_store_with_the_same_graph(store: EmbeddedStore) -> None:
    (acme,) = await seed(store, "Acme Corp")
    recorder = RecordingTransport(store)
    result = await memory(recorder).record_turn(
        "Tell me about Acme Corp", "A client.", turn_id="t9", turn_number=9
    )
    assert len(recorder.calls_to("store")) == 1
    assert result.status is TurnState.COMPLETED
    stored = await messages(store, result.conversation_entity_id or "")
    assert stored["chat-1:t9"]["content"] == "Tell me about Acme Corp"
    assert stored["chat-1:t9"]["turn_number"] == 9
    assert stored["chat-1:t9:assistant"]["content"] == "A client."
    assert await targets(store, result.user_message_id or "", "REFERS_TO") == {acme}
    assert await targets(store, result.assistant_message_id or "", "REFERS_TO") == {acme}
    assert (await turn_record(store, "chat-1", "t9"))["status"] == "completed"
    again = await memory(store).record_turn(
        "Tell me about Acme Corp", "A client.", turn_id="t9", turn_number=9
    )
    assert again.replayed
    assert again.assistant_message_id == result.assistant_message_id


async def test_user_extra_fields_are_stored_on_the_user_message(store: EmbeddedStore) -> None:
    async with memory(store).turn("hi", turn_number=3, user_extra={"channel": "sms"}) as t:
        t.reply = "hello"
    stored = await messages(store, t.conversation_entity_id)
    observed = (await store.list_observations(t.user_message_id)).observations[0].fields
    assert observed["channel"] == "sms"
    assert stored[t.turn_key]["turn_number"] == 3


async def test_log_events_are_bound_to_the_turn_and_carry_no_content(store: EmbeddedStore) -> None:
    await seed(store, "Acme Corp")
    secret_user, secret_reply = "Tell me about Acme Corp, zqxuser", "zqxreply"
    with capture_logs() as logs:
        async with memory(store).turn(secret_user, turn_id="t1") as t:
            t.reply = secret_reply
        with pytest.raises(ValueError, match="boom"):
            async with memory(store).turn("second", turn_id="t2"):
                raise ValueError("boom")
    # The history read runs concurrently (its own event, checked for content below too).
    assert [e["event"] for e in logs].count("history.done") == 2
    events = [e["event"] for e in logs if e["event"] != "history.done"]
    assert events[:3] in (
        ["retrieval.done", "turn.opened", "turn.closed"],
        ["turn.opened", "retrieval.done", "turn.closed"],
    )
    assert "turn.abandoned" in events
    for entry in logs:
        assert entry["conversation_id"] == "chat-1"
        assert entry["turn_id"] in ("t1", "t2")
        assert "zqx" not in repr(entry)
    abandoned = next(e for e in logs if e["event"] == "turn.abandoned")
    assert abandoned["error_class"] == "ValueError"
    assert abandoned["log_level"] == "info"  # the ValueError reaches the caller: said once
    done = next(e for e in logs if e["event"] == "retrieval.done")
    assert done["retrieved"] == 1
    assert t.result.retrieval.lookups >= 1


async def test_many_turns_of_one_conversation_run_concurrently(store: EmbeddedStore) -> None:
    mem = memory(store)

    async def one(i: int) -> None:
        async with mem.turn(f"message {i}", turn_id=f"t{i}") as t:
            await anyio.lowlevel.checkpoint()
            t.reply = f"reply {i}"

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    async with mem.turn("last") as t:
        t.reply = "done"
    stored = await messages(store, t.conversation_entity_id)
    assert len(stored) == 42
    assert all(stored[f"chat-1:t{i}:assistant"]["content"] == f"reply {i}" for i in range(20))


def test_memory_settings_are_validated() -> None:
    inner = RecordingTransport(EmbeddedStore.open(":memory:"))
    with pytest.raises(ValueError, match="conversation_id"):
        NeotomaMemory(inner, conversation_id="")
    with pytest.raises(ValueError, match="retrieval_limit"):
        NeotomaMemory(inner, conversation_id="c", retrieval_limit=0)
    for bad in (0, -1, float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="close_timeout"):
            NeotomaMemory(inner, conversation_id="c", close_timeout=bad)  # type: ignore[arg-type]
    assert (
        NeotomaMemory(inner, conversation_id="c", retrieval_timeout=None).retrieval_timeout is None
    )
    anyio.run(inner.aclose)


async def test_close_turn_refuses_bad_arguments_before_any_io(store: EmbeddedStore) -> None:
    recorder = RecordingTransport(store)
    mem = memory(recorder)
    with pytest.raises(ValueError, match="entity id"):
        await mem.close_turn("t1", "reply", refers_to=["acme"])
    with pytest.raises(TypeError, match="assistant_message"):
        await mem.close_turn("t1", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="turn_id"):
        await mem.close_turn("a:b", "reply")
    assert recorder.calls == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # aiohttp: asyncio only
async def test_the_same_protocol_over_http_against_the_dev_server(store: EmbeddedStore) -> None:
    from neotoma_agent.server import create_app, serving
    from neotoma_agent.transport.http import HttpTransport

    (acme,) = await seed(store, "Acme Corp")
    async with (
        serving(create_app(store, token=TOKEN)) as url,
        HttpTransport(url, token=TOKEN) as http,
    ):
        mem = memory(http, conversation_id="over-http")
        async with mem.turn("Tell me about Acme Corp", turn_id="t1") as t:
            t.reply = "A client."
        async with mem.turn("Tell me about Acme Corp", turn_id="t1") as again:
            again.reply = "A client."
        recorded = await mem.record_turn("Who is Acme Corp?", "Still a client.", turn_id="t2")
        replayed = await mem.record_turn("Who is Acme Corp?", "Still a client.", turn_id="t2")
    assert again.result.replayed
    assert again.result.assistant_message_id == t.result.assistant_message_id
    assert replayed.replayed
    assert replayed.assistant_message_id == recorded.assistant_message_id
    assert replayed.user_message_id == recorded.user_message_id
    stored = await messages(store, t.conversation_entity_id)
    assert stored["over-http:t1:assistant"]["content"] == "A client."
    assert stored["over-http:t2:assistant"]["content"] == "Still a client."
    assert await targets(store, t.result.user_message_id or "", "REFERS_TO") == {acme}
    assert (await turn_record(store, "over-http", "t1"))["status"] == "completed"
