"""Benchmark: the embedded store against the bare SQLite floor, in one run.

    python benchmarks/sqlite_floor.py [--stores 3000] [--turns 3000] [--json PATH]

The floor is plain ``sqlite3`` doing the minimum a turn-shaped store needs: resolve three
entity ids (a sha256 each), upsert three entity rows with a JSON snapshot, append three
observations (indexed by entity), one edge, one idempotency row; WAL, ``synchronous =
NORMAL``; one transaction per store, and one per group of 64 stores. The same run measures
``EmbeddedStore.store`` with the same turn-shaped payloads (conversation, message, turn
record, PART_OF edge) from 1 caller and from 64 concurrent callers, and full turns (enter +
exit through ``NeotomaMemory.turn``) in 100 concurrent conversations.

Targets (issue 15): embedded / floor >= 0.6 with one caller (against one by one), >= 0.75
with 64 callers (against groups of 64); >= 1,500 full turns/s. The machine is noisy: compare
the ratios of one run, and repeat the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report
from embedded_store import turn_payload

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.transport.embedded import EmbeddedStore

TARGETS = {"ratio_1_caller": 0.6, "ratio_64_callers": 0.75, "turns_per_s_100_conversations": 1500}

_FLOOR_SCHEMA = """
CREATE TABLE entities (id TEXT PRIMARY KEY, entity_type TEXT NOT NULL, snapshot TEXT NOT NULL,
    observation_count INTEGER NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE observations (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, entity_id TEXT NOT NULL,
    fields TEXT NOT NULL, observed_at TEXT NOT NULL);
CREATE INDEX observations_by_entity ON observations (entity_id);
CREATE TABLE relationships (source TEXT NOT NULL, type TEXT NOT NULL, target TEXT NOT NULL,
    PRIMARY KEY (source, type, target)) WITHOUT ROWID;
CREATE TABLE idempotency_keys (key TEXT PRIMARY KEY, observations TEXT NOT NULL);
"""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def floor_store(conn: sqlite3.Connection, payload: dict[str, Any], now: str) -> None:
    """One turn-shaped store, the minimum way."""
    ids = []
    obs_ids = []
    for element in payload["entities"]:
        fields = {k: v for k, v in element.items() if k != "entity_type"}
        eid = "ent_" + _digest(element["entity_type"] + ":" + json.dumps(fields))[:24]
        snapshot = json.dumps(fields, separators=(",", ":"))
        conn.execute(
            "INSERT INTO entities VALUES (?, ?, ?, 1, ?) ON CONFLICT (id) DO UPDATE SET "
            "snapshot = excluded.snapshot, observation_count = observation_count + 1, "
            "updated_at = excluded.updated_at",
            (eid, element["entity_type"], snapshot, now),
        )
        oid = _digest(eid + snapshot)[:32]
        conn.execute(
            "INSERT INTO observations (id, entity_id, fields, observed_at) VALUES (?, ?, ?, ?)",
            (oid, eid, snapshot, now),
        )
        ids.append(eid)
        obs_ids.append(oid)
    edge = payload["relationships"][0]
    conn.execute(
        "INSERT OR IGNORE INTO relationships VALUES (?, ?, ?)",
        (ids[edge["source_index"]], edge["relationship_type"], ids[edge["target_index"]]),
    )
    conn.execute(
        "INSERT INTO idempotency_keys VALUES (?, ?)",
        (payload["idempotency_key"], json.dumps(obs_ids)),
    )


def floor(path: Path, total: int, group: int) -> float:
    """Bare stores per second, committing every ``group`` stores."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(_FLOOR_SCHEMA)
    payloads = [
        turn_payload(f"conv-{i % 64}", i, f"message {i} of caller {i % 64}") for i in range(total)
    ]
    started = time.perf_counter()
    for start in range(0, total, group):
        conn.execute("BEGIN IMMEDIATE")
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        for payload in payloads[start : start + group]:
            floor_store(conn, payload, now)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return total / elapsed


async def embedded(path: Path, callers: int, total: int) -> float:
    """``EmbeddedStore.store`` calls per second from ``callers`` concurrent tasks."""
    async with EmbeddedStore.open(path) as store:
        per = total // callers

        async def caller(c: int) -> None:
            for i in range(per):
                p = turn_payload(f"conv-{c}", i * callers + c, f"message {i} of caller {c}")
                await store.store(
                    p["entities"],
                    idempotency_key=p["idempotency_key"],
                    relationships=p["relationships"],
                )

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for c in range(callers):
                tg.start_soon(caller, c)
        return per * callers / (time.perf_counter() - started)


async def full_turns(path: Path, conversations: int, turns: int) -> float:
    """Full turns (enter + exit) per second over ``conversations`` concurrent ones."""
    async with EmbeddedStore.open(path) as store:
        memories = [
            NeotomaMemory(store, conversation_id=f"floor-{c}", platform="bench")
            for c in range(conversations)
        ]

        async def conversation(c: int) -> None:
            for i in range(c, turns, conversations):
                async with memories[c].turn("How are things going today?", turn_id=f"t{i}") as t:
                    t.reply = "Fine."

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for c in range(conversations):
                tg.start_soon(conversation, c)
        return turns / (time.perf_counter() - started)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        single = args.stores // 4  # one by one is the slow row: a quarter of the stores
        r: dict[str, Any] = {
            "floor_stores_per_s_one_by_one": floor(d / "f1.db", single, 1),
            "floor_stores_per_s_groups_of_64": floor(d / "f64.db", args.stores, 64),
            "embedded_stores_per_s_1_caller": await embedded(d / "e1.db", 1, single),
            "embedded_stores_per_s_64_callers": await embedded(d / "e64.db", 64, args.stores),
            "turns_per_s_100_conversations": await full_turns(d / "t.db", 100, args.turns),
        }
    r["ratio_1_caller"] = r["embedded_stores_per_s_1_caller"] / r["floor_stores_per_s_one_by_one"]
    r["ratio_64_callers"] = (
        r["embedded_stores_per_s_64_callers"] / r["floor_stores_per_s_groups_of_64"]
    )
    return {k: round(v, 3) for k, v in r.items()}


def render(result: dict[str, Any]) -> str:
    lines = [f"{'metric':<36} {'value':>10}  target", "-" * 60]
    for key, value in result.items():
        mark = ""
        if key in TARGETS:
            mark = f">= {TARGETS[key]:g} {'ok' if value >= TARGETS[key] else 'MISSED'}"
        lines.append(f"{key:<36} {value:>10,.2f}  {mark}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stores", type=int, default=3_000, help="stores per grouped row")
    parser.add_argument("--turns", type=int, default=3_000, help="full turns")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    run_and_report(args, run, render)


if __name__ == "__main__":
    main()
