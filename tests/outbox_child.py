"""A child process for the outbox tests: queue, deliver, or die at one exact point.

    python tests/outbox_child.py turn URL OUTBOX     one turn whose close gets queued, then SIGKILL
    python tests/outbox_child.py queue URL OUTBOX TAG N   queue N stores (URL is down)
    python tests/outbox_child.py flush URL OUTBOX    flush_outbox(), print the counts as JSON

The kill is ``os.kill(os.getpid(), SIGKILL)``: no exit handler, no ``aclose`` runs, exactly
like ``kill -9``. A test may also SIGKILL a ``flush`` child from the server, mid-delivery.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from outbox_support import FAST, outbox_over_http
from server_support import TOKEN

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.transport.http import flush_outbox

CONVERSATION = "outbox-conv"
REPLY = "The reply the user already saw."


def entry(tag: str, i: int) -> tuple[str, dict[str, Any], str]:
    """Store ``i`` of process ``tag``: its lane (three shared by every process), entity, key."""
    lane = f"lane-{i % 3}"
    entity = {
        "entity_type": "conversation_message",
        "role": "assistant",
        "sender_kind": "assistant",
        "content": f"reply {tag} {i}",
        "turn_key": f"{lane}:{tag}-{i}:assistant",
    }
    return lane, entity, f"outbox-test-{tag}-{i}"


async def turn(url: str, outbox: str) -> None:
    transport = outbox_over_http(url, outbox, background=True)
    memory = NeotomaMemory(transport, conversation_id=CONVERSATION, platform="outbox-test")
    async with memory.turn("Tell me about Acme Corp", turn_id="t1") as t:
        t.reply = REPLY
    assert t.result.queued, t.result
    print("queued", t.result.assistant_message_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


async def queue(url: str, outbox: str, tag: str, n: int) -> None:
    async with outbox_over_http(url, outbox, background=True) as transport:
        for i in range(n):
            lane, entity, key = entry(tag, i)
            outcome = await transport.store(
                [entity], idempotency_key=key, lane=lane, deferrable=True
            )
            assert outcome.queued
    print("queued", n, flush=True)


async def flush(url: str, outbox: str) -> None:
    done = await flush_outbox(outbox, url, TOKEN, retry=FAST)
    print(json.dumps({"delivered": done.delivered, "remaining": done.remaining}), flush=True)


def main(argv: list[str]) -> None:
    mode, url, outbox, *rest = argv
    if mode == "turn":
        asyncio.run(turn(url, outbox))
    elif mode == "queue":
        asyncio.run(queue(url, outbox, rest[0], int(rest[1])))
    elif mode == "flush":
        asyncio.run(flush(url, outbox))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
