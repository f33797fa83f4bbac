"""Benchmark the embedded store: store throughput, store cost vs history, lookup latency.

    python benchmarks/embedded_store.py [--json PATH] [--quick]

Prints a table; ``--json`` also writes the figures. Targets (2-core machine): >= 2,000
turn-shaped stores/s with concurrent callers; a store on a conversation holding 10,000
observations within 1.5x of one holding 10; identifier lookup p50 <= 1 ms at 100k entities.
Figures from one run are compared side by side; absolute numbers vary with the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _meta import environment

from neotoma_agent.transport.embedded import EmbeddedStore


def turn_payload(conversation: str, turn: int, text: str) -> dict[str, Any]:
    """What the turn protocol sends on enter: conversation, message, turn record, PART_OF."""
    tid = f"t{turn}"
    return {
        "entities": [
            {"entity_type": "conversation", "conversation_id": conversation, "title": conversation},
            {
                "entity_type": "conversation_message",
                "role": "user",
                "sender_kind": "user",
                "content": text,
                "turn_key": f"{conversation}:{tid}",
            },
            {
                "entity_type": "conversation_turn",
                "session_id": conversation,
                "turn_id": tid,
                "turn_key": f"{conversation}:{tid}",
                "status": "open",
            },
        ],
        "relationships": [{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
        "idempotency_key": f"conversation-{conversation}-{tid}-user-turn",
    }


async def _store(store: EmbeddedStore, payload: dict[str, Any]) -> None:
    await store.store(
        payload["entities"],
        idempotency_key=payload["idempotency_key"],
        relationships=payload["relationships"],
    )


async def throughput(path: Path, callers: int, total: int) -> float:
    """Turn-shaped stores per second with ``callers`` concurrent tasks."""
    async with EmbeddedStore.open(path) as store:
        per = total // callers

        async def caller(c: int) -> None:
            for i in range(per):
                await _store(store, turn_payload(f"conv-{c}", i, f"message {i} of caller {c}"))

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for c in range(callers):
                tg.start_soon(caller, c)
        return (per * callers) / (time.perf_counter() - start)


async def cost_vs_history(path: Path, history: int, samples: int) -> float:
    """Median seconds per store on a conversation that already has ``history`` observations."""
    async with EmbeddedStore.open(path) as store:
        conv = f"hist-{history}"
        # Each turn payload adds one observation to the conversation entity.
        for i in range(history):
            await _store(store, turn_payload(conv, i, f"old {i}"))
        times = []
        for i in range(samples):
            p = turn_payload(conv, history + i, f"new {i}")
            t0 = time.perf_counter()
            await _store(store, p)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)


async def lookup_latency(path: Path, n_entities: int, samples: int) -> tuple[float, float]:
    """p50 and p99 seconds of ``retrieve_entity_by_identifier`` over ``n_entities`` companies."""
    async with EmbeddedStore.open(path) as store:
        batch = 500
        for start in range(0, n_entities, batch):
            ents = [
                {"entity_type": "company", "name": f"Company {i:06d} Holdings"}
                for i in range(start, min(start + batch, n_entities))
            ]
            await store.store(ents, idempotency_key=f"seed-{n_entities}-{start}")
        times = []
        step = max(1, n_entities // samples)
        for i in range(0, n_entities, step):
            t0 = time.perf_counter()
            res = await store.retrieve_entity_by_identifier(f"Company {i:06d} Holdings")
            times.append(time.perf_counter() - t0)
            assert res.entities, "lookup found nothing"
        times.sort()
        return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        n = 2_000 if quick else 10_000
        results["stores_per_s_1_caller"] = await throughput(d / "t1.db", 1, n // 4)
        results["stores_per_s_64_callers"] = await throughput(d / "t64.db", 64, n)
        small = await cost_vs_history(d / "h10.db", 10, 200)
        big = await cost_vs_history(d / "h10k.db", 1_000 if quick else 10_000, 200)
        results["store_ms_at_10_obs"] = small * 1e3
        results["store_ms_at_10k_obs"] = big * 1e3
        results["store_cost_ratio_10k_vs_10"] = big / small
        for count in (10_000, 20_000) if quick else (10_000, 100_000):
            p50, p99 = await lookup_latency(d / f"l{count}.db", count, 500)
            results[f"lookup_p50_ms_{count}"] = p50 * 1e3
            results[f"lookup_p99_ms_{count}"] = p99 * 1e3
    return results


TARGETS = {
    "stores_per_s_64_callers": (">=", 2000.0),
    "store_cost_ratio_10k_vs_10": ("<=", 1.5),
    "lookup_p50_ms_100000": ("<=", 1.0),
}


def render(results: dict[str, Any]) -> str:
    lines = [f"{'metric':<32} {'value':>12}  target", "-" * 56]
    for key, value in results.items():
        target = TARGETS.get(key)
        mark = ""
        if target:
            op, bound = target
            ok = value >= bound if op == ">=" else value <= bound
            mark = f"{op} {bound:g} {'ok' if ok else 'MISSED'}"
        lines.append(f"{key:<32} {value:>12.3f}  {mark}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ns = parser.parse_args()
    meta = environment()
    res = anyio.run(main, ns)
    print(render(res))
    if ns.json:
        ns.json.write_text(json.dumps({**res, "meta": meta}, indent=2) + "\n")
    sys.exit(0)
