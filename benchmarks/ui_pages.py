"""How fast the web view's pages answer on a big store (issue 28's scale target).

Builds (once, then reuses: ``--dir``, by default ``~/.cache/neotoma-agent/bench``) an
embedded store of conversations x turns plus one long conversation (``--preset`` or
``--shape``): the first conversation and the long one written through the store's own
write action (``_synth``), the others copied from the first row by row with their ids,
seqs and times rewritten (``_clone``: minutes for a million turns instead of an hour;
``--exact`` writes every turn through the store instead), serves the web view on
127.0.0.1 and times each page as a browser asks for it (a real HTTP GET through aiohttp's
client): median and 95th percentile of ``--repeat`` requests, wall and process CPU.

The conversations page is timed three ways, side by side in one run: **new** (the store's
per-conversation summary: one indexed read, keyset pages), **srch** (the path a store
without a summary takes, a real Neotoma server's: every conversation's snapshot listed,
then each listed conversation's turn records found by one name search) and **s8** (the
page as session 8 built it: the same list, then each listed conversation's latest 100
turns read to count them)::

    python benchmarks/ui_pages.py --preset 20k
    python benchmarks/ui_pages.py --preset 1m --json results/ui-1m.json

Goal: the conversations page and any conversation's first page under 200 ms at 1,000,000
turns; a 10,000-turn conversation's pages read only their own turns.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any, Final

from _clone import build_cloned
from _report import run_and_report
from _synth import build_turns, conversation_id, turn_id
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from neotoma_agent import EmbeddedStore
from neotoma_agent._records.keys import conversation_entity_id
from neotoma_agent.transport._forward import Forwarding
from neotoma_agent.transport._results import ConversationSummaryPage, EntityQueryResult
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION
from neotoma_agent.ui import create_ui_app, mount_ui

#: the dev server always requires a token
TOKEN = "bench-token"

#: (conversations, turns each, the long conversation's turns): 20,000 and 1,000,000 turns
PRESETS: Final = {"20k": (100, 100, 10_000), "1m": (9_900, 100, 10_000)}
_CACHE: Final = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
#: pages of the list walked for the "deep" page
_DEEP: Final = 200

Client = TestClient[web.Request, web.Application]


class _NoSummaries(Forwarding):
    """The store as a reader without its summary sees it (a real Neotoma server's path)."""

    async def conversation_summaries(
        self, *, limit: int = 25, after: str | None = None
    ) -> ConversationSummaryPage:
        raise NotImplementedError("the old path: no summary")


class _Session8(_NoSummaries):
    """...and without the name search: each listed conversation's latest 100 turns are read
    to count them (the page as session 8 built it)."""

    async def query_entities(
        self,
        *,
        entity_type: str | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> EntityQueryResult:
        if search is not None:
            raise NotImplementedError("the session-8 path: no search")
        return await self.inner.query_entities(
            entity_type=entity_type, limit=limit, offset=offset, cursor=cursor
        )


def _build(path: Path, conversations: int, turns: int, long: int, *, exact: bool) -> float:
    if path.exists():
        return 0.0
    partial = path.with_suffix(".partial")
    if exact:
        for leftover in partial.parent.glob(partial.name + "*"):
            leftover.unlink()  # a build cut short: start it again
    # (A copying build cut short resumes from its last committed copy.)

    def progress(done: int) -> None:
        if done % 1000 == 0:
            print(f"  {done:,} written", flush=True)

    if exact:
        took = build_turns(partial, conversations, turns, progress=progress)
    else:
        took = build_cloned(partial, conversations, turns, progress=progress)
    # One more conversation, ``long`` turns long (build_turns gives every conversation the
    # same length: start it at the last index).
    took += build_turns(partial, conversations + 1, long, start=conversations)
    partial.rename(path)
    for leftover in partial.parent.glob(partial.name + "-*"):
        leftover.unlink()  # the emptied write-ahead log of the build's connection
    return took


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _partial(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    # The figures so far, for a run cut short (a slow path at a million turns).
    if args.json:
        args.json.with_suffix(".partial.json").write_text(json.dumps(rows, indent=2) + "\n")


async def _time(client: Client, label: str, path: str, n: int) -> dict[str, Any]:
    walls, cpus = [], []
    for _ in range(n):
        started, cpu = time.perf_counter(), time.process_time()
        response = await client.get(path)
        await response.read()
        assert response.status == 200, (path, response.status)
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return {
        "page": label,
        "path": path,
        "requests": n,
        "wall_ms_p50": round(statistics.median(walls), 1),
        "wall_ms_p95": round(_pct(walls, 0.95), 1),
        "cpu_ms_p50": round(statistics.median(cpus), 1),
        "cpu_ms_p95": round(_pct(cpus, 0.95), 1),
    }


async def _deep_cursor(store: EmbeddedStore, pages: int) -> tuple[str | None, int]:
    """The ``after`` of list page ``pages + 1`` (or of the last page), and its number."""
    after: str | None = None
    for n in range(pages):
        page = await store.conversation_summaries(limit=25, after=after)
        if page.next is None:
            return after, n + 1
        after = page.next
    return after, pages + 1


async def run(args: argparse.Namespace) -> dict[str, Any]:
    conversations, turns, long = PRESETS[args.preset] if args.preset else args.shape
    folder = args.dir or _CACHE / "neotoma-agent" / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    how = "exact" if args.exact else "cloned"
    path = folder / f"ui-v{SCHEMA_VERSION}-{conversations}x{turns}+{long}-{how}.db"
    print(f"store: {path}", flush=True)
    built = _build(path, conversations, turns, long, exact=args.exact)
    long_id, short_id = conversation_id(conversations), conversation_id(0)
    rows: list[dict[str, Any]] = []
    async with EmbeddedStore.open(path, read_only=True) as store:
        deep, deep_n = await _deep_cursor(store, _DEEP)
        apps = {"new": store, "srch": _NoSummaries(store), "s8": _Session8(store)}
        clients = {}
        for kind, transport in apps.items():
            app = web.Application()
            mount_ui(app, create_ui_app(transport, token=TOKEN))
            clients[kind] = TestClient(
                TestServer(app), headers={"Authorization": f"Bearer {TOKEN}"}
            )
            await clients[kind].start_server()
        client = clients["new"]
        middle = turn_id(long // 2)
        try:
            lists = [("conversations", "/ui/"), ("conversations JSON", "/ui/api/conversations")]
            if deep is not None:
                lists.append((f"conversations page {deep_n}", f"/ui/?after={deep}"))
            for label, page in lists:
                rows.append({**await _time(client, label, page, args.repeat), "path_kind": "new"})
                _partial(args, rows)
                for kind in () if args.skip_old else args.old_paths.split(","):
                    timed = await _time(clients[kind], label, page, args.old_repeat)
                    rows.append({**timed, "path_kind": kind})
                    _partial(args, rows)
            others = [
                (f"conversation ({turns} turns), first page", f"/ui/conversation?id={short_id}"),
                (f"conversation ({long:,} turns), first page", f"/ui/conversation?id={long_id}"),
                (
                    f"conversation ({long:,} turns), middle page",
                    f"/ui/conversation?id={long_id}&before={middle}",
                ),
                (
                    f"entity ({turns}-turn conversation)",
                    f"/ui/entity?id={conversation_entity_id(short_id)}",
                ),
                (
                    f"entity ({long:,}-turn conversation)",
                    f"/ui/entity?id={conversation_entity_id(long_id)}",
                ),
            ]
            for label, page in others:
                rows.append({**await _time(client, label, page, args.repeat), "path_kind": "new"})
                _partial(args, rows)
            if not args.skip_health:
                rows.append({**await _time(client, "health", "/ui/health", 1), "path_kind": "new"})
        finally:
            for c in clients.values():
                await c.close()
    return {
        "conversations": conversations + 1,
        "turns": conversations * turns + long,
        "store_bytes": path.stat().st_size,
        "build_s": round(built, 1),
        "pages": rows,
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"{result['turns']:,} turns in {result['conversations']:,} conversations "
        f"({result['store_bytes'] / 1e6:,.0f} MB"
        + (f", built in {result['build_s']:,} s" if result["build_s"] else ", cached")
        + ")",
        f"{'page':<44} {'path':<4} {'n':>3} {'wall p50':>9} {'wall p95':>9} "
        f"{'CPU p50':>8} {'CPU p95':>8}",
    ]
    for row in result["pages"]:
        lines.append(
            f"{row['page'][:44]:<44} {row['path_kind']:<4} {row['requests']:>3} "
            f"{row['wall_ms_p50']:>6} ms {row['wall_ms_p95']:>6} ms "
            f"{row['cpu_ms_p50']:>5} ms {row['cpu_ms_p95']:>5} ms"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a store shape by its size")
    parser.add_argument(
        "--shape",
        type=int,
        nargs=3,
        metavar=("CONVERSATIONS", "TURNS", "LONG"),
        default=(200, 50, 10_000),
        help="conversations, turns each, turns of the long one (without --preset)",
    )
    parser.add_argument("--repeat", type=int, default=20, help="requests per page (new path)")
    parser.add_argument(
        "--old-repeat", type=int, default=3, help="requests per page (the other paths)"
    )
    parser.add_argument(
        "--old-paths", default="srch,s8", help="the other paths timed (comma-separated)"
    )
    parser.add_argument("--skip-old", action="store_true", help="time the new path only")
    parser.add_argument("--skip-health", action="store_true", help="leave the health page out")
    parser.add_argument(
        "--exact",
        action="store_true",
        help="write every turn through the store's action (slow) instead of copying one",
    )
    parser.add_argument("--dir", type=Path, help="where the built store is kept and reused")
    parser.add_argument("--json", type=Path, help="write the figures here")
    run_and_report(parser.parse_args(), run, render)


if __name__ == "__main__":
    main()
