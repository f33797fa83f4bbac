"""A plain synchronous script: the turn protocol without ``async``, ``await`` or a loop.

    python examples/sync_script.py [PATH]

``neotoma_agent.sync`` runs the async core on an event loop of its own, in a background
thread, so a script, a notebook cell or a Flask view uses it as it is. No server and no
LLM here: the "model" is a generator of chunks built from what memory holds; swap it for
your model's streaming call (``client.chat.completions.create(..., stream=True)`` and the
like). Press Ctrl-C while it streams: the turn is stored as abandoned, with exactly the
chunks already shown. The store is in memory unless PATH names a file (then read it back
with ``neotoma-agent show sync-example --db PATH``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from neotoma_agent import TurnResult
from neotoma_agent.sync import SyncMemory, SyncStore

QUESTIONS = ("What do we know about Acme Corp?", "Who is their CTO?")
DIRECTORY = {"Acme Corp": "Ana Lopez"}  # the "tool" a real agent would call


def model(prompt: str, *, delay: float = 0.0) -> Iterator[str]:
    """Stands in for a streaming LLM call: yields the reply a few words at a time."""
    known = [line for line in prompt.splitlines() if line.startswith("- ")]
    words = (f"From memory: {known[0][2:]}." if known else "I know nothing about that yet.").split()
    for i in range(0, len(words), 3):
        time.sleep(delay)
        yield (" " if i else "") + " ".join(words[i : i + 3])


def main(path: str | Path = ":memory:", *, out: TextIO = sys.stdout) -> list[TurnResult]:
    """Ask two questions; return what each turn stored."""
    results = []
    with SyncStore.open(path) as store:
        memory = SyncMemory(store, conversation_id="sync-example", history_turns=3)
        memory.remember("company", name="Acme Corp", website="acme.com")  # replays if re-run
        for question in QUESTIONS:
            out.write(f"user:  {question}\nagent: ")
            with memory.turn(question) as t:
                if "CTO" in question:
                    with t.tool("directory_lookup", {"company": "Acme Corp"}) as call:
                        call.result = DIRECTORY["Acme Corp"]
                    person = t.remember("person", name=call.result, role="CTO")
                    t.reply = f"{call.result} ({person}), according to the directory."
                    out.write(t.reply)
                else:
                    for chunk in t.stream(model(t.context())):
                        out.write(chunk)
                        out.flush()
            result = t.result
            out.write(
                f"\n       stored: {result.stored_status}, {len(t.history)} earlier turns read, "
                f"{len(result.retrieved_ids)} retrieved, {len(result.tools)} tool calls\n"
            )
            results.append(result)
        for h in memory.history(limit=None):
            out.write(f"history: {h.status}: {h.user!r} -> {h.reply!r}\n")
    return results


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ":memory:")
