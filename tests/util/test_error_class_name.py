"""``error_class_name``: the one name of an exception's class that a turn, its tool calls and
the framework integrations record, so that a turn's and a tool call's error classes read
alike wherever they were named."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from turn_support import memory, turn_record

from neotoma_agent import EmbeddedStore, error_class_name

pytestmark = pytest.mark.anyio


class Refused(Exception):
    class Inner(Exception):
        pass


def test_builtins_are_bare_and_others_qualified() -> None:
    assert error_class_name(ValueError("secret text")) == "ValueError"
    assert error_class_name(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert error_class_name(asyncio.CancelledError()) == "asyncio.exceptions.CancelledError"
    assert error_class_name(Refused.Inner()) == f"{__name__}.Refused.Inner"


def test_the_text_of_the_exception_is_never_in_the_name() -> None:
    assert "secret" not in error_class_name(Refused("secret text"))


async def test_a_turn_and_its_tool_calls_record_the_same_name(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        failure = Refused.Inner("the body failed")

        async def body() -> None:
            async with memory(store).turn("Book it", turn_id="t1") as t:
                try:
                    async with t.tool("book", {"id": 1}):
                        raise Refused.Inner("the tool failed")
                except Refused.Inner:
                    pass
                t.record_tool("book", status="error", error_class=error_class_name(failure))
                turns.append(t)
                raise failure

        turns: list[Any] = []
        with pytest.raises(Refused.Inner):
            await body()
        [t] = turns
        [by_tool, by_hand] = t.result.tools
        assert by_tool.error_class == by_hand.error_class == error_class_name(failure)
        assert t.result.error_class == error_class_name(failure)
        assert (await turn_record(store, "chat-1", "t1"))["status"] == "abandoned"
