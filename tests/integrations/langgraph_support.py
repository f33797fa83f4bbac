"""Fake chat models for the LangGraph tests, built on langchain-core's own fakes.

``GenericFakeChatModel`` streams but cannot bind tools and never blocks; these two add what
the tests need: a streaming model that can fail or block mid-reply (``ScriptedStream``) and
a tool-calling one (``ToolFake``). Both keep what each call saw (system text, messages).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

#: a step of ``ScriptedStream``: wait here until cancelled
BLOCK = object()


class Seen:
    """What a fake model was given, call by call."""

    def __init__(self) -> None:
        self.systems: list[str] = []
        self.messages: list[list[BaseMessage]] = []

    def add(self, messages: Sequence[BaseMessage]) -> None:
        system = [m for m in messages if isinstance(m, SystemMessage)]
        self.systems.append(str(system[0].text) if system else "")
        self.messages.append(list(messages))


class ScriptedStream(BaseChatModel):
    """Streams its script's strings as chunks; raises an exception step; blocks on BLOCK."""

    script: list[Any]
    seen: Any = None
    before: Callable[[], Awaitable[None]] | None = None

    @property
    def _llm_type(self) -> str:
        return "scripted-stream"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("ScriptedStream only streams")

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        if self.seen is not None:
            self.seen.add(messages)
        if self.before is not None:
            await self.before()
        for step in self.script:
            if step is BLOCK:
                await asyncio.Event().wait()
            if isinstance(step, BaseException):
                raise step
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=step))
            if run_manager is not None:
                await run_manager.on_llm_new_token(step, chunk=chunk)
            yield chunk

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = ""
        async for chunk in self._astream(messages, stop, run_manager, **kwargs):
            text += str(chunk.message.content)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


class ToolFake(FakeMessagesListChatModel):
    """``FakeMessagesListChatModel`` that accepts tools (it answers from its list anyway)."""

    seen: Any = None

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolFake:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.seen is not None:
            self.seen.add(messages)
        return super()._generate(messages, stop, run_manager, **kwargs)


def tool_call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    """A model message asking for one tool call."""
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def words(text: str) -> Iterator[AIMessage | str]:
    """The messages iterator GenericFakeChatModel takes, for one reply."""
    return iter([text])
