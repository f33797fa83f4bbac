"""Big benchmark stores, built fast: N synthetic turns (or N companies) in one embedded file.

The rows come from the store's own write action (``_write.store``, the function the store's
DB thread runs for every ``POST /store``), called directly on one connection opened as the
store opens its file (migrations, pragmas), with ``synchronous=OFF``, many stores per
transaction. So every row, index entry and snapshot is encoded by the store's code: when
the file format changes, the builder changes with it. What it saves is the per-store cost
around that action (a job, a thread hop, an answer parsed on the event loop) and a commit
per group; what it cannot save is the action itself (docs/performance.md: the store against
bare SQLite).

The turns are what ``NeotomaMemory`` writes for a turn: the enter store (``user_payload``)
and, unless the turn is an orphan, the closing store (``closing_payload``, naming the
conversation and the user message by id, as an opened turn does). ``tests/benchmarks/test_qa_synth``
checks that a store built here answers ``audit``, ``stats``, ``show`` and lookups exactly
as one written by real turns.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Container, Iterator
from pathlib import Path
from typing import Any, Final

from neotoma_agent._records.keys import conversation_entity_id, message_entity_id, turn_keys
from neotoma_agent._records.payloads import (
    ConversationSettings,
    StorePayload,
    closing_payload,
    user_payload,
)
from neotoma_agent.transport._rest import store_body
from neotoma_agent.transport.embedded._store import _connect
from neotoma_agent.transport.embedded._write import store

__all__ = [
    "build_companies",
    "build_turns",
    "company_name",
    "conversation_id",
    "question",
    "reply",
    "turn_id",
]

#: entities per transaction (about): big enough that commits cost nothing, small enough
#: that the WAL stays small
_ENTITIES_PER_COMMIT: Final = 5_000
#: companies per store (what the lookup benchmark has always written)
_COMPANIES_PER_STORE: Final = 500


def conversation_id(index: int) -> str:
    return f"bench-{index:07d}"


def turn_id(turn: int) -> str:
    return f"t{turn}"


def question(index: int, turn: int) -> str:
    return f"Turn {turn} of conversation {index}: what did we decide about the budget?"


def reply(index: int, turn: int) -> str:
    return f"In turn {turn} we agreed to keep the budget at {index % 97} units."


def company_name(index: int) -> str:
    return f"Company {index:07d} Holdings"


def settings(index: int) -> ConversationSettings:
    return ConversationSettings(platform="benchmark", title=f"Benchmark {index}")


def turn_payloads(
    conversations: int, turns: int, orphans: Container[int], start: int = 0
) -> Iterator[StorePayload]:
    """The stores of every turn, conversation by conversation, in the order turns run.

    Turn ``t`` of conversation ``c`` is number ``c * turns + t``; those in ``orphans`` get
    only their enter store, as a crash between a turn's two stores leaves them. ``start``:
    the first conversation (a build resumed; stores already there only replay).
    """
    for c in range(start, conversations):
        conv, cid = settings(c), conversation_id(c)
        for t in range(turns):
            keys = turn_keys(cid, turn_id(t))
            yield user_payload(conv, keys, question(c, t), turn_number=t)
            if c * turns + t in orphans:
                continue
            yield closing_payload(
                conv,
                keys,
                reply(c, t),
                conversation_entity_id=conversation_entity_id(cid),
                user_message_id=message_entity_id(cid, turn_id(t), "user"),
                turn_number=t,
            )


def _write_all(
    path: Path,
    bodies: Iterator[dict[str, Any]],
    progress: Callable[[int], None] | None,
    per_commit: int,
) -> float:
    started = time.perf_counter()
    conn: sqlite3.Connection = _connect(str(path), "OFF")()
    try:
        conn.execute("BEGIN")
        for done, body in enumerate(bodies, 1):
            store(conn, body)
            if done % per_commit == 0:
                conn.execute("COMMIT")
                if progress is not None:
                    progress(done)
                conn.execute("BEGIN")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started


def build_turns(
    path: Path,
    conversations: int,
    turns: int,
    orphans: Container[int] = frozenset(),
    *,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
) -> float:
    """Write ``conversations`` x ``turns`` turns into the store at ``path`` (from conversation
    ``start``); the seconds taken."""
    bodies = (
        store_body(p.entities, idempotency_key=p.idempotency_key, relationships=p.relationships)
        for p in turn_payloads(conversations, turns, orphans, start)
    )
    # A turn's stores hold 1.5 entities on average.
    return _write_all(path, bodies, progress, _ENTITIES_PER_COMMIT * 2 // 3)


def build_companies(path: Path, n: int, *, progress: Callable[[int], None] | None = None) -> float:
    """Write ``n`` companies (500 per store) into the store at ``path``; the seconds taken."""
    bodies = (
        store_body(
            [
                {"entity_type": "company", "name": company_name(i)}
                for i in range(start, min(start + _COMPANIES_PER_STORE, n))
            ],
            idempotency_key=f"scale-{start}",
        )
        for start in range(0, n, _COMPANIES_PER_STORE)
    )
    return _write_all(path, bodies, progress, _ENTITIES_PER_COMMIT // _COMPANIES_PER_STORE)
