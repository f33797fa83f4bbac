"""Stores whose PART_OF edges are derived, and the same stores with every edge a row.

``keep_rows`` writes, into a copy of a schema-10 file, the row of every edge the
conversation index holds without one (as schema 9 stored it): every read of edges must
answer the same on both. ``edge_answers`` is every read of edges, as dicts; ``apply``
runs one step of a scenario (a turn, a message stored alone, a store with its own edge,
``create_relationship``) on a store.
"""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from neotoma_agent import LOCAL_USER_ID, EmbeddedStore, NeotomaMemory
from neotoma_agent.exceptions import NeotomaError
from neotoma_agent.transport.embedded import _delete, _edges, _write
from neotoma_agent.transport.embedded._part_of import derived_seen_of
from neotoma_agent.transport.embedded._rows import entity_text

_KEEP = f"""
INSERT INTO relationships (source_entity_id, relationship_type, target_entity_id, metadata,
    provenance, seen, observation_count, last_observation_at, computed_at, uid)
SELECT {entity_text("m.id")}, 'PART_OF', {entity_text("c.id")}, '{{}}', '{{}}',
    derived_seen(CASE WHEN m.first_id IS NOT NULL THEN m.first_source ELSE
        (SELECT o.source_id FROM observations o WHERE o.entity_row = m.rowid
        ORDER BY o.seq LIMIT 1) END, {entity_text("m.id")}, {entity_text("c.id")}),
    1, m.created_at, NULL, m.uid
FROM conversation_messages cm JOIN entities m ON m.rowid = cm.message_row
JOIN entities c ON c.rowid = cm.conversation_row
WHERE NOT EXISTS (SELECT 1 FROM relationships r WHERE r.source_entity_id = {entity_text("m.id")}
    AND r.relationship_type = 'PART_OF'
    AND r.target_entity_id = {entity_text("c.id")})
"""


@contextmanager
def clock(start_ms: int) -> Iterator[None]:
    """The embedded store's clock, one millisecond a tick from ``start_ms`` past 2030, for
    two files to be written at the same times."""
    ticks = itertools.count(start_ms)
    base = datetime(2030, 1, 1, tzinfo=timezone.utc)

    def now_iso() -> str:
        at = base + timedelta(milliseconds=next(ticks))
        return at.isoformat(timespec="milliseconds")[:-6] + "Z"

    modules = [m for m in (_edges, _write, _delete) if hasattr(m, "now_iso")]
    saved = [m.now_iso for m in modules]
    for module in modules:
        module.now_iso = now_iso  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, old in zip(modules, saved, strict=True):
            module.now_iso = old  # type: ignore[attr-defined]


