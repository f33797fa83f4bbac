"""Benchmark: where one caller's turn goes, thread by thread, beside 16 callers' (Linux).

    python benchmarks/turn_threads.py [--turns 400] [--rounds 3] [--baseline TREE]
        [--inline] [--syscalls] [--json PATH]

The peers benchmark's short turn on an ``EmbeddedStore`` (``peers.py``'s ``ours``), 1 caller
and 16 callers, each measurement in a fresh process on a fresh file, the rounds
interleaved, each figure from its round with the least CPU. Printed per turn:

- the process's CPU, user and system, and each thread's (the event loop's and the store's,
  from ``/proc/self/task``: its run time, and in the JSON its user and system time in clock
  ticks), with how often each was switched out (voluntarily: it slept; involuntarily: it
  was preempted);
- the store thread's time (its CPU clock, in a second, instrumented child) in ``BEGIN``,
  in the jobs, in ``COMMIT`` (the WAL's frames, the full-text indexes' new segments, a
  checkpoint when one is due) and in waking the callers: what a transaction costs once
  however many stores it commits, against what each store costs;
- with ``--inline``, the same turns with every job run on the event loop's own thread
  (no trip at all): a bound on what any cut of the trips could save, not a mode the store
  has (its thread is what keeps the loop free while SQLite works);
- with ``--syscalls`` (needs ``strace``), the system calls a counted turn makes, by name
  (the hand-offs' ``futex``, ``epoll_wait``, ``sendto`` and ``recvfrom``; the commits'
  ``pwrite64``, ``fcntl``, ``fdatasync``), counted between two marks (``getppid`` and
  ``getpgrp``, as ``_callgrind`` marks), under ``strace -f`` (slower, the same calls).

``--baseline TREE`` adds the same rows with another checkout's package (e.g. ``git -C
REPO archive main | tar -x -C /tmp/main``). CPU moves with the machine's load; compare rows
of one run. Figures for ``docs/performance.md`` ("The pages a commit writes").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

CONVERSATIONS = 16
#: turns before the counted ones, over the 16 conversations
WARMUP = 320
#: the system calls printed (any other is in the JSON)
SHOWN_CALLS = ("futex", "epoll_wait", "sendto", "recvfrom", "pwrite64", "fcntl", "fdatasync")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# ---------------------------------------------------------------------------------------
# The child: one measurement.


def _thread_figures(tid: int) -> dict[str, float]:
    """CPU seconds (all, then user and system: clock ticks), and switches, of thread
    ``tid`` of this process."""
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    status = Path(f"/proc/self/task/{tid}/status").read_text()
    voluntary = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.MULTILINE)
    involuntary = re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.MULTILINE)
    sched = Path(f"/proc/self/task/{tid}/schedstat")
    user, system = int(fields[11]) / _TICK, int(fields[12]) / _TICK
    cpu = int(sched.read_text().split()[0]) / 1e9 if sched.exists() else user + system
    return {
        "cpu": cpu,
        "user": int(fields[11]) / _TICK,
        "system": int(fields[12]) / _TICK,
        "voluntary": float(voluntary.group(1)) if voluntary else 0.0,
        "involuntary": float(involuntary.group(1)) if involuntary else 0.0,
    }


def _inline() -> None:
    """Run every job on the event loop's thread, in the caller's call (a bound, not a mode)."""
    import asyncio

    from neotoma_agent.transport.embedded import _db_thread

    def init(self: Any, connect: Any, name: str) -> None:
        self._conn = connect()

    def submit(self: Any, job: Any) -> None:
        job._call_soon = asyncio.get_running_loop().call_soon
        self._run_group(self._conn, [job])

    def stop(self: Any) -> None:
        self._conn.close()

    _db_thread.DBThread.__init__ = init  # type: ignore[method-assign]
    _db_thread.DBThread.submit = submit  # type: ignore[method-assign]
    _db_thread.DBThread.stop = stop  # type: ignore[method-assign]


class _Split:
    """The store thread's CPU clock in BEGIN, COMMIT, the whole group and the wake-up."""

    def __init__(self) -> None:
        import sqlite3

        from neotoma_agent.transport.embedded import _connect, _db_thread

        self.ns: Counter[str] = Counter()
        #: set by the event loop around the counted turns
        self.on = False
        #: the store thread's group counts: ``on`` when it started (a group the counted
        #: turns wait for ends after they do)
        self.counting = False
        split = self
        clock = time.thread_time_ns

        class Timed(sqlite3.Connection):
            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
                if not split.counting or sql not in ("BEGIN IMMEDIATE", "BEGIN", "COMMIT"):
                    return super().execute(sql, *args)
                start = clock()
                try:
                    return super().execute(sql, *args)
                finally:
                    split.ns["commit" if sql == "COMMIT" else "begin"] += clock() - start

        class Sqlite3:
            def __getattr__(self, name: str) -> Any:
                return getattr(sqlite3, name)

            @staticmethod
            def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
                return sqlite3.connect(*args, factory=Timed, **kwargs)

        _connect.sqlite3 = Sqlite3()  # type: ignore[assignment]
        run_group, wake = _db_thread.DBThread._run_group, _db_thread._wake

        def timed_group(thread: Any, conn: Any, group: Any) -> None:
            split.counting = split.on
            start = clock()
            run_group(thread, conn, group)
            if split.counting:
                split.ns["group"] += clock() - start
                split.ns["groups"] += 1
            split.counting = False

        def timed_wake(jobs: Any) -> None:
            start = clock()
            wake(jobs)
            if split.counting:
                split.ns["wake"] += clock() - start

        _db_thread.DBThread._run_group = timed_group  # type: ignore[method-assign]
        _db_thread._wake = timed_wake  # type: ignore[assignment]

    def per_turn(self, turns: int) -> dict[str, float]:
        ns = self.ns
        jobs = ns["group"] - ns["begin"] - ns["commit"] - ns["wake"]
        out = {k: ns[k] / turns / 1e6 for k in ("begin", "commit", "wake")}
        out["jobs"] = jobs / turns / 1e6
        out["groups"] = ns["groups"] / turns
        return out


