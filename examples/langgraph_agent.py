"""A LangChain ``create_agent`` whose every run is a stored Neotoma turn, approvals included.

    pip install 'neotoma-agent[langchain]'
    python examples/langgraph_agent.py [PATH]

Offline by default: the model is a scripted fake (langchain-core's ``FakeMessagesListChatModel``
taught to accept tools). Set ``NEOTOMA_EXAMPLE_MODEL`` to a ``provider:model`` name that
``langchain.chat_models.init_chat_model`` knows (``openai:gpt-4o-mini`` with
``langchain-openai`` installed and ``OPENAI_API_KEY`` set) to run the same agent on a real
model. Two turns: one that calls a tool, one that stops at ``interrupt()`` for a person's
approval (the turn stays open) and is finished by the resumed run. The store is in memory
unless PATH names a file (then ``neotoma-agent show langgraph-example --db PATH``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from neotoma_agent import EmbeddedStore, NeotomaMemory, current_turn
from neotoma_agent.integrations.langgraph import NeotomaMiddleware, astream_turn


@tool
def find_company(name: str) -> str:
    """Look a company up (here: a fixed answer)."""
    return f"{name}: customer since 2021, website acme.com"


@tool
def send_email(to: str, text: str) -> str:
    """Send an email, once a person has approved it."""
    if interrupt({"approve": f"email {to}?"}) != "yes":
        return "not sent"
    turn = current_turn()  # the turn this run belongs to: record what the tool produced
    if turn is not None:
        turn.remember("task", title=f"Follow up with {to}", status="open")
    return f"sent to {to}"


class ToolFake(FakeMessagesListChatModel):
    """The offline model: answers from its list, and accepts tools."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolFake:
        return self


def model() -> Any:
    name = os.environ.get("NEOTOMA_EXAMPLE_MODEL")
    if name:
        from langchain.chat_models import init_chat_model

        return init_chat_model(name)
    return ToolFake(
        responses=[
            AIMessage(
                "", tool_calls=[{"name": "find_company", "args": {"name": "Acme Corp"}, "id": "c1"}]
            ),
            AIMessage("Acme Corp has been a customer since 2021."),
            AIMessage(
                "",
                tool_calls=[
                    {"name": "send_email", "args": {"to": "bob@acme.com", "text": "Hi"}, "id": "c2"}
                ],
            ),
            AIMessage("I emailed Bob and noted a follow-up."),
        ]
    )


async def main(path: str) -> None:
    agent = create_agent(
        model(),
        [find_company, send_email],
        system_prompt="You help the sales team.",
        middleware=[NeotomaMiddleware()],
        checkpointer=InMemorySaver(),  # the thread keeps the history: it is not sent twice
    )
    config = {"configurable": {"thread_id": "langgraph-example"}}
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="langgraph-example")
        async with astream_turn(agent, "What about Acme Corp?", memory=memory, config=config) as s:
            async for delta in s.text():
                print(delta, end="", flush=True)
        print(f"\n[{s.result.stored_status}, {len(s.result.tools)} tool call(s)]")

        async with astream_turn(agent, "Email Bob at Acme", memory=memory, config=config) as s:
            pass
        print(f"waiting for approval: {s.interrupts[0].value} [{s.result.stored_status}]")
        async with astream_turn(agent, Command(resume="yes"), memory=memory, config=config) as s:
            async for delta in s.text():
                print(delta, end="", flush=True)
        print(f"\n[{s.result.stored_status}, {len(s.result.tools)} tool call(s)]")

        for h in await memory.history():
            print(f"stored: {h.status:9} {h.user!r} -> {h.reply!r}")


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else ":memory:"
    if target != ":memory:":
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
