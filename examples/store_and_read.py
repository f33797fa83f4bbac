"""Store one turn-shaped payload on the embedded store and read it back.

    python examples/store_and_read.py [PATH]

No server needed: the store is one SQLite file (a temporary one by default). What the
library reads back from it (``memory.history``) is printed last.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from neotoma_agent import EmbeddedStore, NeotomaMemory


async def main(path: Path) -> None:
    async with EmbeddedStore.open(path) as store:
        company = await store.store(
            [{"entity_type": "company", "name": "Acme Corp", "website": "acme.com"}],
            idempotency_key="example-company-acme",
        )
        acme = company.entity_id(0)
        result = await store.store(
            [
                {"entity_type": "conversation", "conversation_id": "example", "title": "Example"},
                {
                    "entity_type": "conversation_message",
                    "role": "user",
                    "sender_kind": "user",
                    "content": "What do we know about Acme Corp?",
                    "turn_key": "example:t1",
                },
            ],
            relationships=[
                {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0},
                {"relationship_type": "REFERS_TO", "source_index": 1, "target_entity_id": acme},
            ],
            idempotency_key="conversation-example-t1-user-turn",
        )
        message_id = result.entity_id(1)
        snapshot = await store.get_entity_snapshot(message_id)
        related = await store.retrieve_related_entities(message_id, direction="outbound")
        found = await store.retrieve_entity_by_identifier("Acme Corp")

        print(f"stored into {path}")
        print(f"message {message_id}: {snapshot.snapshot['content']!r}")
        for edge in related.relationships:
            print(f"  {edge.relationship_type} -> {edge.target_entity_id}")
        print(f"lookup 'Acme Corp' ({found.match_mode}): {[e.name for e in found.entities]}")
        # The library reads raw stores too: the turn as ``memory.history`` sees it (no turn
        # record was written, and no reply: "open").
        (turn,) = await NeotomaMemory(store, conversation_id="example").history()
        print(f"history: turn {turn.turn_id} ({turn.status}): {turn.user!r}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        anyio.run(main, Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            anyio.run(main, Path(tmp) / "example.db")
