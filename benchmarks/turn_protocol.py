"""Benchmark: the turn protocol's overhead per turn on the embedded store.

    python benchmarks/turn_protocol.py [--section turn] [--turns 2000] [--backend asyncio]
                                       [--json PATH] [--check]

Section ``turn``: full turns (enter + exit, empty body: retrieval, the user store and the
closing store) against an EmbeddedStore on a temporary SQLite file, in one conversation
(turns one after another) and in 100 concurrent conversations (turns spread over them),
with a user message naming no entity and one naming one existing entity (one lookup, one
REFERS_TO edge each way). Prints turns per second and per-turn latency (p50 / p99).

The ``instant`` rows run the same turns over a transport that answers at once from memory
(a history read: a page of five earlier turns): what the protocol layer itself costs
(extraction, ranking, payloads, the history read's parsing and assembly, task groups,
shielded closing, result parsing), separated from what the store costs. ``CPU ms`` is the
process's CPU time (``process_time``: the event loop and the store's thread) per turn.

Target (issue 3): >= 1,000 full turns/s with concurrent conversations on a 2-core machine;
``--check`` exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import structlog
from _meta import environment

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._records.keys import conversation_entity_id, turn_record_entity_id
from neotoma_agent._version import __version__
from neotoma_agent.transport._base import (
    LookupResult,
    RecentConversation,
    StoreResult,
    Transport,
)
from neotoma_agent.transport.embedded import EmbeddedStore

TARGET_TURNS_PER_S = 1_000
CONVERSATIONS = 100
MESSAGES = {
    "no entity named": "How are things going today?",
    "one entity named": "What changed at Acme Corp?",
}


#: earlier turns in each page the instant transport answers a history read with
HISTORY_TURNS = 5


def _history_page(conversation_id: str) -> dict[str, Any]:
    """A history page as the embedded store sends it: ``HISTORY_TURNS`` completed turns."""
    messages, records = [], []
    for n in range(HISTORY_TURNS):
        key = f"{conversation_id}:p{n}"
        for suffix, role, content in (
            ("", "user", "How are things?"),
            (":assistant", "assistant", "Fine."),
        ):
            messages.append(
                {
                    "message_id": f"ent_{len(messages):024x}",
                    "canonical_name": None,
                    "role": role,
                    "sender_kind": role,
                    "content": content,
                    "turn_key": key + suffix,
                    "activity_at": "2026-01-01T00:00:00.000Z",
                    "related_entities": [],
                    "hook_summary": None,
                    "turn_number": None,
                }
            )
        snapshot = {"session_id": conversation_id, "turn_id": f"p{n}", "status": "completed"}
        records.append(
            {
                "entity_id": turn_record_entity_id(conversation_id, f"p{n}"),
                "entity_type": "conversation_turn",
                "canonical_name": None,
                "snapshot": snapshot,
                "observation_count": 2,
                "last_observation_at": "2026-01-01T00:00:00.000Z",
                "provenance": {},
            }
        )
    return {
        "conversation_id": conversation_entity_id(conversation_id),
        "messages": messages,
        "has_more": False,  # the whole conversation: one read
        "turn_records": records,
    }


class InstantTransport:
    """Answers ``store``, lookups and history reads at once, in the server's shapes (no I/O,
    no state): each conversation of ``conversation_ids`` has ``HISTORY_TURNS`` earlier turns.
    """

    def __init__(self, conversation_ids: list[str]) -> None:
        self._pages = {}
        for cid in conversation_ids:
            page = _history_page(cid)
            self._pages[page["conversation_id"]] = page

    async def recent_conversation(
        self, conversation_entity_id: str, *, limit: int | None = None, before: str | None = None
    ) -> RecentConversation:
        # Parsed on every read, as a transport parses the JSON it receives.
        return RecentConversation.from_json(self._pages[conversation_entity_id])

    async def recent_conversations(self, **_: Any) -> Any:
        raise NotImplementedError

    async def store(
        self, entities: Any, *, idempotency_key: str, relationships: Any = (), **_: Any
    ) -> StoreResult:
        return StoreResult.from_json(
            {
                "replayed": False,
                "entities": [
                    {
                        "entity_id": f"ent_{i:024x}",
                        "entity_type": e["entity_type"],
                        "observation_index": i,
                        "action": "created",
                    }
                    for i, e in enumerate(entities)
                ],
            }
        )

    async def retrieve_entity_by_identifier(self, identifier: str, **_: Any) -> LookupResult:
        return LookupResult.from_json(
            {
                "entities": [
                    {
                        "id": "ent_" + "a" * 24,
                        "entity_type": "company",
                        "canonical_name": identifier,
                    }
                ],
                "total": 1,
                "match_mode": "direct",
            }
        )


async def _timed_turns(
    store: Transport, conversations: int, turns: int, text: str, run: str
) -> dict[str, Any]:
    memories = [
        NeotomaMemory(store, conversation_id=f"{run}-c{c}", platform="bench")
        for c in range(conversations)
    ]
    latencies: list[float] = []

    async def worker(c: int) -> None:
        memory = memories[c]
        for i in range(c, turns, conversations):
            started = time.perf_counter()
            async with memory.turn(text, turn_id=f"t{i}"):
                pass
            latencies.append(time.perf_counter() - started)

    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for c in range(conversations):
            tg.start_soon(worker, c)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    latencies.sort()
    return {
        "conversations": conversations,
        "turns": turns,
        "seconds": round(elapsed, 3),
        "turns_per_s": round(turns / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 3),
        # CPU of the whole process (event loop and the store's thread) per turn
        "cpu_ms_per_turn": round(cpu / turns * 1000, 3),
    }


async def _embedded_row(conversations: int, turns: int, text: str) -> dict[str, Any]:
    # A fresh, identically seeded store per row, so that rows do not pay for each other's data.
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "bench.db") as store:
            await store.store(
                [{"entity_type": "company", "name": "Acme Corp"}], idempotency_key="bench-seed"
            )
            warmup = NeotomaMemory(store, conversation_id="warmup")
            for i in range(50):
                async with warmup.turn(MESSAGES["one entity named"], turn_id=f"w{i}"):
                    pass
            return await _timed_turns(store, conversations, turns, text, "run")


async def section_turn(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Full turns per second, one conversation and 100 concurrent conversations."""
    rows: list[dict[str, Any]] = []
    for label, text in MESSAGES.items():
        for conversations in (1, CONVERSATIONS):
            row = await _embedded_row(conversations, args.turns, text)
            rows.append({"transport": "embedded", "message": label, **row})
    instant: Any = InstantTransport([f"instant-c{c}" for c in range(CONVERSATIONS)])
    for label, text in MESSAGES.items():
        row = await _timed_turns(instant, CONVERSATIONS, args.turns, text, "instant")
        rows.append({"transport": "instant", "message": label, **row})
    return rows


