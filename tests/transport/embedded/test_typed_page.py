"""A history page made typed from its rows (``_typed_page``) is the page's answer, parsed.

A turn's enter reads its history as a :class:`RecentConversation` made on the store's
thread from the page's rows, without parsing the page's answer back. Here the same page is
read both ways, on the same file and in the same transaction, for pages of any messages
(any text, roles and fields of any type, a message forgotten, tool calls, entities referred
to, a user's view) and any ``limit`` and ``before`` (those the route refuses included):
the typed fields, each ``raw``, and each error must be the same.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turn_support import memory

from neotoma_agent import EmbeddedStore
from neotoma_agent._records.keys import conversation_entity_id, message_entity_id
from neotoma_agent.transport._results import RecentConversation
from neotoma_agent.transport.embedded._conversations import recent_conversation
from neotoma_agent.transport.embedded._db_thread import Job
from neotoma_agent.transport.embedded._scope import run_as
from neotoma_agent.transport.embedded._typed_page import typed_page

pytestmark = pytest.mark.anyio


def _parsed(conn: sqlite3.Connection, body: Mapping[str, Any]) -> RecentConversation:
    return RecentConversation.from_json(recent_conversation(conn, body))


def _outcome(read: Callable[[], RecentConversation]) -> Any:
    try:
        return read()
    except Exception as exc:  # the route's refusal: the same type and message both ways
        return (type(exc), str(exc))


def _assert_same(typed: Any, parsed: Any) -> None:
    if isinstance(parsed, tuple):
        assert typed == parsed
        return
    assert type(typed) is RecentConversation
    assert typed == parsed  # every field but raw
    assert typed.raw == parsed.raw
    assert typed.tool_calls == parsed.tool_calls
    for mine, theirs, item in zip(
        typed.messages, parsed.messages, typed.raw["messages"], strict=True
    ):
        assert [type(v) for v in attrs_values(mine)] == [type(v) for v in attrs_values(theirs)]
        assert mine.raw == theirs.raw
        assert mine.raw is item  # as parsing gives it: the page's own item
    for mine_r, theirs_r in zip(typed.turn_records or (), parsed.turn_records or (), strict=True):
        assert [type(v) for v in attrs_values(mine_r)] == [type(v) for v in attrs_values(theirs_r)]
        assert mine_r.raw == theirs_r.raw
        assert mine_r.snapshot is mine_r.raw["snapshot"]  # as parsing gives it


def attrs_values(record: Any) -> list[Any]:
    return [getattr(record, a.name) for a in attrs.fields(type(record)) if a.name != "raw"]


async def _both(store: EmbeddedStore, body: Mapping[str, Any], user: str | None) -> tuple[Any, Any]:
    def read(conn: sqlite3.Connection) -> tuple[Any, Any]:
        def two(conn: sqlite3.Connection, body: Mapping[str, Any]) -> tuple[Any, Any]:
            return (
                _outcome(lambda: typed_page(conn, body)),
                _outcome(lambda: _parsed(conn, body)),
            )

        return two(conn, body) if user is None else run_as(user, two, conn, body, writes=False)

    job: Job[tuple[Any, Any]] = Job(read, writes=False)
    store._thread.submit(job)
    return await job.wait()


_BODIES = [
    (12, None),
    (3, None),
    (1, "t003"),
    (1000, None),
    (5, "t006"),
    (5, "nowhere"),
    (0, None),
    (1001, None),
    (None, None),
    (None, "t004"),
    ("5", None),
    (True, None),
    (4, 7),
]


@pytest.mark.parametrize("user", [None, "alice"], ids=["store", "user"])
async def test_a_turns_page_is_the_same_typed_or_parsed(tmp_path: Path, user: str | None) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        view: Any = store if user is None else store.for_user(user)
        m = memory(view, "chat-1", history_turns=0)
        for i in range(9):
            with contextlib.suppress(RuntimeError):
                async with m.turn(f"question {i} about Acme Corp", turn_id=f"t{i:03d}") as t:
                    if i % 3 == 0:
                        t.record_tool("search", args={"q": i}, result=[i], call_id=f"s{i}")
                    if i % 4 == 1:
                        t.remember("person", name=f"Person {i}")
                    t.reply = f"answer {i}"
                    if i == 5:
                        raise RuntimeError("the model stopped")
        tenant = None if user is None else view.tenant_id
        await m.forget_entity(message_entity_id("chat-1", "t007", "assistant", tenant))
        conversation = conversation_entity_id("chat-1", tenant)
        for limit, before in _BODIES:
            bound = (
                message_entity_id("chat-1", before, "user", tenant)
                if isinstance(before, str)
                else before
            )
            body = {"entity_id": conversation, "limit": limit, "before": bound}
            typed, parsed = await _both(store, body, user)
            _assert_same(typed, parsed)
        for missing in ("ent_nothing", conversation_entity_id("chat-1", "bob")):
            typed, parsed = await _both(store, {"entity_id": missing, "limit": 5}, user)
            assert isinstance(parsed, tuple)
            _assert_same(typed, parsed)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_VALUE = st.one_of(
    st.none(),
    _TEXT,
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(_TEXT, st.integers(), max_size=2),
)
_MESSAGE = st.fixed_dictionaries(
    {"content": _VALUE},
    optional={
        "role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), _VALUE),
        "sender_kind": _VALUE,
        "turn_key": st.one_of(st.sampled_from(["c:t1", "c:t1:assistant", "c:t2"]), _VALUE),
        "turn_number": _VALUE,
        "recipient_agent_id": _VALUE,
        "odd": _VALUE,
    },
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_MESSAGE, min_size=1, max_size=6),
    st.integers(1, 8),
    st.sampled_from([None, "bob"]),
)
def test_a_page_of_any_messages_is_the_same_typed_or_parsed(
    tmp_path_factory: pytest.TempPathFactory,
    messages: list[dict[str, Any]],
    limit: int,
    user: str | None,
) -> None:
    path = tmp_path_factory.mktemp("typed") / "m.db"

    async def run() -> None:
        async with EmbeddedStore.open(path) as store:
            view: Any = store if user is None else store.for_user(user)
            for i, fields in enumerate(messages):
                entities = [
                    {"entity_type": "conversation", "conversation_id": "c"},
                    {"entity_type": "conversation_message", "canonical_name": f"m{i}", **fields},
                ]
                part_of = [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}]
                with contextlib.suppress(Exception):  # a refused store leaves nothing
                    await view.store(entities, idempotency_key=f"k{i}", relationships=part_of)
            tenant = None if user is None else view.tenant_id
            body = {"entity_id": conversation_entity_id("c", tenant), "limit": limit}
            typed, parsed = await _both(store, body, user)
            _assert_same(typed, parsed)

    anyio.run(run)
