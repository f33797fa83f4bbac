"""Answers decoded in two parts (a head now, the tail when read) are the dict json.loads
gives, however they are read; the split is found only at the top level; and over a real
dev server, a turn with tool calls leaves the unread tails undecoded."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import json_support
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from server_support import TOKEN

from neotoma_agent import HttpTransport, NeotomaMemory, ServerError
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport._lazy_json import (
    STORE_TAIL,
    TOOL_CALLS_TAIL,
    PartlyDecoded,
    decode_object,
)
from neotoma_agent.transport._packed_calls import sends_tool_calls
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import _decode

KEY = STORE_TAIL
NEEDLE = f',"{KEY}":'

keys = st.text() | st.just(KEY)
values = json_support.json_values(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.just(NEEDLE),  # the key's own text inside a string value
    keys,
    max_leaves=12,
)
filler = st.text(min_size=1, max_size=8).map(lambda s: s * 5000)  # past the size to split


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """An object, large enough to split, maybe holding ``KEY`` at the top level and
    nested (a snapshot field of that name) anywhere."""
    head = draw(st.dictionaries(st.text().filter(lambda k: k != KEY), values, max_size=4))
    nested = {"first": 0, KEY: draw(values)}  # ',"KEY":' inside: not the one to split at
    answer = {"entities": [{"snapshot": nested}, draw(filler)], **head}
    if draw(st.booleans()):
        answer[KEY] = draw(values)
        answer.update(draw(st.dictionaries(st.text().filter(lambda k: k != KEY), values)))
    return answer


def _same(lazy: Any, plain: dict[str, Any]) -> None:
    # Each view on a fresh decode: any one of them must bring in the tail by itself.
    text = _dumps(plain)
    views: list[Any] = [
        list,
        len,
        repr,
        _dumps,
        lambda d: list(d.keys()),
        lambda d: list(d.values()),
        lambda d: list(d.items()),
        lambda d: list(reversed(d)),
    ]
    for view in views:
        fresh = decode_object(text, KEY)
        assert view(fresh) == view(plain)
    assert lazy == plain
    assert plain == lazy
    assert (lazy != plain) is False
    assert list(lazy) == list(plain)


@settings(max_examples=200)
@given(answer=answers(), reads=st.lists(keys | st.text(), max_size=4))
def test_any_read_gives_what_json_loads_gives(answer: dict[str, Any], reads: list[str]) -> None:
    text = _dumps(answer)
    plain = json.loads(text)
    lazy = decode_object(text, KEY)
    if KEY not in answer:
        assert not isinstance(lazy, PartlyDecoded)
    for key in reads:  # a few reads by key, as a reader does, then the whole
        assert lazy.get(key) == plain.get(key)
        assert (key in lazy) == (key in plain)
        if key in plain:
            assert lazy[key] == plain[key]
        else:
            with pytest.raises(KeyError):
                lazy[key]
    _same(lazy, plain)


@settings(max_examples=50)
@given(answer=answers())
def test_copies_are_whole_dicts(answer: dict[str, Any]) -> None:
    text = _dumps(answer)
    plain = json.loads(text)
    for make in (dict, copy.copy, copy.deepcopy, lambda d: pickle.loads(pickle.dumps(d))):
        copied = make(decode_object(text, KEY))
        assert copied == plain
        assert list(copied) == list(plain)
    assert {**decode_object(text, KEY)} == plain == decode_object(text, KEY).copy()
    assert (decode_object(text, KEY) | {}) == plain == ({} | decode_object(text, KEY))


def test_the_split_is_at_the_top_level_key_past_nested_ones_and_strings() -> None:
    answer = {
        "entities": [{"entity_snapshot_after": {"a": 1, KEY: "nested"}}, NEEDLE * 2, "x" * 5000],
        "replayed": False,
        KEY: ["top"],
    }
    lazy = decode_object(_dumps(answer), KEY)
    assert isinstance(lazy, PartlyDecoded)
    assert list(dict.keys(lazy)) == ["entities", "replayed"]
    assert lazy.pending(KEY) == '["top"]}'
    _same(lazy, answer)


def test_reading_the_head_leaves_the_tail_undecoded() -> None:
    answer = {"entities": ["x" * 5000], "replayed": False, KEY: [1], "hint": "h"}
    lazy = decode_object(_dumps(answer), KEY)
    assert isinstance(lazy, PartlyDecoded)
    assert lazy["entities"] == answer["entities"]
    assert lazy.get("replayed") is False
    assert "entities" in lazy
    assert lazy.tail_pending  # nothing read asked for the tail
    assert lazy.get("hint") == "h"
    assert not lazy.tail_pending


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.__setitem__(KEY, "mine"),
        lambda d: d.update({KEY: "mine"}),
        lambda d: d.setdefault(KEY, "mine"),
    ],
    ids=["set", "update", "setdefault"],
)
def test_a_write_is_not_undone_by_the_tail(change: Any) -> None:
    answer = {"entities": ["x" * 5000], KEY: "server's", "after": 1}
    lazy = decode_object(_dumps(answer), KEY)
    change(lazy)
    expected = dict(answer)
    if lazy[KEY] == "mine":
        expected[KEY] = "mine"
    assert lazy == expected


def test_a_tail_that_is_not_json_raises_when_read() -> None:
    text = _dumps({"entities": ["x" * 5000]})[:-1] + f"{NEEDLE}[1,}}"
    lazy = decode_object(text, KEY, status=201)
    assert isinstance(lazy, PartlyDecoded)
    assert lazy["entities"]
    with pytest.raises(ServerError) as caught:
        lazy.get("other")
    assert caught.value.status == 201


@pytest.mark.parametrize(
    "text",
    [
        _dumps({"small": 1, KEY: 2}),  # too small to bother
        _dumps({"entities": ["x" * 5000], "other": 1}),  # no such key
        _dumps([{"entities": ["x" * 5000]}, {KEY: 1}]),  # not an object
        json.dumps({"entities": ["x" * 5000], KEY: 1}),  # not compact: ", " and ": "
    ],
)
def test_other_answers_are_decoded_whole(text: str) -> None:
    decoded = decode_object(text, KEY)
    assert type(decoded) in (dict, list)
    assert decoded == json.loads(text)


def test_only_the_routes_with_a_seldom_read_end_are_split() -> None:
    body = _dumps({"entities": ["x" * 5000], KEY: [], TOOL_CALLS_TAIL: {"rows": []}}).encode()
    assert type(_decode(body, "application/json", "/store")) is PartlyDecoded
    assert type(_decode(body, "application/json", "/recent_conversations/ent_1?limit=5")) is (
        PartlyDecoded
    )
    assert type(_decode(body, "application/json", "/entities/query")) is dict
    assert _decode(b"<html>no</html>", "text/html", "/store") == "<html>no</html>"


@pytest.mark.parametrize(
    ("calls", "sent"),
    [
        ({"shapes": [], "rows": []}, True),
        ([{"entity_id": "e"}], True),
        ({"shapes": []}, False),
        ("text", False),
        (None, False),
    ],
)
def test_whether_a_page_sends_tool_calls_is_told_without_decoding_them(
    calls: Any, sent: bool
) -> None:
    page = {"messages": ["x" * 5000], TOOL_CALLS_TAIL: calls}
    lazy = decode_object(_dumps(page), TOOL_CALLS_TAIL)
    assert isinstance(lazy, PartlyDecoded)
    assert sends_tool_calls(lazy) is sent is sends_tool_calls(page)
    assert lazy.tail_pending


# --- over a real dev server --------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # HttpTransport runs on asyncio only


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    async with (
        EmbeddedStore.open(tmp_path / "s.db") as store,
        serving(create_app(store, token=TOKEN)) as url,
    ):
        yield url


async def _turn(memory: NeotomaMemory, n: int, calls: int) -> Any:
    async with memory.turn(f"request {n}") as t:
        for i in range(calls):
            t.record_tool("search", args={"i": i, "q": "é ✈"}, result={"ok": [i]})
        t.reply = "done"
    return t


@pytest.mark.anyio
async def test_a_turn_with_tool_calls_leaves_the_unread_ends_undecoded(url: str) -> None:
    answers: list[tuple[str, Any]] = []
    async with HttpTransport(url, token=TOKEN) as http:
        attempt = http._attempt

        async def spy(session: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            answer = await attempt(session, path, *args, **kwargs)
            answers.append((path, answer.body))
            return answer

        http._attempt = spy  # type: ignore[method-assign]
        memory = NeotomaMemory(http, conversation_id="c", platform="test")
        for n in range(3):
            t = await _turn(memory, n, 30)
        assert len(t.result.tool_ids) == 30
        assert len(set(t.result.tool_ids)) == 30
        history = await memory.history(5)
        assert [len(h.tools) for h in history] == [30, 30, 30]  # read from the pages
    stores = [body for path, body in answers if path == "/store"]
    pages = [body for path, body in answers if path.startswith("/recent_conversations/")]
    closing = stores[-1]
    assert type(closing) is PartlyDecoded
    assert closing.tail_pending
    assert sum(w["code"] == "UNKNOWN_FIELD" for w in closing["store_warnings"]) == 60
    assert not closing.tail_pending
    # The turns' own history reads never asked for their pages' tool calls.
    assert any(type(p) is PartlyDecoded and p.tail_pending for p in pages[:-1])
