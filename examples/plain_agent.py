"""A plain async function as the agent: ``with_memory`` makes every call one stored turn.

    python examples/plain_agent.py [PATH]

No server and no LLM: the "agent" answers from what retrieval found. Swap its body for a
call to your model; the memory part does not change. The store is in memory unless PATH
names a file (then read it back with ``neotoma-agent show plain-example --db PATH``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import anyio

from neotoma_agent import EmbeddedStore, Turn, TurnResult, with_memory


async def answer(user_message: str, turn: Turn) -> str:
    """The agent: any ``(user_message, turn) -> str`` function (sync ones work too)."""
    if not turn.retrieved:
        return "I don't know anything about that yet."
    turn.cite(*turn.retrieved)  # the reply REFERS_TO what it relied on
    facts = "; ".join(
        f"{e.name} ({e.entity_type}, {e.snapshot.get('website', 'no website')})"
        for e in turn.retrieved
    )
    return f"From memory: {facts}."


async def main(path: str | Path = ":memory:", *, out: TextIO = sys.stdout) -> list[TurnResult]:
    """Ask two questions; return what each turn stored."""
    results = []
    async with EmbeddedStore.open(path) as store:
        # Something for retrieval to find (an agent's tools would usually store this).
        await store.store(
            [{"entity_type": "company", "name": "Acme Corp", "website": "acme.com"}],
            idempotency_key="plain-example-acme",
        )
        agent = with_memory(answer, transport=store, conversation_id="plain-example")
        for question in ("What do we know about Acme Corp?", "Have we met Globex yet?"):
            reply = await agent(question)
            result = reply.result
            out.write(f"user:  {question}\nagent: {reply.reply}\n")
            out.write(
                f"       stored: user {result.user_message_id}, "
                f"reply {result.assistant_message_id} ({result.stored_status}), "
                f"REFERS_TO {len(result.cited_ids)} entities\n"
            )
            results.append(result)
    return results


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else ":memory:")