SECTIONS: dict[str, Callable[[argparse.Namespace], Awaitable[list[dict[str, Any]]]]] = {
    "turn": section_turn,
}


def render(section: str, rows: list[dict[str, Any]]) -> str:
    """A plain-text table of one section's rows."""
    header = f"{'transport':<9} {'message':<18} {'conversations':>13} {'turns':>6} {'turns/s':>9} "
    header += f"{'p50 ms':>8} {'p99 ms':>8} {'CPU ms':>7}"
    lines = [f"[{section}]", header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['transport']:<9} {r['message']:<18} {r['conversations']:>13} {r['turns']:>6} "
            f"{r['turns_per_s']:>9,.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
            f"{r['cpu_ms_per_turn']:>7.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--section", choices=sorted(SECTIONS), action="append")
    parser.add_argument("--turns", type=int, default=2000, help="turns per row (default 2000)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    meta = environment(None if argv is None else ["benchmarks/turn_protocol.py", *argv])
    # The application (this script) decides logging: per-turn INFO events would dominate.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    results: dict[str, Any] = {
        "version": __version__,
        "python": platform.python_version(),
        "backend": args.backend,
        "cpus": os.cpu_count(),
        "sections": {},
    }
    ok = True
    for name in args.section or sorted(SECTIONS):
        rows = anyio.run(SECTIONS[name], args, backend=args.backend)
        results["sections"][name] = rows
        print(render(name, rows))
        if name == "turn":
            concurrent = [
                r
                for r in rows
                if r["conversations"] == CONVERSATIONS and r["transport"] == "embedded"
            ]
            worst = min(r["turns_per_s"] for r in concurrent)
            met = worst >= TARGET_TURNS_PER_S
            ok = ok and met
            print(
                f"target: >= {TARGET_TURNS_PER_S:,} turns/s with {CONVERSATIONS} concurrent "
                f"conversations: {'met' if met else 'MISSED'} (worst {worst:,.0f})"
            )
    if args.json:
        args.json.write_text(json.dumps({**results, "meta": meta}, indent=2) + "\n")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
