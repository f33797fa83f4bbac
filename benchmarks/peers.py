"""Benchmark: a short turn against its peers: bare SQLite, the Agents SDK's session, LangGraph.

    python benchmarks/peers.py [--turns 400] [--lengths 1000 5000] [--growth-turns 100]
                               [--rounds 2] [--peers ...] [--baseline TREE] [--json PATH]
    python benchmarks/peers.py --full        # the sizes of issue 42: 2,000 turns, 1k-20k long
    python benchmarks/peers.py --profile     # where our turn goes: statements, rows, WAL pages

One turn is a 64-character prompt and a 210-character reply, written by four peers:

- ``floor``: bare ``sqlite3``, two INSERTs (user, assistant) in one transaction on a
  table of messages (WAL, ``synchronous = NORMAL``): what any chat log must cost;
- ``sdk``: the OpenAI Agents SDK's ``SQLiteSession`` at its default settings, used as its
  ``Runner`` uses it: ``get_items()`` (the whole history: its default limit is none), then
  ``add_items`` for the user message and ``add_items`` for the reply (two commits);
- ``langgraph``: a one-node ``StateGraph(MessagesState)`` compiled with
  ``AsyncSqliteSaver`` (package ``langgraph-checkpoint-sqlite``), one ``ainvoke`` per turn
  on the conversation's thread, the node answering the reply;
- ``ours``: ``async with memory.turn(prompt) as t: t.reply = reply`` on an
  ``EmbeddedStore`` (default settings: the last 5 turns read, retrieval on);
- ``scoped``: the same turn through ``store.for_user(user)``, each conversation its own
  user's (an application serving many people), beside ``ours`` in the same rounds: what
  scoping a store per user costs a turn (goal: at most 1.05 times ``ours``). Rows
  ``1 caller`` and ``16 callers`` only (the long conversations are written unscoped).

Rows: ``1 caller`` (16 conversations, their turns in rotation, one after another, from a
fresh file), ``16 callers`` (the same 16 conversations and turns, a concurrent caller
each), and ``length N``: one conversation that already holds N turns,
and ``--growth-turns`` more turns on it (LangGraph's at most ``--langgraph-growth-turns``:
its checkpoint holds the whole conversation, so each turn writes it again). The N turns are
written once per peer and length (a bulk write of what those turns leave: the SDK's rows;
LangGraph's state as one checkpoint, ``aupdate_state``; our store's own write action,
``_synth.build_turns``), then the file is copied for every measurement.

Every measurement is a fresh process (``--cell``), so no peer runs on another's warm
imports, caches or collector; rounds are interleaved (each round runs every cell, in an
order rotated per round), and each cell keeps its best round (noise only ever slows a
round down). CPU is the process's (``time.process_time``: the event loop and the peers'
SQLite threads together) per counted turn, after 5 turns of warm-up in each conversation;
bytes are the growth of the file's pages in use (the WAL checkpointed into it, before and
after; pages on the freelist left out) per turn written, warm-up included (a fresh row counts
from the file with only its schema). Ratios are against ``sdk`` in the same row
of the same run.

``--baseline TREE`` adds a fifth peer, ``baseline``: our turn run with the package of
another checkout (e.g. ``git worktree add /tmp/main main``), in the same rounds, for a
before / after from one run.

``--profile`` measures our turn alone: SQL statements and rows written per turn (the
store's own connection, traced), WAL pages per turn, and the top of a ``cProfile`` run
(``--profile-top``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report

PEERS = ("floor", "sdk", "langgraph", "ours", "scoped")
BASELINE = "sdk"
PROMPT_CHARS = 64
REPLY_CHARS = 210
#: turns run before the counted ones in every measurement (imports, caches, first pages)
WARMUP = 5
CONVERSATIONS = 16
#: the issue's goals against ``sdk``: CPU ratio, and bytes per short turn
GOAL_CPU_RATIO = 1.5
GOAL_BYTES = 1500
#: a turn through ``store.for_user`` against the same turn on the unscoped store
GOAL_SCOPED_RATIO = 1.05
#: what ``--full`` sets (issue 42's sizes)
FULL = {"turns": 2_000, "lengths": [1_000, 5_000, 20_000], "growth_turns": 200, "rounds": 3}


def _fit(text: str, n: int) -> str:
    return (text * (n // len(text) + 1))[:n]


def user(c: int) -> str:
    """The user whose view of the store holds conversation ``c`` (the ``scoped`` peer)."""
    return f"user-{c:04d}@example.test"


def prompt(i: int) -> str:
    """Turn ``i``'s user message: 64 characters, no name for retrieval to look up."""
    return _fit(f"turn {i:06d}: how are things going with the plan we talked about? ", 64)