def keep_rows(path: Path) -> int:
    """Write the row of every derived edge of the (closed) file at ``path``; how many."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.create_function("derived_seen", 3, derived_seen_of)
        return conn.execute(_KEEP).rowcount


def kept_copy(path: Path, to: Path) -> Path:
    shutil.copyfile(path, to)
    keep_rows(to)
    return to


def edge_rows(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT * FROM relationships ORDER BY 1, 2, 3").fetchall()


def part_of_rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        found = conn.execute(
            "SELECT count(*) FROM relationships WHERE relationship_type = 'PART_OF'"
        ).fetchone()
        return int(found[0])


def _ids(path: Path) -> list[tuple[str, str]]:
    """Every entity of the file (every user's), in the order they were created."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT {entity_text('id')}, entity_type FROM entities ORDER BY rowid"
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


async def _ask(store: Any, action: str, body: dict[str, Any]) -> Any:
    try:
        return await store.request(action, body)
    except NeotomaError as exc:
        return ("error", type(exc).__name__)


async def edge_answers(store: Any, path: Path) -> dict[str, Any]:
    """Every read of edges, on every entity of the file (as ``store``'s user sees them)."""
    out: dict[str, Any] = {}
    ids = _ids(path)
    for entity_id, _ in ids:
        for direction in ("both", "inbound", "outbound"):
            for types in (None, ["PART_OF"], ["REFERS_TO"], ["REFERS_TO", "PART_OF"]):
                body: dict[str, Any] = {"entity_id": entity_id, "direction": direction}
                if types is not None:
                    body["relationship_types"] = types
                out[f"related {entity_id} {direction} {types}"] = await _ask(
                    store, "retrieve_related_entities", body
                )
        body = {"entity_id": entity_id, "max_hops": 3}
        out[f"related {entity_id} 3 hops"] = await _ask(store, "retrieve_related_entities", body)
        for expand in (False, True):
            body = {"entity_id": entity_id, "expand_entities": expand}
            out[f"entity {entity_id} {expand}"] = await _ask(
                store, "get_entity_relationships", body
            )
    listing = await _ask(store, "get_relationships", {"limit": 1000})
    out["list"] = listing
    total = listing["total"] if isinstance(listing, dict) else 0
    for offset in range(0, total + 2, 2):
        out[f"page {offset}"] = await _ask(
            store, "get_relationships", {"limit": 2, "offset": offset}
        )
    for rtype in ("PART_OF", "REFERS_TO", "EMBEDS"):
        out[f"list {rtype}"] = await _ask(store, "get_relationships", {"relationship_type": rtype})
    for entity_id, _ in ids:
        for end in ("source_entity_id", "target_entity_id"):
            body = {end: entity_id, "limit": 3}
            out[f"list {end} {entity_id}"] = await _ask(store, "get_relationships", body)
            body = {end: entity_id, "relationship_type": "PART_OF"}
            out[f"list {end} {entity_id} PART_OF"] = await _ask(store, "get_relationships", body)
    for edge in listing["relationships"] if isinstance(listing, dict) else []:
        key = edge["relationship_key"]
        out[f"key {key}"] = await _ask(store, "get_relationship", {"relationship_key": key})
    conversations = [i for i, t in ids if t == "conversation"]
    reader = store._bulk_reader()
    rows, _ = await reader.conversation_messages(conversations)
    out["audit messages"] = [tuple(r) for r in rows]
    return out


async def apply(store: EmbeddedStore, path: Path, step: tuple[Any, ...], n: int) -> Any:
    """One step of a scenario; its answer (or the error's type)."""
    kind, user, conv = step[0], step[1], step[2]
    on = store if user == LOCAL_USER_ID else store.for_user(user)
    if kind == "turn":
        memory = NeotomaMemory(on, conversation_id=conv)
        async with memory.turn(f"question {n}", turn_id=f"t{n}") as t:
            t.reply = f"answer {n}"
        return None
    message = {
        "entity_type": "conversation_message",
        "role": "user",
        "sender_kind": "user",
        "content": f"alone {n}",
        "turn_key": f"{conv}:alone{n}",
    }
    if kind == "alone":  # a message stored without an edge (a later one may relate it)
        return await _ask(on, "store", {"entities": [message], "idempotency_key": f"k{n}"})
    if kind == "store_edge":  # a new message and its edge in one store, maybe with metadata
        metadata = step[3]
        edge: dict[str, Any] = {
            "relationship_type": "PART_OF",
            "source_index": 0,
            "target_index": 1,
        }
        if metadata is not None:
            edge["metadata"] = metadata
        entities = [message, {"entity_type": "conversation", "conversation_id": conv}]
        body = {"entities": entities, "relationships": [edge, edge], "idempotency_key": f"k{n}"}
        return await _ask(on, "store", body)
    # "relate": create_relationship between a message and a conversation (or a turn record)
    # of the file, chosen by position (in the order they were created, the conversations
    # first), maybe with metadata and a source
    _, _, _, pick, target_pick, metadata, source = step
    ids = _ids(path)
    messages = [i for i, t in ids if t == "conversation_message"]
    targets = [i for i, t in ids if t == "conversation"]
    targets += [i for i, t in ids if t == "conversation_turn"]
    if not messages or not targets:
        return None
    body = {
        "relationship_type": "PART_OF",
        "source_entity_id": messages[pick % len(messages)],
        "target_entity_id": targets[target_pick % len(targets)],
    }
    if metadata is not None:
        body["metadata"] = metadata
    if source == "message's":  # the message's own first source: a repeat of a derived edge
        observations = await _ask(on, "list_observations", {"entity_id": body["source_entity_id"]})
        if isinstance(observations, dict) and observations["observations"]:
            body["source_id"] = observations["observations"][-1]["source_id"]
    elif source is not None:
        body["source_id"] = source
    return await _ask(on, "create_relationship", body)
