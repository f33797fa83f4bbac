"""Benchmark: ``neotoma-agent import`` throughput and memory, against the store's own ceiling.

    python benchmarks/import_throughput.py [--turns 1000 10000 100000] [--json PATH]
        [--baseline CHECKOUT] [--no-http]

For each size it writes a transcript (10 turns per conversation, each user message naming
one of a few companies seeded in the store, so retrieval finds something) and runs the real
CLI, each import in its own process (peak RSS from ``wait4``; rates leave out the CLI's
start-up, measured beforehand):

- ``no-retrieve``: a fresh embedded store, ``--no-retrieve``;
- ``re-import``: the same file into the same store again (writes nothing), lines/s;
- ``retrieve``: a fresh embedded store, with retrieval;
- ``http``: over HTTP to a dev server (``neotoma-agent serve``, its own process) on
  127.0.0.1, ``--no-retrieve``; the server's CPU per turn is read from ``/proc`` and
  printed beside the client's;
- ``ceiling``: no CLI: the same turns' store bodies (the first 20,000), built beforehand,
  stored by the store alone, in batches of 256 (``store_many``) and by 64 concurrent
  ``store`` calls: what the store itself can take on this machine in this run, the bound
  on any import.

Each row gives turns per wall second, per CPU second (user + system, both threads) and CPU
ms per turn. On a shared machine the wall rate says how busy the machine was; the CPU
figures say what the code costs, and ``of ceiling`` is the import's turns per CPU second
over the store's alone (1.0: the import adds nothing to the store's own work).

``--baseline CHECKOUT`` also runs every row with the CLI (and dev server) of another
checkout (e.g. ``/work/main``) for a before/after in the same run. Targets: >= 5,000 turns/s
``no-retrieve`` at 100k turns, >= 2,000 with retrieval, >= 20,000 lines/s re-import,
>= 1,000 turns/s over HTTP; absolute figures vary with the machine, so the table also gives
each import as a fraction of the ceiling measured beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import attrs

from neotoma_agent._batch import BatchTurn, _body
from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.transport.embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parent.parent
COMPANIES = "Acme Globex Initech Umbrella Hooli Stark Wayne Tyrell".split()
TARGETS = {"no-retrieve": 5000.0, "retrieve": 2000.0, "re-import": 20000.0, "http": 1000.0}
TURNS_PER_CONVERSATION = 10
#: the ceiling is measured on the first turns of the file (their bodies are held in memory)
CEILING_TURNS = 20000


def write_transcript(path: Path, turns: int) -> None:
    rng = random.Random(turns)
    with path.open("w", encoding="utf-8") as f:
        for i in range(turns):
            company = rng.choice(COMPANIES)
            line = {
                "conversation_id": f"support-{i // TURNS_PER_CONVERSATION}",
                "user": f"Where is my {company} order #{i}? It was due last week.",
                "assistant": f"Order #{i} from {company} shipped on Monday; it arrives Friday.",
            }
            f.write(json.dumps(line) + "\n")


async def seed(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        memory = NeotomaMemory(store, conversation_id="seed")
        for name in COMPANIES:
            await memory.remember("company", name=f"{name} Corp")


# Runs the CLI and, at exit, writes its own peak RSS (VmHWM, KiB) to the file named last.
# Not wait4's ru_maxrss: a child's high-water mark starts at its parent's size at the fork.
_LAUNCH = """
import atexit, sys
out = sys.argv.pop()
def hwm():
    with open("/proc/self/status") as f, open(out, "w") as o:
        o.write(next(line for line in f if line.startswith("VmHWM")).split()[1])