def reply(i: int) -> str:
    """Turn ``i``'s reply: 210 characters."""
    return _fit(
        f"reply {i:06d}: things are going well; the plan is on track, the numbers look fine "
        "and nothing needs a decision from you today, so we can pick it up again next week. ",
        REPLY_CHARS,
    )


def conversation(c: int) -> str:
    return f"peers-{c:04d}"


# ---------------------------------------------------------------------------------------
# The peers. Each is an async context manager factory: opened on a path, it yields a
# ``turn(c, i)`` coroutine function writing turn ``i`` of conversation ``c``.

Turn = Callable[[int, int], Awaitable[None]]


class _Floor:
    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, conversation TEXT NOT NULL,"
        " role TEXT NOT NULL, content TEXT NOT NULL)"
    )

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(self.SCHEMA)

    async def __aenter__(self) -> Turn:
        conn = self.conn

        async def turn(c: int, i: int) -> None:
            cid = conversation(c)
            conn.execute("BEGIN")
            conn.execute("INSERT INTO messages VALUES (NULL, ?, 'user', ?)", (cid, prompt(i)))
            conn.execute("INSERT INTO messages VALUES (NULL, ?, 'assistant', ?)", (cid, reply(i)))
            conn.execute("COMMIT")

        return turn

    async def __aexit__(self, *exc: object) -> None:
        self.conn.close()

    @staticmethod
    def prefill(path: Path, c: int, turns: int) -> None:
        floor = _Floor(path)
        cid = conversation(c)
        with floor.conn:
            floor.conn.executemany(
                "INSERT INTO messages VALUES (NULL, ?, ?, ?)",
                (
                    row
                    for i in range(turns)
                    for row in ((cid, "user", prompt(i)), (cid, "assistant", reply(i)))
                ),
            )
        floor.conn.close()


class _Sdk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sessions: dict[int, Any] = {}

    def session(self, c: int) -> Any:
        from agents import SQLiteSession

        if c not in self.sessions:
            self.sessions[c] = SQLiteSession(conversation(c), self.path)
        return self.sessions[c]

    async def __aenter__(self) -> Turn:
        async def turn(c: int, i: int) -> None:
            session = self.session(c)
            await session.get_items()
            await session.add_items([{"role": "user", "content": prompt(i)}])
            await session.add_items([{"role": "assistant", "content": reply(i)}])

        return turn

    async def __aexit__(self, *exc: object) -> None:
        for session in self.sessions.values():
            session.close()

    @staticmethod
    async def prefill(path: Path, c: int, turns: int) -> None:
        sdk = _Sdk(path)
        items: list[Any] = []
        for i in range(turns):
            items += [
                {"role": "user", "content": prompt(i)},
                {"role": "assistant", "content": reply(i)},
            ]
        await sdk.session(c).add_items(items)
        await sdk.__aexit__()


class _LangGraph:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def __aenter__(self) -> Turn:
        from langchain_core.messages import AIMessage
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.graph import START, MessagesState, StateGraph

        self._saver_cm = AsyncSqliteSaver.from_conn_string(str(self.path))
        saver = await self._saver_cm.__aenter__()

        def answer(state: MessagesState) -> dict[str, Any]:
            # The reply's number is the user message's own.
            number = int(state["messages"][-1].content[5:11])
            return {"messages": [AIMessage(reply(number))]}

        builder = StateGraph(MessagesState)
        builder.add_node("answer", answer)
        builder.add_edge(START, "answer")
        self.graph = builder.compile(checkpointer=saver)

        async def turn(c: int, i: int) -> None:
            config = {"configurable": {"thread_id": conversation(c)}}
            await self.graph.ainvoke({"messages": [("user", prompt(i))]}, config)

        return turn

    async def __aexit__(self, *exc: object) -> None:
        await self._saver_cm.__aexit__(None, None, None)

    @staticmethod
    async def prefill(path: Path, c: int, turns: int) -> None:
        from langchain_core.messages import AIMessage, HumanMessage

        peer = _LangGraph(path)
        await peer.__aenter__()
        messages: list[Any] = []
        for i in range(turns):
            messages += [HumanMessage(prompt(i)), AIMessage(reply(i))]
        config = {"configurable": {"thread_id": conversation(c)}}
        await peer.graph.aupdate_state(config, {"messages": messages})
        await peer.__aexit__()


