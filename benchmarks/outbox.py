"""Benchmark the outbox: how fast closing stores are queued, and how fast they are delivered.

    python benchmarks/outbox.py [--json PATH] [--quick]

Queueing: closing stores sent to a port where nothing listens (connection refused, no
retries), each appended durably (WAL, synchronous=FULL) to the outbox file. Delivery: the
same file flushed to a dev server over an in-memory embedded store, in order per
conversation. Prints a table; ``--json`` also writes the figures. Absolute numbers vary
with the machine and its disk (every append is an fsync).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _meta import environment

from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy
from neotoma_agent.transport.outbox import OutboxTransport

#: the dev server always requires a token
TOKEN = "bench-token"

DOWN = "http://127.0.0.1:9"  # the discard port: nothing listens there


def closing(conversation: str, turn: int) -> tuple[list[dict[str, Any]], str]:
    """A turn-shaped closing store: the assistant message and the turn record."""
    tid = f"t{turn}"
    entities = [
        {
            "entity_type": "conversation_message",
            "role": "assistant",
            "sender_kind": "assistant",
            "content": f"reply {turn} of {conversation}",
            "turn_key": f"{conversation}:{tid}:assistant",
        },
        {
            "entity_type": "conversation_turn",
            "session_id": conversation,
            "turn_id": tid,
            "turn_key": f"{conversation}:{tid}",
            "status": "completed",
        },
    ]
    return entities, f"conversation-{conversation}-{tid}-assistant-turn"


async def main(args: argparse.Namespace) -> dict[str, Any]:
    n = 100 if args.quick else 1000
    conversations = 10
    with tempfile.TemporaryDirectory() as tmp:
        box = Path(tmp) / "outbox.db"
        no_retry = RetryPolicy.no_retries()
        async with OutboxTransport(
            HttpTransport(DOWN, token=TOKEN, retry=no_retry), box, background=False
        ) as transport:
            started = time.perf_counter()
            for i in range(n):
                conversation = f"bench-{i % conversations}"
                entities, key = closing(conversation, i)
                outcome = await transport.store(
                    entities, idempotency_key=key, lane=conversation, deferrable=True
                )
                assert outcome.queued
            queue_s = time.perf_counter() - started
        async with (
            EmbeddedStore.open(":memory:") as store,
            serving(create_app(store, token=TOKEN)) as url,
            OutboxTransport(HttpTransport(url, token=TOKEN), box, background=False) as transport,
        ):
            started = time.perf_counter()
            done = await transport.flush()
            deliver_s = time.perf_counter() - started
        assert done.delivered == n, done
    return {
        "entries": n,
        "conversations": conversations,
        "queued_per_s": n / queue_s,
        "delivered_per_s": n / deliver_s,
    }


def render(res: dict[str, Any]) -> str:
    rows = [
        ("entries (closing stores)", f"{res['entries']}"),
        ("conversations", f"{res['conversations']}"),
        ("queued stores/s (server down, fsync each)", f"{res['queued_per_s']:,.0f}"),
        ("delivered stores/s (flush to a dev server)", f"{res['delivered_per_s']:,.0f}"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name:<{width}}  {value:>10}" for name, value in rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    # Every queued store logs a WARNING by design; the table is the output here.
    logging.getLogger("neotoma_agent").setLevel(logging.ERROR)
    meta = environment()
    res = asyncio.run(main(parser.parse_args()))
    print(render(res))
    args = parser.parse_args()
    if args.json:
        args.json.write_text(json.dumps({**res, "meta": meta}, indent=2) + "\n")
    sys.exit(0)
