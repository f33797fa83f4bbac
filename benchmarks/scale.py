"""Benchmark: identifier lookups and the audit on a large embedded store.

    python benchmarks/scale.py [--entities 1000000] [--turns 1000000] [--json PATH]

Lookups: builds a store of N companies through the public API (``EmbeddedStore.store``,
500 entities per store, ``synchronous=OFF`` while building: the build is not what is
measured), then times ``retrieve_entity_by_identifier`` by name on a fresh connection
(p50 / p99 of 1,000 lookups spread over the store). Audit: seeds N turns the way
``benchmarks/audit.py`` does (its seeding: 10 turns per conversation, 1% orphans), then
times one whole-store ``audit`` and samples the process's resident memory meanwhile
(growth over the audit, and over the audit of a tenth of the turns, for comparison).

Targets (issue 15): lookup p50 <= 1 ms and p99 <= 3 ms at 1,000,000 entities; the audit of
1,000,000 turns in <= 60 s with memory flat. ``--entities`` / ``--turns`` take CI sizes.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report
from audit import seed, timed_audit

from neotoma_agent.transport.embedded import EmbeddedStore

TARGETS = {"lookup_p50_ms": 1.0, "lookup_p99_ms": 3.0, "audit_seconds": 60.0}
_BATCH = 500


def company(i: int) -> str:
    return f"Company {i:07d} Holdings"


async def build_companies(path: Path, n: int) -> float:
    """N companies, 500 per store, 4 stores in flight; returns the seconds taken."""
    started = time.perf_counter()
    limiter = anyio.CapacityLimiter(4)
    async with EmbeddedStore.open(path, synchronous="OFF") as store:

        async def batch(start: int) -> None:
            async with limiter:
                entities = [
                    {"entity_type": "company", "name": company(i)}
                    for i in range(start, min(start + _BATCH, n))
                ]
                await store.store(entities, idempotency_key=f"scale-{start}")

        async with anyio.create_task_group() as tg:
            for start in range(0, n, _BATCH):
                tg.start_soon(batch, start)
    return time.perf_counter() - started


async def lookups(path: Path, n: int, samples: int) -> list[float]:
    """Seconds per lookup by name, over a random spread of the store, on a fresh open."""
    picks = random.Random(15).sample(range(n), min(samples, n))
    async with EmbeddedStore.open(path) as store:
        times = []
        for i in picks:
            started = time.perf_counter()
            found = await store.retrieve_entity_by_identifier(company(i))
            times.append(time.perf_counter() - started)
            if [e.canonical_name for e in found.entities] != [company(i)]:
                raise SystemExit(f"lookup of {company(i)!r} found {found.entities!r}")
    return sorted(times)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


async def audit_row(path: Path, turns: int) -> dict[str, Any]:
    """Seed ``turns`` turns, then time one whole-store audit and sample memory meanwhile."""
    conversations = max(1, turns // 10)
    total = conversations * 10
    orphans = set(random.Random(42).sample(range(total), total // 100))
    seed_s = await seed(path, conversations, 10, orphans)
    before = _rss_bytes()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _rss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        seconds, report = await timed_audit(path)
    finally:
        done.set()
        sampler.join()
    if len(report.orphans) != len(orphans):
        raise SystemExit(f"audit found {len(report.orphans)} of {len(orphans)} orphans")
    return {
        "turns": total,
        "seed_seconds": round(seed_s, 1),
        "audit_seconds": round(seconds, 2),
        "audit_memory_growth_mb": round((peak[0] - before) / 2**20, 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        if args.entities:
            build_s = await build_companies(d / "companies.db", args.entities)
            times = await lookups(d / "companies.db", args.entities, args.samples)
            result.update(
                entities=args.entities,
                build_seconds=round(build_s, 1),
                lookup_p50_ms=round(times[len(times) // 2] * 1e3, 3),
                lookup_p99_ms=round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3, 3),
            )
            print(f"  lookups at {args.entities:,}: done", file=sys.stderr)
        if args.turns:
            result["audits"] = [
                await audit_row(d / f"audit-{n}.db", n)
                for n in sorted({max(10, args.turns // 10), args.turns})
            ]
            big = result["audits"][-1]
            result["audit_seconds"] = big["audit_seconds"]
    return result


def render(result: dict[str, Any]) -> str:
    lines = []
    if "entities" in result:
        lines.append(
            f"lookups at {result['entities']:,} entities (built in {result['build_seconds']} s):"
        )
        for key in ("lookup_p50_ms", "lookup_p99_ms"):
            ok = "ok" if result[key] <= TARGETS[key] else "MISSED"
            lines.append(f"  {key:<16} {result[key]:>8.3f}  <= {TARGETS[key]:g} {ok}")
    if "audits" in result:
        lines.append(f"\n{'turns':>10} {'seed s':>8} {'audit s':>8} {'memory growth MB':>17}")
        for row in result["audits"]:
            lines.append(
                f"{row['turns']:>10,} {row['seed_seconds']:>8.1f} {row['audit_seconds']:>8.2f} "
                f"{row['audit_memory_growth_mb']:>17.1f}"
            )
        ok = "ok" if result["audit_seconds"] <= TARGETS["audit_seconds"] else "MISSED"
        lines.append(f"audit of the largest store: <= {TARGETS['audit_seconds']:g} s {ok}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entities", type=int, default=1_000_000, help="0: no lookup row")
    parser.add_argument("--turns", type=int, default=1_000_000, help="0: no audit rows")
    parser.add_argument("--samples", type=int, default=1_000, help="lookups timed")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    run_and_report(args, run, render)


if __name__ == "__main__":
    main()