atexit.register(hwm)
from neotoma_agent.cli._main import main
sys.exit(main(sys.argv[1:]))
"""


@attrs.frozen
class Run:
    seconds: float
    cpu_seconds: float
    peak_rss_kib: int
    out: str


def run_cli(args: list[str], *, pythonpath: Path | None = None) -> Run:
    """Run the CLI in a process of its own; wall time, CPU time, peak RSS, stdout."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    hwm = Path(tempfile.mkstemp(prefix="hwm-")[1])
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, *args, str(hwm)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
        # Not the checkout: `python -c` puts the working directory first on sys.path.
        cwd=tempfile.gettempdir(),
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"import failed ({proc.returncode}): {' '.join(args)}\n{out}")
    rss = int(hwm.read_text() or 0)
    hwm.unlink()
    return Run(seconds, usage.ru_utime + usage.ru_stime, rss, out)


def startup_seconds() -> tuple[float, float]:
    """What starting the CLI costs (wall, CPU) before it reads a line (subtracted)."""
    best = (float("inf"), float("inf"))
    for _ in range(3):
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", "import neotoma_agent.cli._main, neotoma_agent.transport.http"],
            cwd=tempfile.gettempdir(),
        )
        _, _, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        best = (min(best[0], wall), min(best[1], usage.ru_utime + usage.ru_stime))
    return best


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("the dev server did not start")


def row_of(name: str, turns: int, run: Run) -> dict[str, Any]:
    busy = max(run.seconds - STARTUP[0], 1e-3)
    cpu = max(run.cpu_seconds - STARTUP[1], 1e-3)
    return {
        "row": name,
        "turns": turns,
        "seconds": run.seconds,
        "per_s": turns / busy,
        # What the code costs, whatever else the machine runs: CPU time per turn (both
        # threads), and the rate that is if the import had a core to itself.
        "cpu_ms_per_turn": 1000 * cpu / turns,
        "per_cpu_s": turns / cpu,
        "peak_rss_mb": run.peak_rss_kib / 1024,
        "summary": run.out.strip(),
    }


#: set once in main(): the CLI's start-up time, wall and CPU
STARTUP = [0.0, 0.0]


def import_row(
    name: str, turns: int, transcript: Path, db: Path, extra: list[str], **kw: Any
) -> dict[str, Any]:
    return row_of(name, turns, run_cli(["import", str(transcript), "--db", str(db), *extra], **kw))


