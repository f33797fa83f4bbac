"""Benchmark: identifier lookups and the audit on a large embedded store.

    python benchmarks/scale.py [--entities 1000000] [--turns 1000000] [--dir PATH]
                               [--json PATH]
    python benchmarks/scale.py --audit-one DB

Lookups: N companies written by ``_synth.build_companies`` (the store's own write action,
500 companies per store, ``synchronous=OFF``: the build is not what is measured), then
``retrieve_entity_by_identifier`` by name on a fresh open: p50 / p99 of 1,000 lookups
spread over the store, wall and CPU (the CPU tail is the lookup's own; the wall tail on a
loaded machine is mostly waiting for a core), and the mean CPU time per lookup. Audit: N
turns written by ``_synth.build_turns`` (what ``NeotomaMemory`` turns write: 10 turns per
conversation, 1% orphans, conversation after conversation; the same write action and
``synchronous=OFF``, many stores per transaction, about 430 turns/s on a free core), then
one whole-store ``audit`` per size, each in a fresh process: wall and CPU time, and the
process's peak resident memory over what it held before the audit (for N / 10 turns and
for N turns: "flat" is about the same growth for both). ``--audit-one DB`` audits one
existing store (a copy of a built one: no marker needed) in this process and prints those
figures as JSON, which is how each size is run.

Targets (issue 15): lookup p50 <= 1 ms and p99 <= 3 ms at 1,000,000 entities; the audit of
1,000,000 turns in <= 60 s with memory flat. ``--dir`` keeps the built stores and reuses
them in a later run with the same sizes (a 1,000,000-turn build takes most of an hour
here); ``--entities`` / ``--turns`` take CI sizes.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _synth
from _report import run_and_report

from neotoma_agent.qa import audit
from neotoma_agent.transport.embedded import EmbeddedStore

TARGETS = {"lookup_p50_ms": 1.0, "lookup_p99_ms": 3.0, "audit_seconds": 60.0}
TURNS_PER_CONVERSATION = 10


def built(path: Path, shape: dict[str, int], build: Any) -> float | None:
    """Build the store at ``path`` unless one of this ``shape`` is there; the seconds taken."""
    marker = path.with_name(path.name + ".shape.json")
    if path.exists() and marker.exists() and json.loads(marker.read_text()) == shape:
        return None
    for stale in (path, path.with_name(path.name + "-wal"), marker):
        stale.unlink(missing_ok=True)
    seconds: float = build(path)
    marker.write_text(json.dumps(shape))
    return seconds


async def lookups(path: Path, n: int, samples: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds per lookup by name over a random spread of the store (fresh
    open), each sorted. The CPU time (both threads) is what the lookup costs; the wall time
    also holds the waits for a core, which dominate the tail on a loaded machine."""
    picks = random.Random(15).sample(range(n), min(samples, n))
    async with EmbeddedStore.open(path) as store:
        times, cpus = [], []
        for i in picks:
            started, cpu = time.perf_counter(), time.process_time()
            found = await store.retrieve_entity_by_identifier(_synth.company_name(i))
            times.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
            if [e.canonical_name for e in found.entities] != [_synth.company_name(i)]:
                raise SystemExit(f"lookup of {_synth.company_name(i)!r} found {found.entities!r}")
    return sorted(times), sorted(cpus)


def _ms(sorted_seconds: list[float], q: float) -> float:
    return round(
        sorted_seconds[min(len(sorted_seconds) - 1, int(len(sorted_seconds) * q))] * 1e3, 3
    )


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


async def audit_once(path: Path) -> dict[str, Any]:
    """One whole-store audit in this process (``--audit-one``): time, CPU and memory."""
    async with EmbeddedStore.open(path) as store:
        before = _rss_bytes()
        started, cpu = time.perf_counter(), time.process_time()
        # The turns were written a moment ago: min_age=0 audits them all.
        report = await audit(store, min_age=0)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "memory_growth_mb": max(0, peak - before) / 2**20,
        "turns": report.turns,
        "orphans": len(report.orphans),
        "problems": len(report.problems),
    }


