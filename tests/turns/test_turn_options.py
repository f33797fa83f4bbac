"""A turn's keyword options, stated once and taken by every method that opens or ends one.

``memory.turn``, ``open_turn``, ``record_turn``, ``close_turn``, ``abandon_turn`` and
``with_memory``'s calls take their shared options as ``**options`` (one ``TypedDict``
each); a keyword none of them names is refused as a signature would refuse it, before
any I/O, and the tool-call recorders and ``OpenTurn.context`` show the parameters of the
method they take them from.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from turn_support import db_path, memory, store

from neotoma_agent import NeotomaMemory, OpenTurn, ToolCall, Turn
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.wrap import with_memory

__all__ = ["db_path", "store"]  # fixtures

pytestmark = pytest.mark.anyio


async def _enter(mem: NeotomaMemory, **options: Any) -> object:
    async with mem.turn("hi", **options) as t:
        t.reply = "hello"
    return t


async def _stream(mem: NeotomaMemory, **options: Any) -> object:
    async with with_memory(lambda m: "hello", memory=mem).stream("hi", **options) as chunks:
        return [c async for c in chunks]


#: each method that takes a turn's options, called with them
CALLS: dict[str, Callable[..., Awaitable[object]]] = {
    "turn": _enter,
    "open_turn": lambda mem, **o: mem.open_turn("hi", **o),
    "record_turn": lambda mem, **o: mem.record_turn("hi", "hello", **o),
    "close_turn": lambda mem, **o: mem.close_turn("t1", "hello", **o),
    "abandon_turn": lambda mem, **o: mem.abandon_turn("t1", error="Boom", **o),
    "__call__": lambda mem, **o: with_memory(lambda m: "hello", memory=mem)("hi", **o),
    "stream": _stream,
}


@pytest.mark.parametrize("method", sorted(CALLS))
async def test_a_misspelt_option_is_refused_before_any_io(
    store: EmbeddedStore, method: str
) -> None:
    recorder = RecordingTransport(store)
    mem = memory(recorder)
    # A misspelt turn_id silently dropped would store a retried turn twice.
    with pytest.raises(TypeError, match=rf"{method}\(\) got an unexpected keyword .*'turnid'"):
        await CALLS[method](mem, turnid="t1")
    assert recorder.calls == []


@pytest.mark.parametrize("method", ["__call__", "stream"])
async def test_with_memory_takes_the_ids_of_a_turn_but_not_its_model(
    store: EmbeddedStore, method: str
) -> None:
    recorder = RecordingTransport(store)
    with pytest.raises(TypeError, match="'model'"):
        await CALLS[method](memory(recorder), model="gpt")
    assert recorder.calls == []


async def test_the_options_reach_the_turn(store: EmbeddedStore) -> None:
    mem = memory(store)
    opened = await mem.open_turn("hi", turn_id="t1", turn_number=3, model="m1")
    assert (opened.turn_id, opened.turn_number, opened.model) == ("t1", 3, "m1")
    result = await mem.close_turn(opened, "hello", refers_to=[opened.user_message_id])
    assert result.cited_ids == (opened.user_message_id,)
    wrapped = with_memory(lambda m: "hello", memory=mem)
    answer = await wrapped("again", turn_id="t2", turn_number=4)
    assert (answer.result.turn_id, answer.result.completed) == ("t2", True)


def _parameters(function: Callable[..., object], skip: int = 1) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[skip:]


def test_the_tool_call_recorders_show_the_parameters_of_tool_call_create() -> None:
    create = _parameters(ToolCall.create, skip=0)
    assert [p.name for p in create][:3] == ["name", "args", "result"]
    for recorder in (Turn.record_tool, OpenTurn.record_tool):
        assert _parameters(recorder) == create
        assert inspect.signature(recorder).return_annotation == "ToolCall"
        assert "Record" in (recorder.__doc__ or "")  # its own docstring


def test_open_turn_context_shows_the_parameters_of_turn_context() -> None:
    assert _parameters(OpenTurn.context) == _parameters(Turn.context)
    assert [p.name for p in _parameters(OpenTurn.context)] == [
        "max_chars",
        "history",
        "max_tokens",
        "count_tokens",
    ]
    assert "explicit API" in (OpenTurn.context.__doc__ or "")