def http_row(
    turns: int, transcript: Path, work: Path, label: str = "", pythonpath: Path | None = None
) -> dict[str, Any]:
    """Over HTTP: the client's CPU per turn as for the other rows, and the server's beside it."""
    port = free_port()
    db = work / f"served-{label.strip() or 'new'}.db"
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    server = subprocess.Popen(
        [sys.executable, "-m", "neotoma_agent.cli", "serve", "--db", str(db), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    try:
        wait_for_port(port)
        idle = server_cpu(server.pid)
        run = run_cli(
            ["import", str(transcript), "--url", f"http://127.0.0.1:{port}", "--no-retrieve"],
            pythonpath=pythonpath,
        )
        busy = server_cpu(server.pid) - idle
    finally:
        server.terminate()
        server.wait(30)
    row = row_of(label + "http", turns, run)
    row["server_cpu_ms_per_turn"] = 1000 * busy / turns
    return row


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def ceiling(transcript: Path, db: Path) -> dict[str, float]:
    """Stores/s of the store alone for these turns' bodies, built before the clock starts."""
    with transcript.open(encoding="utf-8") as f:
        lines = [json.loads(line) for _, line in zip(range(CEILING_TURNS), f, strict=False)]
    half = len(lines) // 2
    figures: dict[str, float] = {}
    async with EmbeddedStore.open(db) as store:
        memories: dict[str, NeotomaMemory] = {}

        def body(n: int, line: dict[str, Any]) -> dict[str, Any]:
            cid = line["conversation_id"]
            memory = memories.setdefault(cid, NeotomaMemory(store, conversation_id=cid))
            return _body(BatchTurn(memory, line["user"], line["assistant"], f"import-{n}", n), ())

        bodies = [body(n, line) for n, line in enumerate(lines, 1)]
        started, cpu = time.perf_counter(), time.process_time()
        for start in range(0, half, 256):
            await store.store_many(bodies[start : min(start + 256, half)])
        figures["store_many_per_s"] = half / (time.perf_counter() - started)
        figures["store_many_per_cpu_s"] = half / (time.process_time() - cpu)

        rest = bodies[half:]
        started, cpu = time.perf_counter(), time.process_time()
        slots = anyio.Semaphore(64)

        async def one(b: dict[str, Any]) -> None:
            async with slots:
                await store.store(
                    b["entities"],
                    idempotency_key=b["idempotency_key"],
                    relationships=b.get("relationships", ()),
                )

        async with anyio.create_task_group() as tg:
            for b in rest:
                tg.start_soon(one, b)
        figures["store_64_callers_per_s"] = len(rest) / (time.perf_counter() - started)
        figures["store_64_callers_per_cpu_s"] = len(rest) / (time.process_time() - cpu)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument(
        "--only", nargs="+", choices=("no-retrieve", "re-import", "retrieve"), help="these rows"
    )
    args = parser.parse_args(argv)

    STARTUP[:] = startup_seconds()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for turns in args.turns:
            transcript = work / f"t{turns}.jsonl"
            write_transcript(transcript, turns)
            size: list[dict[str, Any]] = []
            ceil = anyio.run(ceiling, transcript, work / f"ceiling{turns}.db")
            versions: list[tuple[str, Path | None]] = [("", None)]
            if args.baseline is not None:
                versions.append(("baseline ", args.baseline.resolve()))
            for label, pythonpath in versions:
                for name, extra, reuse in (
                    ("no-retrieve", ["--no-retrieve"], False),
                    ("re-import", ["--no-retrieve"], True),
                    ("retrieve", [], False),
                ):
                    if args.only and name not in args.only:
                        continue
                    tag = label.strip() or "new"
                    db = work / f"{tag}{turns}-{'no-retrieve' if reuse else name}.db"
                    if not reuse:
                        anyio.run(seed, db)
                    row = import_row(
                        label + name, turns, transcript, db, extra, pythonpath=pythonpath
                    )
                    size.append(row)
            if not args.no_http:
                for label, pythonpath in versions:
                    size.append(http_row(turns, transcript, work, label, pythonpath))
            for row in size:
                # Per CPU second: what the import costs beside what the store alone costs,
                # robust to whatever else the machine runs meanwhile.
                row["fraction_of_ceiling"] = row["per_cpu_s"] / ceil["store_many_per_cpu_s"]
            rows.append({"row": "ceiling", "turns": turns, **ceil})
            rows.extend(size)

    print(
        f"{'row':<22}{'turns':>8}{'per s':>8}{'per CPU s':>10}{'CPU ms':>8}{'target':>8}"
        f"{'of ceiling':>11}{'RSS MB':>8}"
    )
    for row in rows:
        if row["row"] == "ceiling":
            for label, key in (("store_many", "store_many"), ("64 callers", "store_64_callers")):
                print(
                    f"{'ceiling ' + label:<22}{row['turns']:>8}{row[key + '_per_s']:>8,.0f}"
                    f"{row[key + '_per_cpu_s']:>10,.0f}{1000 / row[key + '_per_cpu_s']:>8.2f}"
                )
            continue
        target = TARGETS.get(row["row"])
        server = row.get("server_cpu_ms_per_turn")
        print(
            f"{row['row']:<22}{row['turns']:>8}{row['per_s']:>8,.0f}{row['per_cpu_s']:>10,.0f}"
            f"{row['cpu_ms_per_turn']:>8.2f}{'' if target is None else f'{target:,.0f}':>8}"
            f"{row['fraction_of_ceiling']:>11.2f}{row['peak_rss_mb']:>8.0f}"
            + ("" if server is None else f"  (server CPU ms per turn {server:.2f})")
        )
    report = {
        "rows": rows,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_avg_1m": os.getloadavg()[0],
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
