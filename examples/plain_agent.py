"""A plain async function as the agent: ``with_memory`` makes every call one stored turn.

    python examples/plain_agent.py [PATH]

No server and no LLM: the "agent" answers from what retrieval found and what was said
earlier (``turn.history``), and records a follow-up task when it knows nothing
(``turn.remember``: stored with the reply, which REFERS_TO it). Swap its body for a call to
your model (give it ``turn.context()``); the memory part does not change. The store is in
memory unless PATH names a file (then read it back with
``neotoma-agent show plain-example --db PATH``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import anyio

from neotoma_agent import EmbeddedStore, NeotomaMemory, Turn, TurnResult, with_memory

QUESTIONS = ("What do we know about Acme Corp?", "Have we met Globex yet?")


async def answer(user_message: str, turn: Turn) -> str:
    """The agent: any ``(user_message, turn) -> str`` function (sync ones work too)."""
    earlier = f" (Earlier you asked: {turn.history[-1].user})" if turn.history else ""
    # turn.linked: what the message names (turn.retrieved also holds the last turns').
    if not turn.linked:
        # Something the reply produces: its id now, the entity stored with the reply.
        task = turn.remember("task", title=f"Find out: {user_message}", status="open")
        return f"I don't know anything about that yet; I noted task {task}.{earlier}"
    # The retrieved entities are REFERS_TO from the reply already; t.cite adds others.
    facts = "; ".join(
        f"{e.name} ({e.entity_type}, {e.snapshot.get('website', 'no website')})"
        for e in turn.linked
    )
    return f"From memory: {facts}.{earlier}"


async def main(path: str | Path = ":memory:", *, out: TextIO = sys.stdout) -> list[TurnResult]:
    """Ask two questions; return what each turn stored."""
    results = []
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="plain-example", history_turns=3)
        # Something for retrieval to find (a repeated remember replays: no duplicate).
        await memory.remember("company", name="Acme Corp", website="acme.com")
        agent = with_memory(answer, memory=memory)
        for question in QUESTIONS:
            reply = await agent(question)
            result = reply.result
            out.write(f"user:  {question}\nagent: {reply.reply}\n")
            out.write(
                f"       stored: user {result.user_message_id}, "
                f"reply {result.assistant_message_id} ({result.status}), "
                f"REFERS_TO {len(result.retrieved_ids)} retrieved and "
                f"{len(result.produced_ids)} produced entities\n"
            )
            results.append(result)
    return results


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else ":memory:")