def _package_tree() -> str:
    import neotoma_agent

    return os.path.dirname(os.path.dirname(os.path.realpath(neotoma_agent.__file__)))


async def _child(args: argparse.Namespace) -> dict[str, Any]:
    from peers import _Ours

    if args.variant == "inline":
        _inline()
    split = _Split() if args.split else None
    callers, turns = args.callers, args.turns
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "turns.db"
        async with _Ours(path) as turn:
            import anyio

            async def caller(c: int, first: int, n: int) -> None:
                for i in range(first, first + n):
                    if i % CONVERSATIONS % callers == c:
                        await turn(i % CONVERSATIONS, i)

            async def run(first: int, n: int) -> None:
                async with anyio.create_task_group() as tg:
                    for c in range(callers):
                        tg.start_soon(caller, c, first, n)

            await run(0, WARMUP)
            loop_tid = threading.get_native_id()
            stores = [t for t in threading.enumerate() if t.name.startswith("neotoma-store")]
            store_tid = stores[0].native_id if stores else None
            tids = {"event loop": loop_tid, "store": store_tid}
            before = {k: _thread_figures(t) for k, t in tids.items() if t is not None}
            times = resource.getrusage(resource.RUSAGE_SELF)
            if split is not None:
                split.on = True
            os.getppid()  # the mark where the counted turns start (--syscalls)
            await run(WARMUP, turns)
            os.getpgrp()  # ... and end
            if split is not None:
                split.on = False
            after_times = resource.getrusage(resource.RUSAGE_SELF)
            after = {k: _thread_figures(t) for k, t in tids.items() if t is not None}
    figures: dict[str, Any] = {
        "user_ms": (after_times.ru_utime - times.ru_utime) / turns * 1e3,
        "system_ms": (after_times.ru_stime - times.ru_stime) / turns * 1e3,
        "package": _package_tree(),
    }
    figures["cpu_ms_per_turn"] = figures["user_ms"] + figures["system_ms"]
    figures["threads"] = {
        name: {
            "cpu_ms": (after[name]["cpu"] - before[name]["cpu"]) / turns * 1e3,
            "user_ms": (after[name]["user"] - before[name]["user"]) / turns * 1e3,
            "system_ms": (after[name]["system"] - before[name]["system"]) / turns * 1e3,
            "voluntary": (after[name]["voluntary"] - before[name]["voluntary"]) / turns,
            "involuntary": (after[name]["involuntary"] - before[name]["involuntary"]) / turns,
        }
        for name in after
    }
    if split is not None:
        figures["split"] = split.per_turn(turns)
    return figures


# ---------------------------------------------------------------------------------------
# The parent: rounds of fresh processes.


def _run_child(
    args: argparse.Namespace, tree: Path | None, callers: int, variant: str, *, split: bool
) -> dict[str, Any]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cell.json"
        cmd = [sys.executable, __file__, "--child", "--callers", str(callers)]
        cmd += ["--turns", str(args.turns), "--variant", variant, "--json", str(out)]
        if split:
            cmd.append("--split")
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        figures: dict[str, Any] = json.loads(out.read_text())
        return figures