def audit_row(path: Path, turns: int) -> dict[str, Any]:
    """Build (or reuse) ``turns`` turns, then audit them in a fresh process."""
    conversations = max(1, turns // TURNS_PER_CONVERSATION)
    total = conversations * TURNS_PER_CONVERSATION
    orphans = set(random.Random(42).sample(range(total), total // 100))
    build_s = built(
        path,
        {"turns": total},
        lambda p: _synth.build_turns(p, conversations, TURNS_PER_CONVERSATION, orphans),
    )
    proc = subprocess.run(
        [sys.executable, __file__, "--audit-one", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the audit of {path} failed:\n{proc.stderr}")
    one = json.loads(proc.stdout)
    if one["orphans"] != len(orphans) or one["problems"] != len(orphans):
        raise SystemExit(f"audit found {one['orphans']} of {len(orphans)} orphans")
    if one["turns"] != total:
        raise SystemExit(f"audit examined {one['turns']} of {total} turns")
    return {
        "turns": total,
        "build_seconds": None if build_s is None else round(build_s, 1),
        "audit_seconds": round(one["seconds"], 2),
        "audit_cpu_seconds": round(one["cpu_seconds"], 2),
        "audit_memory_growth_mb": round(one["memory_growth_mb"], 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = args.dir or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        if args.entities:
            path = d / f"companies-{args.entities}.db"
            build_s = built(
                path,
                {"entities": args.entities},
                lambda p: _synth.build_companies(p, args.entities),
            )
            times, cpus = await lookups(path, args.entities, args.samples)
            result.update(
                entities=args.entities,
                build_seconds=None if build_s is None else round(build_s, 1),
                lookup_p50_ms=_ms(times, 0.5),
                lookup_p99_ms=_ms(times, 0.99),
                lookup_cpu_ms=round(sum(cpus) / len(cpus) * 1e3, 3),
                lookup_cpu_p50_ms=_ms(cpus, 0.5),
                lookup_cpu_p99_ms=_ms(cpus, 0.99),
            )
            print(f"  lookups at {args.entities:,}: done", file=sys.stderr)
        if args.turns:
            sizes = sorted({max(10, args.turns // 10), args.turns})
            result["audits"] = [audit_row(d / f"turns-{n}.db", n) for n in sizes]
            result["audit_seconds"] = result["audits"][-1]["audit_seconds"]
    return result


def render(result: dict[str, Any]) -> str:
    lines = []
    if "entities" in result:
        built_in = result["build_seconds"]
        lines.append(
            f"lookups at {result['entities']:,} entities"
            + (f" (built in {built_in} s)" if built_in is not None else " (store reused)")
            + f", CPU {result['lookup_cpu_ms']:.3f} ms per lookup:"
        )
        for key in ("lookup_p50_ms", "lookup_p99_ms"):
            ok = "ok" if result[key] <= TARGETS[key] else "MISSED"
            cpu = result[key.replace("lookup_", "lookup_cpu_")]
            lines.append(
                f"  {key:<16} {result[key]:>8.3f}  <= {TARGETS[key]:g} {ok}  (CPU {cpu:.3f})"
            )
    if "audits" in result:
        lines.append(
            f"\n{'turns':>10} {'build s':>8} {'audit s':>8} {'CPU s':>7} {'memory growth MB':>17}"
        )
        for row in result["audits"]:
            build = "reused" if row["build_seconds"] is None else f"{row['build_seconds']:.1f}"
            lines.append(
                f"{row['turns']:>10,} {build:>8} {row['audit_seconds']:>8.2f} "
                f"{row['audit_cpu_seconds']:>7.2f} {row['audit_memory_growth_mb']:>17.1f}"
            )
        ok = "ok" if result["audit_seconds"] <= TARGETS["audit_seconds"] else "MISSED"
        lines.append(f"audit of the largest store: <= {TARGETS['audit_seconds']:g} s {ok}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entities", type=int, default=1_000_000, help="0: no lookup row")
    parser.add_argument("--turns", type=int, default=1_000_000, help="0: no audit rows")
    parser.add_argument("--samples", type=int, default=1_000, help="lookups timed")
    parser.add_argument("--dir", type=Path, help="keep (and reuse) the built stores here")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--audit-one", type=Path, metavar="DB", help="audit this store file only; JSON out"
    )
    args = parser.parse_args()
    if args.audit_one is not None:
        # stdout carries the figures: the library's events (silent by default) stay off it.
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        print(json.dumps(anyio.run(audit_once, args.audit_one)))
        return
    run_and_report(args, run, render)


if __name__ == "__main__":
    main()
