"""Text that cannot be stored is refused at the boundary, typed, quoting no content; text that
can is stored byte for byte (a surrogate pair split across chunks is the one character)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turn_support import db_path, memory, messages, store, turn_record

from neotoma_agent import TurnState, ValidationError
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio

SECRET = "s3cret-content"


def assert_quotes_nothing(error: BaseException) -> None:
    for text in (str(error), repr(error)):
        assert SECRET not in text
        assert "\udfff" not in text


async def stored_turn(transport: Transport, t: Any) -> dict[str, dict[str, Any]]:
    return await messages(transport, t.conversation_entity_id)


async def test_lone_surrogate_in_user_message_is_refused_before_any_io(store: Transport) -> None:
    recorder = RecordingTransport(store)
    m = memory(recorder)
    with pytest.raises(ValidationError) as caught:
        m.turn(f"{SECRET}\udfff", turn_id="t1")
    assert_quotes_nothing(caught.value)
    assert "surrogate" in str(caught.value)
    with pytest.raises(ValidationError):
        await m.record_turn(f"{SECRET}\udfff", "fine", turn_id="t2")
    with pytest.raises(ValidationError):
        await m.record_turn("fine", f"{SECRET}\ud800", turn_id="t3")
    with pytest.raises(ValidationError):
        await m.open_turn(f"\udfff{SECRET}", turn_id="t4")
    assert recorder.calls == []


async def test_unstorable_reply_assignment_keeps_the_reply_and_abandons(store: Transport) -> None:
    m = memory(store)
    t = m.turn("hello", turn_id="t1")

    async def use() -> None:
        async with t:
            t.reply = "valid so far"
            t.reply = f"{SECRET}\udfff more"

    with pytest.raises(ValidationError) as caught:
        await use()
    assert_quotes_nothing(caught.value)
    assert t.result.status is TurnState.ABANDONED
    assert t.result.error_class == "neotoma_agent.ValidationError"
    stored = await stored_turn(store, t)
    assert stored["chat-1:t1:assistant"]["content"] == "valid so far"
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"


async def test_reply_turning_unstorable_mid_stream_keeps_valid_partial(store: Transport) -> None:
    async def source() -> AsyncIterator[str]:
        yield "Hello "
        yield "world"
        yield "\udc00 broken"
        yield "never"

    m = memory(store)
    t = m.turn("hello", turn_id="t1")

    async def use() -> None:
        async with t:
            async for _ in t.stream(source()):
                pass

    with pytest.raises(ValidationError):
        await use()
    assert t.result.status is TurnState.ABANDONED
    stored = await stored_turn(store, t)
    assert stored["chat-1:t1:assistant"]["content"] == "Hello world"


@pytest.mark.parametrize("how", ["append", "stream", "assign"])
async def test_surrogate_pair_split_across_chunks_is_one_character(
    store: Transport, how: str
) -> None:
    chunks = ["grin \ud83d", "\ude00 ok"]

    async def source() -> AsyncIterator[str]:
        for c in chunks:
            yield c

    m = memory(store)
    async with m.turn("hello", turn_id="t1") as t:
        if how == "append":
            for c in chunks:
                t.append(c)
        elif how == "assign":
            for c in chunks:
                t.reply += c
        else:
            async for _ in t.stream(source()):
                pass
    assert t.result.completed
    stored = await stored_turn(store, t)
    assert stored["chat-1:t1:assistant"]["content"] == "grin \U0001f600 ok"
    assert t.result.reply_chars == len("grin \U0001f600 ok")


async def test_reply_ending_in_half_a_pair_is_abandoned_with_the_text_before(
    store: Transport,
) -> None:
    m = memory(store)
    t = m.turn("hello", turn_id="t1")

    async def use() -> None:
        async with t:
            t.append("cut ")
            t.append("here \ud83d")

    with pytest.raises(ValidationError):
        await use()
    assert t.result.status is TurnState.ABANDONED
    stored = await stored_turn(store, t)
    assert stored["chat-1:t1:assistant"]["content"] == "cut here "


async def test_explicit_close_refuses_unstorable_text_and_keeps_the_turn_open(
    store: Transport,
) -> None:
    m = memory(store)
    opened = await m.open_turn("hello", turn_id="t1")
    with pytest.raises(ValidationError):
        await m.close_turn(opened, f"{SECRET}\udfff")
    with pytest.raises(ValidationError):
        await m.abandon_turn(opened, error="X", partial_reply="\ud800")
    assert (await turn_record(store, "chat-1", "t1"))["status"] == "open"
    result = await m.close_turn(opened, "fixed")
    assert result.completed


async def test_store_refuses_lone_surrogates_typed_without_content(db_path: Any) -> None:
    async with EmbeddedStore.open(db_path) as s:
        with pytest.raises(ValidationError) as caught:
            await s.store(
                [{"entity_type": "note", "title": f"{SECRET}\udfff"}], idempotency_key="k"
            )
        assert_quotes_nothing(caught.value)
        assert caught.value.__suppress_context__
        assert (await s.query_entities(entity_type="note")).total == 0


@pytest.mark.one_backend  # bytes kept exactly: the transport's doing, never the event loop's
async def test_ten_megabyte_texts_round_trip_exactly(store: Transport) -> None:
    user = ("käse \u202e\r\n\x00 " * 100_000)[:1_000_000]
    reply = ("🙂 right-to-left \u05d0\u05d1 \t\x1b[2J " * 400_000)[:10_000_000]
    m = memory(store, close_timeout=60)
    async with m.turn(user, turn_id="big") as t:
        t.reply = reply
    stored = await stored_turn(store, t)
    assert stored["chat-1:big"]["content"] == user
    assert stored["chat-1:big:assistant"]["content"] == reply


# Any code point, surrogates included, plus the characters that break naive code.
_CHARS = st.one_of(
    st.characters(codec=None, categories=None),
    st.sampled_from(["\x00", "\r", "\n", "\u202e", "\u2066", "\ufeff", "\x1b", "\x85"]),
    # Both halves of a pair, so that draws hold lone ones, pairs and halves in the wrong order.
    st.sampled_from(["\ud83d", "\ude00", "\udfff", "\ud800"]),
)
# st.text() drops surrogates from any alphabet; a joined list keeps them.
_TEXT = st.lists(_CHARS, max_size=40).map("".join)


def _joined(text: str) -> str:
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(user=_TEXT, reply=_TEXT)
def test_any_text_round_trips_exactly_or_is_refused_before_any_write(
    tmp_path_factory: pytest.TempPathFactory, user: str, reply: str
) -> None:
    path = tmp_path_factory.mktemp("text") / "m.db"

    async def run() -> None:
        async with EmbeddedStore.open(path) as s:
            recorder = RecordingTransport(s)
            m = memory(recorder)
            storable = all(not 0xD800 <= ord(c) <= 0xDFFF for c in _joined(user) + _joined(reply))
            if not storable:
                with pytest.raises(ValidationError, match="lone UTF-16 surrogate"):
                    await m.record_turn(user, reply, turn_id="t1", retrieve=False)
                assert recorder.calls == []
                return
            result = await m.record_turn(user, reply, turn_id="t1", retrieve=False)
            stored = await messages(s, result.conversation_entity_id or "")
            assert stored["chat-1:t1"]["content"] == _joined(user)
            assert stored["chat-1:t1:assistant"]["content"] == _joined(reply)

    anyio.run(run)
