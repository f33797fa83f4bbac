"""Benchmark ``audit``: how long it takes to check a large store for orphan turns.

    python benchmarks/audit.py [--quick] [--json PATH] [--db PATH] [--http]

Seeds an embedded store with N conversations x T turns (default 10,000 x 10) of which a
fraction (default 1%) are orphans (user store only, turn record ``open``, as a crash
between a turn's two stores leaves them), written as ``NeotomaMemory`` turns write them
(``_synth.build_turns``: the store's own write action, without the turn loop), then times:

- ``audit`` on the whole store (target: under 10 s for 10,000 x 10 on a 2-core machine);
- ``audit --conversation`` on one conversation, and ``audit --since`` on a recent slice;
- ``audit --thorough`` (also pages through every message);
- ``audit --repair`` (closes every orphan), then a final ``audit`` that must be clean;
- with ``--http``, the whole-store audit over the dev server on 127.0.0.1.

Each audit opens the store afresh (cold page cache of the store's own connection). The
seeded store is kept with ``--db PATH`` and reused by a later run with the same sizes
(``--db`` with a repaired store re-seeds it). ``--quick`` uses 1,000 x 10.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _synth
from _meta import environment

from neotoma_agent.qa import AuditReport, audit
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore

#: the dev server always requires a token
TOKEN = "bench-token"

TARGET_S = 10.0


def seed(path: Path, conversations: int, turns: int, orphans: set[int]) -> float:
    """Write the turns as ``NeotomaMemory`` would (``_synth.build_turns``); return seconds."""
    return _synth.build_turns(path, conversations, turns, orphans)


async def timed_audit(path: Path, **kwargs: Any) -> tuple[float, AuditReport]:
    """One audit on a freshly opened store (opening included in the time)."""
    started = time.perf_counter()
    # The turns were written a moment ago: min_age=0 audits them all (the default leaves
    # young open turns alone, as they may still be running).
    kwargs.setdefault("min_age", 0)
    async with EmbeddedStore.open(path) as store:
        report = await audit(store, **kwargs)
    return time.perf_counter() - started, report


async def timed_http_audit(path: Path) -> tuple[float, AuditReport]:
    """The whole-store audit through HttpTransport and the dev server on 127.0.0.1."""
    from neotoma_agent.server import create_app, serving
    from neotoma_agent.transport.http import HttpTransport

    async with EmbeddedStore.open(path) as store, serving(create_app(store, token=TOKEN)) as url:
        transport: Transport
        async with HttpTransport(url, token=TOKEN) as transport:
            started = time.perf_counter()
            report = await audit(transport, min_age=0)
            return time.perf_counter() - started, report


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"benchmark check failed: {what}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    conversations = 1_000 if args.quick else args.conversations
    turns = args.turns
    total = conversations * turns
    n_orphans = round(total * args.orphan_rate)
    orphans = set(random.Random(42).sample(range(total), n_orphans))
    shape = {"conversations": conversations, "turns": turns, "orphans": n_orphans}

    workdir = Path(tempfile.mkdtemp(prefix="neotoma-audit-bench-"))
    try:
        path = Path(args.db) if args.db else workdir / "audit.db"
        marker = path.with_name(path.name + ".seed.json")
        seed_s: float | None = None
        if not (path.exists() and marker.exists() and json.loads(marker.read_text()) == shape):
            for stale in (path, path.with_name(path.name + "-wal"), marker):
                stale.unlink(missing_ok=True)
            print(f"seeding {conversations:,} conversations x {turns} turns ...", file=sys.stderr)
            seed_s = seed(path, conversations, turns, orphans)
            marker.write_text(json.dumps(shape))
        # Repairs change the store: work on a copy so a kept --db stays reusable.
        work = workdir / "work.db"
        shutil.copyfile(path, work)

        rows: list[dict[str, Any]] = []

        async def row(
            name: str, fn: Callable[[], Awaitable[tuple[float, AuditReport]]]
        ) -> AuditReport:
            seconds, report = await fn()
            rows.append(
                {
                    "name": name,
                    "seconds": round(seconds, 3),
                    "conversations": report.conversations,
                    "turns": report.turns,
                    "orphans": len(report.orphans),
                    "problems": len(report.problems),
                    "remaining": len(report.remaining),
                }
            )
            print(f"  {name}: {seconds:.2f} s", file=sys.stderr)
            return report

        full = await row("audit (whole store)", lambda: timed_audit(work))
        _check(len(full.orphans) == n_orphans, f"found {len(full.orphans)} of {n_orphans} orphans")
        _check(len(full.problems) == n_orphans, "only the orphans are problems")
        again = await row("audit again", lambda: timed_audit(work))
        _check(again.findings == full.findings, "a second audit finds the same")
        one = await row(
            "audit --conversation (one)",
            lambda: timed_audit(work, conversation_id=_synth.conversation_id(conversations // 2)),
        )
        _check(one.turns == turns, "a scoped audit sees one conversation's turns")
        await row(
            "audit --since (future: nothing)",
            lambda: timed_audit(work, since="2999-01-01T00:00:00Z"),
        )
        thorough = await row("audit --thorough", lambda: timed_audit(work, thorough=True))
        _check(thorough.findings == full.findings, "thorough finds the same on this store")
        if args.http:
            over_http = await row("audit over HTTP (dev server)", lambda: timed_http_audit(work))
            _check(over_http.findings == full.findings, "HTTP finds the same as the file")
        repaired = await row("audit --repair", lambda: timed_audit(work, repair=True))
        _check(repaired.clean, "every orphan was closed")
        after = await row("audit after repair", lambda: timed_audit(work))
        _check(after.clean and len(after.abandoned) == n_orphans, "the store is clean")
        return {
            "shape": shape,
            "entities": conversations * (1 + 3 * turns) - n_orphans,
            "seed_seconds": None if seed_s is None else round(seed_s, 1),
            "target_seconds": TARGET_S,
            "rows": rows,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--orphan-rate", type=float, default=0.01)
    parser.add_argument("--quick", action="store_true", help="1,000 conversations")
    parser.add_argument("--db", help="keep (and reuse) the seeded store at this path")
    parser.add_argument("--http", action="store_true", help="also audit over the dev server")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    meta = environment()
    # An application decides what the library logs: here, only warnings.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    result = anyio.run(run, args, backend="asyncio")
    shape = result["shape"]
    print(
        f"\naudit benchmark: {shape['conversations']:,} conversations x {shape['turns']} turns, "
        f"{shape['orphans']:,} orphans ({result['entities']:,} entities)"
        + (f", seeded in {result['seed_seconds']} s" if result["seed_seconds"] else "")
    )
    header = f"{'run':<34} {'seconds':>8} {'convs':>7} {'turns':>8} {'orphans':>8} {'left':>6}"
    print(header)
    print("-" * len(header))
    for r in result["rows"]:
        print(
            f"{r['name']:<34} {r['seconds']:>8.2f} {r['conversations']:>7,} {r['turns']:>8,} "
            f"{r['orphans']:>8,} {r['remaining']:>6,}"
        )
    whole = result["rows"][0]["seconds"]
    verdict = "meets" if whole < TARGET_S else "misses"
    print(f"\nwhole-store audit: {whole:.2f} s ({verdict} the {TARGET_S:.0f} s target)")
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "meta": meta}, indent=2) + "\n")


if __name__ == "__main__":
    main()
