"""The public read API (neotoma_agent.reads): what a tool over a store reads it with.

Every id is checked against what a real store gave (a real SQLite file, and the same store
behind the dev server over HttpTransport), every read against turns a real memory stored.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from turn_support import db_path, memory, store

from neotoma_agent import EmbeddedStore, HttpTransport, NeotomaMemory, Transport, reads
from neotoma_agent.reads import (
    TOOL_TYPE,
    bulk_reader,
    collect_stats,
    conversation_entity_id,
    is_entity_id,
    list_conversations,
    message_entity_id,
    parse_turn_key,
    printable,
    printer,
    read_conversation,
    read_ending,
    scan_entities,
    short_class,
    snapshot_or_none,
    turn_ending,
    turn_key,
    turn_record_entity_id,
    validate_conversation_id,
    validate_entity_id,
    validate_turn_id,
)
from neotoma_agent.testing import RecordingTransport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


async def _two_turns(transport: Transport) -> None:
    """t1 completes with "A customer."; t2 is abandoned by a RuntimeError."""
    m = memory(transport, "support-42", history_turns=0)
    async with m.turn("Who is Acme?", turn_id="t1") as t:
        t.reply = "A customer."
    with pytest.raises(RuntimeError):
        async with m.turn("And since when?", turn_id="t2"):
            raise RuntimeError("the model stopped")


async def test_the_derived_ids_name_the_entities_the_store_holds(store: Transport) -> None:
    await _two_turns(store)
    conversation = await snapshot_or_none(store, conversation_entity_id("support-42"))
    assert conversation is not None
    assert conversation.entity_type == "conversation"
    assert conversation.snapshot["conversation_id"] == "support-42"
    user = await snapshot_or_none(store, message_entity_id("support-42", "t1", "user"))
    reply = await snapshot_or_none(store, message_entity_id("support-42", "t1", "assistant"))
    assert user is not None
    assert reply is not None
    assert (user.snapshot["content"], reply.snapshot["content"]) == ("Who is Acme?", "A customer.")
    assert user.snapshot["turn_key"] == turn_key("support-42", "t1", "user")
    assert reply.snapshot["turn_key"] == turn_key("support-42", "t1", "assistant")
    # an abandoned turn stores no reply
    assert await snapshot_or_none(store, message_entity_id("support-42", "t2", "assistant")) is None


async def test_a_turn_records_ending_reads_back_through_its_derived_id(store: Transport) -> None:
    await _two_turns(store)
    endings = {}
    for turn_id in ("t1", "t2"):
        record = await snapshot_or_none(store, turn_record_entity_id("support-42", turn_id))
        assert record is not None
        assert record.entity_type == "conversation_turn"
        endings[turn_id] = await read_ending(store, record)
    assert endings["t1"].status == "completed"
    assert endings["t2"].status == "abandoned"
    assert endings["t2"].error_class is not None
    assert endings["t2"].error_class.endswith("RuntimeError")
    assert not endings["t2"].repaired


async def test_a_conversation_reads_back_turn_by_turn(store: Transport) -> None:
    await _two_turns(store)
    conversation = await read_conversation(store, "support-42")
    assert conversation.conversation_entity_id == conversation_entity_id("support-42")
    assert [(t.turn_id, t.status) for t in conversation.turns] == [
        ("t1", "completed"),
        ("t2", "abandoned"),
    ]
    first = conversation.turns[0]
    assert first.message("assistant") is not None
    assert first.message("assistant").content == "A customer."  # type: ignore[union-attr]
    missing = await read_conversation(store, "no-such-chat")
    assert (missing.snapshot, missing.turns) == (None, ())


async def test_a_scan_reads_every_entity_of_a_type_page_by_page(store: Transport) -> None:
    m = memory(store, "support-42", history_turns=0)
    for i in range(5):
        await m.record_turn(f"q{i}", f"a{i}", turn_id=f"t{i}", retrieve=False)
    scan = await scan_entities(store, entity_type="conversation_turn", page_size=2)
    assert not scan.partial
    assert scan.total == 5
    assert {e.entity_id for e in scan.entities} == {
        turn_record_entity_id("support-42", f"t{i}") for i in range(5)
    }


async def test_a_store_file_gives_a_bulk_reader_and_other_transports_none(
    db_path: Path, anyio_backend: str
) -> None:
    async with EmbeddedStore.open(db_path) as embedded:
        m = memory(embedded, "support-42", history_turns=0)
        await m.record_turn("q", "a", turn_id="t1", retrieve=False)
        reader = bulk_reader(embedded)
        assert reader is not None
        names: list[str | None] = []
        await reader.turn_records(lambda name, fields, at, whole: names.append(name))
        [record] = (await scan_entities(embedded, entity_type="conversation_turn")).entities
        assert names == [record.canonical_name]
        # a wrapper does not pretend to read the file in bulk
        assert bulk_reader(RecordingTransport(embedded)) is None
    http = HttpTransport("http://127.0.0.1:9", token="t")
    assert bulk_reader(http) is None


# -------------------------------------------------------------------- ids, without a store


def test_a_turn_key_names_the_role_and_parses_back() -> None:
    assert turn_key("support 42", "m-1001", "user") == "support 42:m-1001"
    assert turn_key("support 42", "m-1001", "assistant") == "support 42:m-1001:assistant"
    assert parse_turn_key("support 42:m-1001:assistant") == ("support 42", "m-1001", "assistant")
    # another writer's turn id with ':' reads back whole when the conversation is known
    assert parse_turn_key("c:x:y", "c") == ("c", "x:y", "user")
    assert parse_turn_key("no-separator") is None


_ids = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=12
)


@given(
    conversation_id=_ids,
    turn_id=_ids.filter(lambda s: ":" not in s),
    role=st.sampled_from(["user", "assistant"]),
)
def test_every_storable_turns_key_parses_back_to_its_ids(
    conversation_id: str, turn_id: str, role: Any
) -> None:
    try:
        validate_conversation_id(conversation_id)
        validate_turn_id(turn_id)
    except ValueError:
        return  # not an id a turn can be stored under
    key = turn_key(conversation_id, turn_id, role)
    assert parse_turn_key(key) == (conversation_id, turn_id, role)
    assert parse_turn_key(key, conversation_id) == (conversation_id, turn_id, role)


@given(conversation_id=_ids, turn_id=_ids)
def test_the_derived_ids_are_entity_ids_and_differ_by_role(
    conversation_id: str, turn_id: str
) -> None:
    ids = [
        conversation_entity_id(conversation_id),
        message_entity_id(conversation_id, turn_id, "user"),
        message_entity_id(conversation_id, turn_id, "assistant"),
        turn_record_entity_id(conversation_id, turn_id),
    ]
    assert all(is_entity_id(i) for i in ids)
    assert len(set(ids)) == 4


@pytest.mark.parametrize(
    "call",
    [
        lambda: conversation_entity_id(42),  # type: ignore[arg-type]
        lambda: message_entity_id("c", None, "user"),  # type: ignore[arg-type]
        lambda: turn_record_entity_id(b"c", "t"),  # type: ignore[arg-type]
        lambda: turn_key("c", 1, "user"),  # type: ignore[arg-type]
        lambda: parse_turn_key(None),  # type: ignore[arg-type]
        lambda: parse_turn_key("c:t", 7),  # type: ignore[arg-type]
    ],
)
def test_an_id_that_is_not_text_is_a_type_error(call: Any) -> None:
    with pytest.raises(TypeError, match="must be a str"):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: message_entity_id("c", "t", "system"),  # type: ignore[arg-type]
        lambda: turn_key("c", "t", "Assistant"),  # type: ignore[arg-type]
    ],
)
def test_a_role_other_than_user_or_assistant_is_refused(call: Any) -> None:
    # not silently read as the user message: that would name another entity
    with pytest.raises(ValueError, match="role must be 'user' or 'assistant'"):
        call()


def test_the_checks_refuse_ids_a_turn_cannot_be_stored_under() -> None:
    assert validate_conversation_id("support-42") == "support-42"
    with pytest.raises(ValueError, match="whitespace"):
        validate_conversation_id(" padded")
    with pytest.raises(ValueError, match="':'"):
        validate_turn_id("a:b")
    entity_id = conversation_entity_id("c")
    assert validate_entity_id(entity_id) == entity_id
    with pytest.raises(ValueError, match="not a Neotoma entity id"):
        validate_entity_id("ent_xyz")
    assert not is_entity_id("ENT_" + "0" * 24)
    assert not is_entity_id(None)


def test_stored_text_is_escaped_for_a_terminal() -> None:
    assert printable("ok\tline\n\x1b[31mred\u202e") == "ok\tline\n\\x1b[31mred\\u202e"
    out = io.StringIO()
    write = printer(out)
    write("title \x1b]0;owned\x07")
    write("\rnext\n")
    assert out.getvalue() == "title \\x1b]0;owned\\x07\\x0dnext\n"
    assert TOOL_TYPE == "tool_invocation"


async def test_stats_count_entities_turns_and_tool_calls(store: Transport) -> None:
    m = memory(store, "trip", history_turns=0)
    async with m.turn("Flights to Lisbon?", turn_id="t1") as t:
        t.record_tool("search_flights", args={"to": "LIS"}, result=[{"id": 1}])
        t.record_tool("book", args={"id": 1}, status="error", error_class="app.Full")
        t.reply = "Could not book."
    with pytest.raises(RuntimeError):
        async with m.turn("Try again", turn_id="t2"):
            raise RuntimeError("the model stopped")
    stats = await collect_stats(store)
    assert (stats.conversations, stats.turns) == (1, 2)
    assert stats.turn_status == {"completed": 1, "abandoned": 1}
    assert stats.calls_by_tool() == {"book": {"error": 1}, "search_flights": {"ok": 1}}
    assert stats.entities == sum(stats.by_type.values())
    assert not stats.partial
    data = stats.to_json()
    assert (data["abandoned_turns"], data["repaired_turns"], data["tool_calls"]) == (1, 0, 2)


async def test_conversations_list_most_recently_active_first(store: Transport) -> None:
    for cid in ("first", "second", "third"):
        m = memory(store, cid, history_turns=0)
        await m.record_turn("q", "a", turn_id="t1", retrieve=False)
    # "first" is active again, last
    await memory(store, "first", history_turns=0).record_turn("q", "a", turn_id="t2")
    listing = await list_conversations(store)
    order = [(c.last_activity or "", c.conversation_id) for c in listing.conversations]
    assert order == sorted(order, reverse=True)
    first = next(c for c in listing.conversations if c.conversation_id == "first")
    assert first.last_activity == max(o[0] for o in order)
    assert {c.conversation_id for c in listing.conversations} == {"first", "second", "third"}
    assert [c.entity_id for c in listing.conversations if c.conversation_id == "second"] == [
        conversation_entity_id("second")
    ]
    assert (listing.total, listing.partial, listing.note()) == (3, False, "")


async def test_a_stored_turns_ending_comes_from_its_record(store: Transport) -> None:
    await _two_turns(store)
    conversation = await read_conversation(store, "support-42")
    endings = [await turn_ending(store, t) for t in conversation.turns]
    assert [e.status if e else None for e in endings] == ["completed", "abandoned"]
    assert endings[1] is not None
    assert short_class(endings[1].error_class) == "RuntimeError"
    # a turn without a record (messages another client wrote) has no ending to read
    bare = conversation.turns[0]._replace(record=None)
    assert await turn_ending(store, bare) is None


async def test_ids_derived_under_a_user_name_what_that_users_view_stored(tmp_path: Path) -> None:
    """``tenant=tenant_for(view)`` gives the ids a user's view stored; without it, the ids
    of the unscoped store, which name none of that user's entities."""
    async with EmbeddedStore.open(tmp_path / "users.db") as store:
        view = store.for_user("alice")
        m = NeotomaMemory(view, conversation_id="c1")
        async with m.turn("hello", turn_id="t1") as t:
            t.reply = "hi"
        tenant = reads.tenant_for(view)
        assert tenant == "alice"
        assert reads.tenant_for(store) is None
        ids = [
            reads.conversation_entity_id("c1", tenant=tenant),
            reads.message_entity_id("c1", "t1", "user", tenant=tenant),
            reads.message_entity_id("c1", "t1", "assistant", tenant=tenant),
            reads.turn_record_entity_id("c1", "t1", tenant=tenant),
        ]
        for entity_id in ids:
            assert await reads.snapshot_or_none(view, entity_id) is not None
        assert await reads.snapshot_or_none(view, reads.conversation_entity_id("c1")) is None
        with pytest.raises(TypeError):
            reads.conversation_entity_id("c1", tenant=7)  # type: ignore[arg-type]