class _Ours:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def __aenter__(self) -> Turn:
        from neotoma_agent._memory import NeotomaMemory
        from neotoma_agent.transport.embedded import EmbeddedStore

        self._store_cm = EmbeddedStore.open(self.path)
        store = await self._store_cm.__aenter__()
        memories: dict[int, NeotomaMemory] = {}

        async def turn(c: int, i: int) -> None:
            if c not in memories:
                view = self.view(store, c)
                memories[c] = NeotomaMemory(view, conversation_id=conversation(c))
            async with memories[c].turn(prompt(i), turn_id=f"t{i}") as t:
                t.reply = reply(i)

        return turn

    async def __aexit__(self, *exc: object) -> None:
        await self._store_cm.__aexit__(None, None, None)

    def view(self, store: Any, c: int) -> Any:
        return store

    @staticmethod
    def prefill(path: Path, c: int, turns: int) -> None:
        # The store's own write action on the turns' payloads (what those turns leave).
        import _synth

        from neotoma_agent._records.payloads import NO_SETTINGS

        _synth.settings = lambda index: NO_SETTINGS
        _synth.conversation_id = lambda index: conversation(c)
        _synth.question = lambda index, turn: prompt(turn)
        _synth.reply = lambda index, turn: reply(turn)
        _synth.build_turns(path, 1, turns)


class _Scoped(_Ours):
    """``ours``, each conversation through its own user's view of the store."""

    def view(self, store: Any, c: int) -> Any:
        return store.for_user(user(c))


_PEERS: dict[str, Any] = {
    "floor": _Floor,
    "sdk": _Sdk,
    "langgraph": _LangGraph,
    "ours": _Ours,
    "scoped": _Scoped,
}
#: the peers measured on the fresh-file rows only
_FRESH_ONLY = frozenset({"scoped"})


# ---------------------------------------------------------------------------------------
# One measurement, in its own process.


def file_bytes(path: Path) -> int:
    """The bytes of the file's pages in use, its WAL checkpointed into it (the peer closed).

    Pages on the freelist are left out: an index that merges its segments (FTS5) frees
    the old ones and the next writes reuse them, so counting them would charge a few
    turns with a merge the following turns get for nothing.
    """
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        (free,) = conn.execute("PRAGMA freelist_count").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    return int((pages - free) * size)


def _package_tree() -> str:
    import neotoma_agent

    return str(Path(neotoma_agent.__file__).resolve().parent.parent)


async def _open_and_close(peer: str, path: Path) -> None:
    async with _PEERS[peer](path) as turn:
        del turn


async def measure(
    peer: str, path: Path, conversations: int, callers: int, turns: int, start: int
) -> dict[str, Any]:
    """``turns`` turns of ``peer`` on the file at ``path``, turn ``i`` in conversation ``i
    % conversations``, from ``callers`` concurrent callers (each its share of the
    conversations, one turn after another; turn numbers from ``start``), after ``WARMUP``
    turns in each conversation: CPU ms and bytes per counted turn."""
    await _open_and_close(peer, path)  # a fresh file gets its schema: not a turn's bytes
    before = file_bytes(path)
    warmup = WARMUP * conversations
    async with _PEERS[peer](path) as turn:

        async def caller(c: int, first: int, n: int) -> None:
            for i in range(first, first + n):
                if i % conversations % callers == c:
                    await turn(i % conversations, i)

        async def run(first: int, n: int) -> None:
            async with anyio.create_task_group() as tg:
                for c in range(callers):
                    tg.start_soon(caller, c, first, n)

        await run(start, warmup)
        cpu = time.process_time()
        await run(start + warmup, turns)
        cpu = time.process_time() - cpu
    figures: dict[str, Any] = {
        "cpu_ms_per_turn": cpu / turns * 1e3,
        "bytes_per_turn": (file_bytes(path) - before) / (warmup + turns),
    }
    if peer in ("ours", "scoped"):  # which tree's package ran it (``--baseline``)
        figures["package"] = _package_tree()
    return figures


