"""An entity's first observation in its entity row (schema version 11): a message is one row,
and every read of observations answers as on the same file with that observation a row."""

from __future__ import annotations

import sqlite3
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import pytest
from close_row_support import held_closes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from merge_support import unmerged_copy

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.exceptions import NeotomaError
from neotoma_agent.transport.embedded._key_rows import key_text
from neotoma_agent.transport.embedded._rows import entity_text

pytestmark = pytest.mark.anyio

_COMPANY = {"entity_type": "company", "name": "Acme Corp", "domain": "acme.example"}


def _fields(k: int) -> dict[str, Any]:
    return _COMPANY if k % 3 == 0 else {**_COMPANY, "domain": f"acme{k}.example"}


async def _step(store: EmbeddedStore, step: tuple[str, int], n: int) -> None:
    kind, k = step
    if kind == "turn":
        memory = NeotomaMemory(store, conversation_id=f"c{k % 2}")
        async with memory.turn(f"question {n}", turn_id=f"t{n}") as t:
            t.reply = f"answer {n}"
    elif kind == "store":  # k picks the fields: a repeat of the first, or another
        await store.store([_fields(k)], idempotency_key=f"w-{k}-{n}")
    elif kind == "replay":  # the first store's key again: a replay
        await store.store([_COMPANY], idempotency_key="w-first")
    elif kind == "correct":
        got = await store.store([_COMPANY], idempotency_key="w-first")
        await store.request(
            "correct",
            {
                "entity_id": got.entities[0].entity_id,
                "entity_type": "company",
                "field": "domain",
                "value": f"fixed{k}.example",
                "idempotency_key": f"fix-{k}",
            },
        )
    elif kind == "delete":
        got = await store.store([_COMPANY], idempotency_key="w-first")
        action = "delete_entity" if k % 2 else "restore_entity"
        with suppress(NeotomaError):
            await store.request(action, {"entity_id": got.entities[0].entity_id})


async def _read(store: EmbeddedStore, action: str, body: dict[str, Any]) -> Any:
    """The answer, or the error's type (a deleted entity's GET is a 404 on both)."""
    try:
        return await store.request(action, body)
    except NeotomaError as exc:
        return type(exc).__name__


async def _answers(path: Path) -> dict[str, Any]:
    """Every read of observations, of every entity: pages, the GET route, the identity
    filter, and each key's replay."""
    with closing(sqlite3.connect(path)) as conn:
        ids = [r[0] for r in conn.execute(f"SELECT {entity_text('id')} FROM entities ORDER BY id")]
        keys = sorted(key_text(r[0]) for r in conn.execute("SELECT key FROM idempotency_keys"))
    out: dict[str, Any] = {}
    async with EmbeddedStore.open(path) as store:
        for entity_id in ids:
            pages = [
                await _read(
                    store, "list_observations", {"entity_id": entity_id, "limit": 2, "offset": o}
                )
                for o in range(0, 8, 2)
            ]
            whole = await _read(store, "get_entity_observations", {"entity_id": entity_id})
            out[entity_id] = (pages, whole)
        for basis in ("schema_unique_fields", "heuristic_name", "heuristic_fallback"):
            out[basis] = await store.request(
                "entities/query", {"identity_basis": basis, "limit": 100}
            )
        for key in keys:
            if key.startswith("w-"):
                k = key.split("-")[1]
                fields = _COMPANY if k == "first" else _fields(int(k))
                out[key] = await store.request(
                    "store", {"entities": [fields], "idempotency_key": key}
                )
    return out


async def _run(path: Path, steps: list[tuple[str, int]]) -> None:
    async with EmbeddedStore.open(path) as store:
        await store.store([_COMPANY], idempotency_key="w-first")
        for n, step in enumerate(steps):
            await _step(store, step, n)


async def test_a_turns_messages_are_rows_of_their_entities_alone(tmp_path: Path) -> None:
    """A turn's two messages write no observation row: their one observation is in their
    entity rows; the conversation's updates stay rows (the turn record's close is in its
    row too, since ``_close_row``'s step)."""
    path = tmp_path / "merged.db"
    await _run(path, [("turn", 0)])
    with closing(sqlite3.connect(path)) as conn:
        merged = dict(
            conn.execute("SELECT entity_type, count(first_id) FROM entities GROUP BY 1").fetchall()
        )
        rows = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
        held = held_closes(conn)
    assert merged["conversation_message"] == 2
    assert rows == 1  # the conversation's second observation
    assert held == 1
    unmerged = unmerged_copy(path, tmp_path / "rows.db")
    assert await _answers(path) == await _answers(unmerged)


steps = st.lists(
    st.tuples(st.sampled_from(["turn", "store", "replay", "correct", "delete"]), st.integers(0, 5)),
    max_size=6,
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=steps)
async def test_every_read_of_observations_answers_as_with_every_observation_a_row(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    """Any mix of turns, stores (one repeating the first observation of an entity, so
    deduplicated against its row), replays, corrections, deletions and restores: every read
    answers the same on the file and on its copy with each first observation a row, and
    writes after it too (the copy written on as an entity the migration leaves unmerged)."""
    tmp = tmp_path_factory.mktemp("merge")
    path = tmp / "merged.db"
    await _run(path, steps)
    unmerged = unmerged_copy(path, tmp / "rows.db")
    assert await _answers(path) == await _answers(unmerged)
