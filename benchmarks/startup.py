"""Benchmark start-up: a fresh process importing the library, or running a short command.

    python benchmarks/startup.py [--runs N] [--vs PYTHON] [--json PATH] [--quick]

Each row is a whole process, timed from outside (wall seconds, start to exit): the floors
(``python -c pass``; the dependencies a ``show`` needs, imported and run once: asyncio,
anyio with a worker thread, attrs), ``import neotoma_agent``, ``neotoma-agent --version``,
and ``show`` / ``stats`` on a small embedded store (the demo's conversation, written first).
The last row is ``serve``'s stop: SIGTERM sent to a listening ``neotoma-agent serve`` with no
clients, timed until the process has exited (goal: within 0.5 s).
Bytecode caches are written by a warm-up run first, as an installed package has them.
Runs are interleaved row by row so that a machine's drift hits every row alike; the table
gives the median and the minimum. ``--vs PYTHON`` runs every row with that interpreter too
(another virtualenv, e.g. one with the main branch installed), alternating the two run by
run, and adds its medians and the ratio of the medians. The goal (issue 31 §4): ``--version``
and ``show`` under 0.25 s on a developer machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: what `show` on the embedded store cannot start without: an event loop, a thread, attrs
_DEPENDENCIES = (
    "import argparse, logging, sqlite3, attrs, anyio, anyio.to_thread; "
    "anyio.run(anyio.to_thread.run_sync, int, backend='asyncio')"
)


#: rows timed from SIGTERM to exit rather than from start to exit
_STOP_ROWS = frozenset({"neotoma-agent serve: SIGTERM to exit"})


def rows(store: Path) -> list[tuple[str, list[str]]]:
    """(row name, arguments after the interpreter) for each measured process."""
    cli = ["-m", "neotoma_agent.cli"]
    serve = [*cli, "--db", str(store.with_name("served.db")), "serve", "--port", "0"]
    return [
        ("python -c pass (the floor)", ["-c", "pass"]),
        ("the dependencies alone (a floor for show)", ["-c", _DEPENDENCIES]),
        ("import neotoma_agent", ["-c", "import neotoma_agent"]),
        ("neotoma-agent --version", [*cli, "--version"]),
        ("neotoma-agent show demo", [*cli, "--db", str(store), "show", "demo"]),
        ("neotoma-agent stats", [*cli, "--db", str(store), "stats"]),
        ("neotoma-agent serve: SIGTERM to exit", serve),
    ]


def timed_stop(python: str, args: list[str], env: dict[str, str], cwd: str) -> float:
    """Seconds from SIGTERM to exit of a server that has said it is listening."""
    with subprocess.Popen(
        [python, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as server:
        assert server.stdout is not None
        if not server.stdout.readline().startswith(b"serving "):
            server.kill()
            raise SystemExit(f"{python} {' '.join(args)} did not start")
        time.sleep(0.2)  # settled: the signal meets an idle server
        started = time.perf_counter()
        server.send_signal(signal.SIGTERM)
        server.wait()
        wall = time.perf_counter() - started
    if server.returncode != 0:
        raise SystemExit(f"{python} {' '.join(args)} exited {server.returncode} on SIGTERM")
    return wall


def timed_row(name: str, python: str, args: list[str], env: dict[str, str], cwd: str) -> float:
    return (timed_stop if name in _STOP_ROWS else timed)(python, args, env, cwd)


def timed(python: str, args: list[str], env: dict[str, str], cwd: str) -> float:
    # cwd: a directory without a checkout in it, or `-c` would import the package from there
    started = time.perf_counter()
    done = subprocess.run(
        [python, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{python} {' '.join(args)} failed:\n{done.stderr.decode()}")
    return wall


def measure(args: argparse.Namespace) -> dict[str, Any]:
    pythons = {"this": sys.executable, **({"vs": args.vs} if args.vs else {})}
    # As an installed package runs: with bytecode caches (the warm-up writes them, so a
    # PYTHONDONTWRITEBYTECODE of the shell must not turn every run into a compile).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NEOTOMA") and k != "PYTHONDONTWRITEBYTECODE"
    }
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "demo.db"
        cli = [sys.executable, "-m", "neotoma_agent.cli", "demo", "--db", str(store)]
        subprocess.run(cli, env=env, cwd=tmp, stdout=subprocess.DEVNULL, check=True)
        table = rows(store)
        walls: dict[str, dict[str, list[float]]] = {k: {n: [] for n, _ in table} for k in pythons}
        for python in pythons.values():  # a warm-up: the files in the page cache
            for name, argv in table:
                timed_row(name, python, argv, env, tmp)
        for _ in range(args.runs):
            for name, argv in table:
                for which, python in pythons.items():
                    walls[which][name].append(timed_row(name, python, argv, env, tmp))
    result: dict[str, Any] = {"runs": args.runs, "python": sys.executable, "vs": args.vs}
    result["rows"] = [
        {
            "row": name,
            "median_s": statistics.median(walls["this"][name]),
            "min_s": min(walls["this"][name]),
            **(
                {
                    "vs_median_s": statistics.median(walls["vs"][name]),
                    "ratio": statistics.median(walls["this"][name])
                    / statistics.median(walls["vs"][name]),
                }
                if args.vs
                else {}
            ),
        }
        for name, _ in table
    ]
    return result


def render(result: dict[str, Any]) -> str:
    vs = result["vs"] is not None
    head = ["process", "median s", "min s"] + (["--vs median s", "this / vs"] if vs else [])
    lines = [head]
    for row in result["rows"]:
        line = [row["row"], f"{row['median_s']:.3f}", f"{row['min_s']:.3f}"]
        if vs:
            line += [f"{row['vs_median_s']:.3f}", f"{row['ratio']:.2f}"]
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    ]
    return "\n".join([text[0], "-" * len(text[0]), *text[1:]]) + f"\n({result['runs']} runs each)"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15, help="timed runs per row (default 15)")
    parser.add_argument("--vs", metavar="PYTHON", help="also time every row with this interpreter")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="3 runs per row (a smoke run)")
    parsed = parser.parse_args()
    if parsed.quick:
        parsed.runs = 3
    figures = measure(parsed)
    print(render(figures))
    if parsed.json:
        parsed.json.write_text(json.dumps(figures, indent=2) + "\n")
