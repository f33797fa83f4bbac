"""The embedded store's history page (``_history_page``): a fixed, small number of indexed
statements whatever the conversation's length, and the same turns as the generic reads
(each message's snapshot and edges, each turn record read one by one), through the store
and through a user's view, for conversations with tool calls, entities referred to, an
abandoned turn, a forgotten message and more turns than a page holds."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from turn_support import memory

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent._recall.history import read_history
from neotoma_agent._records.keys import (
    conversation_entity_id,
    message_entity_id,
    turn_keys,
    turn_record_entity_id,
    validate_conversation_id,
    validate_turn_id,
)
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import _history_page
from neotoma_agent.transport.embedded._db_thread import Job
from neotoma_agent.transport.embedded._rows import install

pytestmark = pytest.mark.anyio


class NoReader:
    """The store without its conversation route: history then comes from the generic reads."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("recent_conversation"):
            raise AttributeError(name)
        return getattr(self._inner, name)


async def _write(view: Transport, turns: int, conversation_id: str = "chat-1") -> NeotomaMemory:
    """``turns`` turns: every third with two tool calls, some naming a person, turn 5
    abandoned after a partial reply."""
    m = memory(view, conversation_id, history_turns=0)
    for i in range(turns):

        async def run(i: int = i) -> None:
            async with m.turn(f"question {i} about Acme Corp", turn_id=f"t{i:03d}") as t:
                if i % 3 == 0:
                    t.record_tool("search", args={"q": i}, result=[i], call_id=f"s{i}")
                    t.record_tool("fetch", args={"u": i}, result="page", call_id=f"f{i}")
                if i % 4 == 1:
                    t.remember("person", name=f"Person {i}")
                t.reply = f"answer {i}" if i != 5 else "partial"
                if i == 5:
                    raise RuntimeError("the model stopped")

        with contextlib.suppress(RuntimeError):
            await run()
    return m


def _shown(turns: Any) -> list[tuple[Any, ...]]:
    return [
        (
            h.turn_id,
            h.turn_number,
            h.user,
            h.reply,
            h.status,
            h.user_refers_to,
            h.reply_refers_to,
            tuple((c.name, c.status, c.entity_id) for c in h.tools),
        )
        for h in turns
    ]


@pytest.mark.parametrize("scoped", [False, True], ids=["store", "user"])
async def test_a_page_gives_the_turns_the_generic_reads_give(tmp_path: Path, scoped: bool) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        view: Any = store.for_user("alice") if scoped else store
        await _write(view, 14)
        # A forgotten message: its turn shows without it on both paths.
        m = memory(view, "chat-1", history_turns=0)
        tenant = None if not scoped else view.tenant_id
        await m.forget_entity(message_entity_id("chat-1", "t008", "assistant", tenant))
        for limit, before in [(5, None), (3, "t010"), (20, None), (4, "t006"), (None, None)]:
            paged = await read_history(view, "chat-1", limit=limit, before=before)
            generic = await read_history(NoReader(view), "chat-1", limit=limit, before=before)
            assert _shown(paged) == _shown(generic)
            assert paged  # every case reads some turns
        whole = await read_history(view, "chat-1", limit=None)
        assert [h.status for h in whole].count("abandoned") == 1
        assert any(h.tools for h in whole)
        assert any(h.reply_refers_to for h in whole)
        assert next(h for h in whole if h.turn_id == "t008").reply is None


async def test_a_page_is_read_in_two_statements_however_long_the_conversation(
    tmp_path: Path,
) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        await _write(store, 8, "short")
        await _write(store, 40, "long")
        statements: list[str] = []
        job: Job[None] = Job(lambda conn: conn.set_trace_callback(statements.append), writes=False)
        store._thread.submit(job)
        await job.wait()
        counts = {}
        for cid, before in (("short", "t007"), ("long", "t039")):
            statements.clear()
            page = await store.recent_conversation(
                conversation_entity_id(cid),
                limit=12,
                before=message_entity_id(cid, before, "user"),
            )
            assert page.has_more
            assert page.turn_records
            assert page.tool_calls
            reads = [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
            counts[cid] = len(reads)
            with sqlite3.connect(store.path) as conn:
                conn.create_function("current_uid", 0, lambda: 0)
                install(conn)  # entity_key, as the store's connections have it
                for sql in reads:
                    for *_, detail in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
                        # every table is sought by an index: only the statement's own
                        # intermediate results (page, msgs, records, json_each) are scanned
                        assert not detail.startswith(
                            ("SCAN entities", "SCAN relationships", "SCAN conversation_messages")
                        ), detail
            conn.close()
    assert counts == {"short": 2, "long": 2}


_IDS = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(_IDS, _IDS, st.booleans(), st.sampled_from([None, "alice"]))
def test_a_page_finds_the_record_of_any_turn_by_its_message_key(
    conversation_id: str, turn_id: str, reply: bool, tenant: str | None
) -> None:
    # The page derives each record's id from a message's turn key, as the turn wrote it.
    try:
        validate_conversation_id(conversation_id)
        validate_turn_id(turn_id)
    except ValueError:
        return
    key = turn_keys(conversation_id, turn_id)
    message_key = key.assistant_turn_key if reply else key.user_turn_key
    session = _history_page._session(json.dumps({"conversation_id": conversation_id}))
    assert session == conversation_id
    found = _history_page._record_of(session, message_key, tenant)
    assert found == turn_record_entity_id(conversation_id, turn_id, tenant)
    # A key of another conversation names none of this one's turns.
    assert _history_page._record_of(session + "x", message_key, tenant) is None
