"""Shared helpers for the turn-protocol tests: a real store on a real file, and read-backs.

Every assertion about what a turn stored reads it back through the transport
(snapshots, observations, relationships, lookups), never from the payloads sent.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from server_support import TOKEN
from structlog.testing import LogCapture

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.transport._base import RelationshipSnapshot, Transport
from neotoma_agent.transport.embedded import EmbeddedStore


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh SQLite file for one test."""
    return tmp_path / "memory.db"


#: per test session (its base temporary folder): a store file as a first open leaves it
_EMPTY: dict[Path, Path] = {}


async def _new_store_file(request: pytest.FixtureRequest, path: Path) -> None:
    """Make ``path`` the store file a first open makes, by copying one made once a session:
    the schema costs a fresh file 20 ms of CPU, a copy 2 ms, and the turn tests open
    well over a thousand (the schema and its migrations have tests of their own)."""
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    template = _EMPTY.get(factory.getbasetemp())
    if template is None:
        template = factory.mktemp("empty-store") / "memory.db"
        async with EmbeddedStore.open(template):
            pass
        _EMPTY[factory.getbasetemp()] = template
    shutil.copyfile(template, path)


@pytest.fixture(params=["embedded", "http"])
async def store(
    request: pytest.FixtureRequest, db_path: Path, anyio_backend: str
) -> AsyncIterator[Any]:
    """The store every turn test runs against, once per transport.

    ``embedded``: the EmbeddedStore on a real SQLite file. ``http``: the same store behind
    the dev server on 127.0.0.1, reached through HttpTransport (asyncio only), so the whole
    turn-protocol suite also runs over a real network stack.
    """
    await _new_store_file(request, db_path)
    async with EmbeddedStore.open(db_path) as embedded:
        if request.param == "embedded":
            yield embedded
            return
        # conftest generates http with asyncio only (aiohttp is asyncio-only).
        assert anyio_backend == "asyncio", anyio_backend
        from neotoma_agent.server import create_app, serving
        from neotoma_agent.transport.http import HttpTransport, RetryPolicy

        async with (
            serving(create_app(embedded, token=TOKEN)) as url,
            HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
        ):
            yield http


def memory(transport: Transport, conversation_id: str = "chat-1", **kw: Any) -> NeotomaMemory:
    """A memory with short deadlines, so a failing test fails fast."""
    kw.setdefault("retrieval_timeout", 2.0)
    kw.setdefault("close_timeout", 5.0)
    return NeotomaMemory(transport, conversation_id=conversation_id, platform="tests", **kw)


async def seed(store: Transport, *names: str, entity_type: str = "company") -> list[str]:
    """Store one entity per name; return their ids in order."""
    result = await store.store(
        [{"entity_type": entity_type, "name": n} for n in names],
        idempotency_key=f"seed-{entity_type}-{'|'.join(names)}",
    )
    return [result.entity_id(i) for i in range(len(names))]


async def edges(
    store: Transport, entity_id: str, rtype: str, direction: str = "outbound"
) -> list[RelationshipSnapshot]:
    """Edges of one type touching ``entity_id`` in one direction, read from the store."""
    related = await store.retrieve_related_entities(
        entity_id,
        relationship_types=[rtype],
        direction=direction,  # type: ignore[arg-type]
    )
    if direction == "outbound":
        return [r for r in related.relationships if r.source_entity_id == entity_id]
    return [r for r in related.relationships if r.target_entity_id == entity_id]


async def targets(store: Transport, entity_id: str, rtype: str) -> set[str]:
    """Ids ``entity_id`` points at with ``rtype`` edges."""
    return {r.target_entity_id for r in await edges(store, entity_id, rtype)}


async def messages(store: Transport, conversation_entity_id: str) -> dict[str, dict[str, Any]]:
    """Every message PART_OF a conversation, keyed by turn_key, as current snapshots."""
    result: dict[str, dict[str, Any]] = {}
    for edge in await edges(store, conversation_entity_id, "PART_OF", "inbound"):
        snap = await store.get_entity_snapshot(edge.source_entity_id)
        result[str(snap.snapshot["turn_key"])] = {"id": snap.entity_id, **snap.snapshot}
    return result


async def turn_record(store: Transport, conversation_id: str, turn_id: str) -> dict[str, Any]:
    """The turn record's current snapshot, found through the store's own query."""
    found = await store.query_entities(entity_type="conversation_turn", limit=500)
    for e in found.entities:
        if e.snapshot.get("session_id") == conversation_id and e.snapshot.get("turn_id") == turn_id:
            return {"id": e.entity_id, **e.snapshot}
    raise AssertionError(f"no turn record for {conversation_id}/{turn_id}")


async def conversations(store: Transport, conversation_id: str) -> list[str]:
    """Ids of every conversation entity with this conversation_id."""
    found = await store.query_entities(entity_type="conversation", limit=500)
    return [
        e.entity_id for e in found.entities if e.snapshot.get("conversation_id") == conversation_id
    ]


@contextmanager
def capture_logs() -> Iterator[list[dict[str, Any]]]:
    """Like ``structlog.testing.capture_logs``, but keeping the contextvars a turn binds.

    (``capture_logs(processors=...)`` does this from structlog 25.5; we support older.)
    """
    cap = LogCapture()
    old = structlog.get_config() if structlog.is_configured() else None
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, cap])
    try:
        yield cap.entries  # type: ignore[misc]
    finally:
        # Unconfigured before: unconfigured after (configure(**defaults) would count as
        # configured, and the library would then log through structlog in later tests).
        if old is None:
            structlog.reset_defaults()
        else:
            structlog.configure(**old)