def _syscalls(args: argparse.Namespace, tree: Path | None, callers: int) -> dict[str, float]:
    """System calls per counted turn, by name, under ``strace -f``."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryDirectory() as tmp:
        trace, out = Path(tmp) / "trace", Path(tmp) / "cell.json"
        cmd = ["strace", "-f", "-o", str(trace), sys.executable, __file__, "--child"]
        cmd += ["--callers", str(callers), "--turns", str(args.turns), "--json", str(out)]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        counts: Counter[str] = Counter()
        counting = False
        call = re.compile(r"^\d+\s+(?:<\.\.\. )?(\w+)")
        for line in trace.read_text().splitlines():
            found = call.match(line)
            if found is None:
                continue
            name = found.group(1)
            if name == "getppid":
                counting = True
            elif name == "getpgrp":
                break
            elif counting and "resumed>" not in line:
                counts[name] += 1
    return {name: n / args.turns for name, n in sorted(counts.items())}


def _cells(args: argparse.Namespace) -> list[tuple[str, Path | None, int, str]]:
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline is not None:
        trees.append(("baseline", args.baseline))
    cells = [(name, tree, callers, "thread") for callers in (1, 16) for name, tree in trees]
    if args.inline:
        cells.insert(1, ("this tree", None, 1, "inline"))
    return cells


def run(args: argparse.Namespace) -> dict[str, Any]:
    cells = _cells(args)
    best: dict[int, dict[str, Any]] = {}
    for r in range(args.rounds):
        print(f"  round {r + 1} of {args.rounds}", file=sys.stderr)
        shift = r % len(cells)
        for i in [*range(shift, len(cells)), *range(shift)]:
            name, tree, callers, variant = cells[i]
            figures = _run_child(args, tree, callers, variant, split=False)
            if i not in best or figures["cpu_ms_per_turn"] < best[i]["cpu_ms_per_turn"]:
                best[i] = figures
    rows = []
    for i, (name, tree, callers, variant) in enumerate(cells):
        row: dict[str, Any] = {"tree": name, "callers": callers, "variant": variant, **best[i]}
        if variant == "thread":
            row["split"] = _run_child(args, tree, callers, variant, split=True)["split"]
            if args.syscalls:
                row["syscalls"] = _syscalls(args, tree, callers)
        rows.append(row)
    return {"turns": args.turns, "rounds": args.rounds, "rows": rows}


def _label(row: dict[str, Any]) -> str:
    if row["variant"] == "inline":
        return f"{row['tree']}, jobs on the loop's thread"
    return str(row["tree"])


def render(result: dict[str, Any]) -> str:
    lines = [
        f"our short turn, {result['turns']} counted turns, best of {result['rounds']} rounds"
        " (ms a turn; switches a turn: voluntary/involuntary)",
        f"{'':38} {'callers':>7} {'CPU':>6} {'user':>6} {'sys':>6} | {'loop':>6} {'sw':>9}"
        f" | {'store':>6} {'sw':>9} | {'BEGIN':>6} {'jobs':>6} {'COMMIT':>6} {'wake':>6}",
    ]
    for row in result["rows"]:
        threads = row["threads"]
        cells = [f"{_label(row):38} {row['callers']:>7}"]
        cells.append(f"{row['cpu_ms_per_turn']:6.3f} {row['user_ms']:6.3f} {row['system_ms']:6.3f}")
        for name in ("event loop", "store"):
            t = threads.get(name)
            if t is None:
                cells.append(f"| {'':>6} {'':>9}")
                continue
            cpu = t["cpu_ms"]
            cells.append(f"| {cpu:6.3f} {t['voluntary']:4.2f}/{t['involuntary']:4.2f}")
        split = row.get("split")
        if split:
            cells.append(
                f"| {split['begin']:6.3f} {split['jobs']:6.3f} {split['commit']:6.3f}"
                f" {split['wake']:6.3f}"
            )
        lines.append(" ".join(cells))
    calls = [r for r in result["rows"] if "syscalls" in r]
    if calls:
        lines.append("\nsystem calls a turn (strace -f, between the marks)")
        lines.append(f"{'':38} {'callers':>7} " + " ".join(f"{c:>10}" for c in SHOWN_CALLS))
        for row in calls:
            counts = " ".join(f"{row['syscalls'].get(c, 0):10.2f}" for c in SHOWN_CALLS)
            lines.append(f"{_label(row):38} {row['callers']:>7} {counts}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--turns", type=int, default=400, help="counted turns a measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout")
    parser.add_argument("--inline", action="store_true", help="also: jobs on the loop's thread")
    parser.add_argument("--syscalls", action="store_true", help="also: strace's counts")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--callers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="thread", help=argparse.SUPPRESS)
    parser.add_argument("--split", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not Path("/proc/self/task").is_dir():
        sys.exit("turn_threads.py reads /proc/self/task: it runs on Linux")
    if args.child:
        import anyio

        figures = anyio.run(_child, args)
        if args.json is not None:
            args.json.write_text(json.dumps(figures))
        return
    if args.syscalls and shutil.which("strace") is None:
        sys.exit("--syscalls needs strace (apt-get install strace)")
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
    from _report import run_and_report

    async def run_async(a: argparse.Namespace) -> dict[str, Any]:
        return run(a)

    run_and_report(args, run_async, render)


if __name__ == "__main__":
    main()
