"""How fast the web view's pages answer on a big store (issue 28's scale target).

Builds (or reuses, with ``--dir``) an embedded store of ``--conversations`` x ``--turns``
turns plus one conversation of ``--long`` turns, serves the web view on 127.0.0.1 and times
each page as a browser asks for it (a real HTTP GET through aiohttp's client), median and
worst of ``--repeat`` requests, wall and process CPU::

    python benchmarks/ui_pages.py --conversations 1000 --turns 100 --long 10000
    python benchmarks/ui_pages.py ... --json results/ui.json

Goal: the conversations page and any conversation's first page under 200 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import run_and_report
from _synth import build_turns, conversation_id
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from neotoma_agent import EmbeddedStore
from neotoma_agent.ui import create_ui_app, mount_ui


def _build(path: Path, conversations: int, turns: int, long: int) -> float:
    if path.exists():
        return 0.0
    took = build_turns(path, conversations, turns)
    # One more conversation, ``long`` turns long (build_turns gives every conversation the
    # same length: start it at the last index).
    took += build_turns(path, conversations + 1, long, start=conversations)
    return took


async def _time(
    client: TestClient[web.Request, web.Application], path: str, n: int
) -> dict[str, Any]:
    walls, cpus = [], []
    for _ in range(n):
        started, cpu = time.perf_counter(), time.process_time()
        response = await client.get(path)
        await response.read()
        assert response.status == 200, (path, response.status)
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return {
        "page": path,
        "wall_ms_p50": round(statistics.median(walls), 1),
        "wall_ms_max": round(max(walls), 1),
        "cpu_ms_p50": round(statistics.median(cpus), 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp)
        name = f"ui-{args.conversations}x{args.turns}+{args.long}.db"
        path = folder / name
        built = _build(path, args.conversations, args.turns, args.long)
        long_id = conversation_id(args.conversations)
        short_id = conversation_id(0)
        async with EmbeddedStore.open(path, read_only=True) as store:
            app = web.Application()
            mount_ui(app, create_ui_app(store))
            async with TestClient(TestServer(app)) as client:
                pages = [
                    "/ui/",
                    "/ui/api/conversations",
                    f"/ui/conversation?id={short_id}",
                    f"/ui/conversation?id={long_id}",
                    f"/ui/api/conversation?id={long_id}",
                ]
                rows = [await _time(client, p, args.repeat) for p in pages]
                if args.health:
                    rows.append(await _time(client, "/ui/health", 1))
    return {
        "conversations": args.conversations + 1,
        "turns": args.conversations * args.turns + args.long,
        "build_s": round(built, 1),
        "pages": rows,
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"{result['turns']:,} turns in {result['conversations']:,} conversations",
        f"{'page':<48} {'wall p50':>9} {'wall max':>9} {'CPU p50':>8}",
    ]
    for row in result["pages"]:
        lines.append(
            f"{row['page'][:48]:<48} {row['wall_ms_p50']:>7} ms {row['wall_ms_max']:>6} ms "
            f"{row['cpu_ms_p50']:>5} ms"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--long", type=int, default=10_000, help="turns of the long conversation")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--health", action="store_true", help="time the health page once too")
    parser.add_argument("--dir", type=Path, help="keep (and reuse) the built store here")
    parser.add_argument("--json", type=Path, help="write the figures here")
    run_and_report(parser.parse_args(), run, render)


if __name__ == "__main__":
    main()