async def _cell(args: argparse.Namespace) -> dict[str, Any]:
    peer, row = args.cell
    path = Path(args.file)
    if row == "1":
        return await measure(peer, path, CONVERSATIONS, 1, args.turns, 0)
    if row == "16":
        return await measure(peer, path, CONVERSATIONS, CONVERSATIONS, args.turns, 0)
    length = int(row)
    turns = args.growth_turns
    if peer == "langgraph":
        turns = min(turns, args.langgraph_growth_turns)
    return await measure(peer, path, 1, 1, turns, length)


async def _prefill(peer: str, path: Path, length: int) -> None:
    prefill = _PEERS[peer].prefill
    if peer in ("floor", "ours"):
        prefill(path, 0, length)
    else:
        await prefill(path, 0, length)


# ---------------------------------------------------------------------------------------
# The run: prefilled files, then rounds of fresh processes.


def _child(args: argparse.Namespace, peer: str, *extra: str) -> dict[str, Any]:
    """This script in a fresh process for ``peer``; ``baseline`` is ``ours`` run with the
    package of the ``--baseline`` tree first on the path."""
    env = dict(os.environ)
    if peer == "baseline":
        peer = "ours"
        env["PYTHONPATH"] = str(args.baseline)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cell.json"
        cmd = [sys.executable, __file__, *extra[:1], peer, *extra[1:], "--json", str(out)]
        cmd += ["--turns", str(args.turns), "--growth-turns", str(args.growth_turns)]
        cmd += ["--langgraph-growth-turns", str(args.langgraph_growth_turns)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        figures: dict[str, Any] = json.loads(out.read_text())
        return figures


def _write_prefill(args: argparse.Namespace, d: Path, peer: str, length: int) -> None:
    """``peer``'s file of one conversation ``length`` turns long, in its own process."""
    path = d / f"{peer}-{length}.db"
    _child(args, peer, "--prefill", str(length), "--file", str(path))


def _measure_cell(args: argparse.Namespace, d: Path, peer: str, row: str) -> dict[str, Any]:
    """One measurement of ``peer`` in ``row``, in a fresh process on a fresh file (or a
    copy of the prefilled one)."""
    path = d / f"run-{peer}.db"
    for stale in d.glob(f"run-{peer}.db*"):
        stale.unlink()
    if row not in ("1", "16"):
        shutil.copyfile(d / f"{peer}-{row}.db", path)
    return _child(args, peer, "--cell", row, "--file", str(path))


def _rows(args: argparse.Namespace) -> list[str]:
    return ["1", "16", *(str(n) for n in args.lengths)]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.cell:
        return await _cell(args)
    if args.prefill:
        peer, length = args.prefill
        await _prefill(peer, Path(args.file), int(length))
        return {}
    if args.profile:
        from _peers_profile import profile

        return await profile(args, _Ours, measure, file_bytes)
    peers = [p for p in PEERS if p in args.peers] + (["baseline"] if args.baseline else [])
    rows = _rows(args)
    best: dict[tuple[str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for length in args.lengths:
            for peer in [p for p in peers if p not in _FRESH_ONLY]:
                print(f"  writing {length:,} turns for {peer}", file=sys.stderr)
                await anyio.to_thread.run_sync(partial(_write_prefill, args, d, peer, length))
        for r in range(args.rounds):
            print(f"  round {r + 1} of {args.rounds}", file=sys.stderr)
            shift = r * len(peers) // max(args.rounds, 1)
            for row in rows:
                for peer in peers[shift:] + peers[:shift]:
                    if peer in _FRESH_ONLY and row not in ("1", "16"):
                        continue
                    figures = await anyio.to_thread.run_sync(
                        partial(_measure_cell, args, d, peer, row)
                    )
                    was = best.get((peer, row))
                    if was is None or figures["cpu_ms_per_turn"] < was["cpu_ms_per_turn"]:
                        best[(peer, row)] = figures
    table = []
    for row in rows:
        base = best.get((BASELINE, row))
        for peer in peers:
            if (peer, row) not in best:
                continue
            f = best[(peer, row)]
            entry: dict[str, Any] = {"row": _row_name(row), "peer": peer}
            entry["cpu_ms_per_turn"] = round(f["cpu_ms_per_turn"], 4)
            entry["bytes_per_turn"] = round(f["bytes_per_turn"], 1)
            if "package" in f:
                entry["package"] = f["package"]
            if base is not None:
                entry["cpu_vs_sdk"] = round(f["cpu_ms_per_turn"] / base["cpu_ms_per_turn"], 3)
                entry["bytes_vs_sdk"] = round(f["bytes_per_turn"] / base["bytes_per_turn"], 3)
            unscoped = best.get(("ours", row))
            if peer == "scoped" and unscoped is not None:
                ratio = f["cpu_ms_per_turn"] / unscoped["cpu_ms_per_turn"]
                entry["cpu_vs_ours"] = round(ratio, 3)
            table.append(entry)
    return {
        "prompt_chars": PROMPT_CHARS,
        "reply_chars": REPLY_CHARS,
        "turns": args.turns,
        "lengths": args.lengths,
        "growth_turns": args.growth_turns,
        "langgraph_growth_turns": args.langgraph_growth_turns,
        "rounds": args.rounds,
        "baseline": str(args.baseline) if args.baseline else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "goals": {
            "cpu_vs_sdk": GOAL_CPU_RATIO,
            "bytes_per_turn": GOAL_BYTES,
            "scoped_cpu_vs_ours": GOAL_SCOPED_RATIO,
        },
        "rows": table,
    }


def _row_name(row: str) -> str:
    if row == "1":
        return "1 caller"
    if row == "16":
        return f"{CONVERSATIONS} callers"
    return f"length {int(row):,}"


def render(result: dict[str, Any]) -> str:
    if "cprofile_event_loop" in result:
        from _peers_profile import render_profile

        return render_profile(result)
    if "rows" not in result:  # a child's figures
        return json.dumps(result, indent=2)
    head = (
        f"{'row':<18} {'peer':<10} {'CPU ms/turn':>12} {'x sdk':>7} {'bytes/turn':>12} {'x sdk':>7}"
    )
    lines = [head, "-" * len(head)]
    for e in result["rows"]:
        lines.append(
            f"{e['row']:<18} {e['peer']:<10} {e['cpu_ms_per_turn']:>12.3f} "
            f"{e.get('cpu_vs_sdk', float('nan')):>7.2f} {e['bytes_per_turn']:>12,.0f} "
            f"{e.get('bytes_vs_sdk', float('nan')):>7.2f}"
        )
    ours = [e for e in result["rows"] if e["peer"] == "ours" and "cpu_vs_sdk" in e]
    if ours:
        worst_cpu = max(e["cpu_vs_sdk"] for e in ours)
        worst_bytes = max(e["bytes_per_turn"] for e in ours)
        lines.append(
            f"\ngoals: ours <= {GOAL_CPU_RATIO:g}x sdk's CPU "
            f"({'met' if worst_cpu <= GOAL_CPU_RATIO else 'MISSED'}, worst {worst_cpu:.2f}x), "
            f"<= {GOAL_BYTES:,} B/turn "
            f"({'met' if worst_bytes <= GOAL_BYTES else 'MISSED'}, worst {worst_bytes:,.0f})"
        )
    scoped = [e for e in result["rows"] if "cpu_vs_ours" in e]
    if scoped:
        worst = max(e["cpu_vs_ours"] for e in scoped)
        lines.append(
            f"scoped (store.for_user) <= {GOAL_SCOPED_RATIO:g}x ours' CPU "
            f"({'met' if worst <= GOAL_SCOPED_RATIO else 'MISSED'}, worst {worst:.3f}x)"
        )
    load = ", ".join(f"{x:.2f}" for x in result["load_average"])
    lines.append(
        f"{result['turns']:,} turns a fresh row; {result['growth_turns']} turns at each length "
        f"(langgraph {result['langgraph_growth_turns']}); best of {result['rounds']} rounds; "
        f"load average {load}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=400, help="turns of a fresh row")
    parser.add_argument(
        "--lengths", type=int, nargs="*", default=[1_000, 5_000], help="conversation lengths"
    )
    parser.add_argument("--growth-turns", type=int, default=100, help="turns at each length")
    parser.add_argument(
        "--langgraph-growth-turns", type=int, default=10, help="LangGraph's turns at each length"
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout whose package runs our turn as one more peer, 'baseline'",
    )
    parser.add_argument("--full", action="store_true", help="the issue's sizes (long)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--profile", action="store_true", help="profile our turn instead")
    parser.add_argument("--profile-top", type=int, default=25, help="cProfile rows printed")
    parser.add_argument(
        "--profile-disk-turns", type=int, default=1_000, help="turns of the file --profile sizes"
    )
    parser.add_argument("--cell", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--prefill", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
    if args.full:
        for key, value in FULL.items():
            setattr(args, key, value)
    run_and_report(args, run, render)


if __name__ == "__main__":
    main()
