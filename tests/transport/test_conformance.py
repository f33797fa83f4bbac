"""One Transport, two implementations: the same calls give the same results.

Every test runs on the EmbeddedStore directly and on HttpTransport talking to the dev server
(over another EmbeddedStore) on 127.0.0.1. A final test runs one scripted session on both
and compares every answer, error bodies included, field by field.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from server_support import TOKEN

from neotoma_agent.exceptions import (
    APIError,
    IdempotencyMismatchError,
    NotFoundError,
    ValidationError,
)
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = pytest.mark.anyio

_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

CONVERSATION = {"entity_type": "conversation", "conversation_id": "chat-42", "title": "Trip"}
USER = {
    "entity_type": "conversation_message",
    "role": "user",
    "sender_kind": "user",
    "content": "Book the Lisbon hotel for Ana Lopez",
    "turn_key": "chat-42:7",
    "turn_number": 7,
}
PART_OF = {"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}
KEY = "conversation-chat-42-7-user-turn"


@pytest.fixture
def anyio_backend() -> str:
    """HttpTransport runs on asyncio only, so the comparison does too."""
    return "asyncio"


async def _open(kind: str) -> AsyncIterator[Transport]:
    async with EmbeddedStore.open(":memory:") as store:
        if kind == "embedded":
            yield store
            return
        async with (
            serving(create_app(store, token=TOKEN)) as url,
            HttpTransport(url, token=TOKEN, retry=RetryPolicy(backoff=False)) as http,
        ):
            yield http


@pytest.fixture(params=["embedded", "http"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    async for t in _open(request.param):
        yield t


async def _seed(t: Transport) -> tuple[str, str, str]:
    stored = await t.store(
        [
            {"entity_type": "company", "name": "Acme Corp.", "website": "acme.com"},
            {"entity_type": "person", "name": "Ana Lopez", "email": "Ana.Lopez@Example.com"},
            {"entity_type": "task", "title": "Send invoice", "status": "open"},
        ],
        idempotency_key="seed",
    )
    return stored.entity_id(0), stored.entity_id(1), stored.entity_id(2)


async def test_is_a_transport(transport: Transport) -> None:
    assert isinstance(transport, Transport)


async def test_store_ids_are_the_servers(transport: Transport) -> None:
    acme, ana, task = await _seed(transport)
    assert (acme, ana, task) == (
        "ent_af939bedafbd1838b259772a",
        "ent_c288134d4239c01f8f06b891",
        "ent_e399693024172dde25351043",
    )


async def test_replay_is_aligned_to_the_request(transport: Transport) -> None:
    first = await transport.store(
        [CONVERSATION, USER], idempotency_key=KEY, relationships=[PART_OF]
    )
    again = await transport.store(
        [CONVERSATION, USER], idempotency_key=KEY, relationships=[PART_OF]
    )
    assert again.replayed
    assert not first.replayed
    assert [again.entity_id(0), again.entity_id(1)] == [first.entity_id(0), first.entity_id(1)]
    assert [e.entity_type for e in again.entities] == ["conversation", "conversation_message"]
    assert len(await transport.list_observations(first.entity_id(1))) == 1


async def test_changed_content_under_a_used_key_is_a_mismatch(transport: Transport) -> None:
    await transport.store([CONVERSATION, USER], idempotency_key=KEY)
    with pytest.raises(IdempotencyMismatchError) as info:
        await transport.store([CONVERSATION, dict(USER, content="changed")], idempotency_key=KEY)
    assert info.value.status == 400
    assert info.value.code == "ERR_IDEMPOTENCY_MISMATCH"
    assert info.value.hint


async def test_a_long_message_is_stored_byte_exact(transport: Transport) -> None:
    content = "é" * (3 * 2**19) + "\u2028 end"  # 3 MiB of UTF-8: streamed, not buffered
    stored = await transport.store([dict(USER, content=content)], idempotency_key="long")
    snapshot = await transport.get_entity_snapshot(stored.entity_id(0))
    assert snapshot.snapshot["content"] == content


async def test_lookups(transport: Transport) -> None:
    acme, ana, _ = await _seed(transport)
    by_name = await transport.retrieve_entity_by_identifier("Acme Corp")
    assert [e.id for e in by_name.entities] == [acme]
    by_id = await transport.retrieve_entity_by_identifier(ana)
    assert by_id.match_mode == "direct"
    assert by_id.entities[0].snapshot["email"] == "Ana.Lopez@Example.com"
    miss = await transport.retrieve_entity_by_identifier("Nonexistent Thing")
    assert (miss.entities, miss.total, miss.match_mode) == ((), 0, "none")


async def test_relationships_collapse_and_are_found(transport: Transport) -> None:
    acme, ana, task = await _seed(transport)
    first = await transport.create_relationship("works_at", ana, acme)
    again = await transport.create_relationship("works_at", ana, acme)
    assert first.relationship_key == again.relationship_key == f"works_at:{ana}:{acme}"
    batch = await transport.create_relationships(
        [{"relationship_type": "owns", "source_entity_id": ana, "target_entity_id": task}]
    )
    assert [r.relationship_type for r in batch.relationships] == ["owns"]
    related = await transport.retrieve_related_entities(ana, direction="outbound")
    assert {r.relationship_key for r in related.relationships} == {
        f"works_at:{ana}:{acme}",
        f"owns:{ana}:{task}",
    }
    assert {e.id for e in related.entities} >= {acme, task}


async def test_snapshots_observations_queries_and_corrections(transport: Transport) -> None:
    acme, _, _ = await _seed(transport)
    snapshot = await transport.get_entity_snapshot(acme)
    assert snapshot.snapshot["name"] == "Acme Corp."
    assert snapshot.observation_count == 1
    observations = await transport.list_observations(acme)
    assert [o.fields["name"] for o in observations.observations] == ["Acme Corp."]
    companies = await transport.query_entities(entity_type="company")
    assert [e.entity_id for e in companies.entities] == [acme]
    corrected = await transport.correct(acme, "company", "name", "Acme Inc", idempotency_key="c1")
    assert corrected.entity_id == acme
    assert (await transport.get_entity_snapshot(acme)).snapshot["name"] == "Acme Inc"


async def test_errors_are_the_same_types(transport: Transport) -> None:
    with pytest.raises(NotFoundError) as missing:
        await transport.get_entity_snapshot("ent_000000000000000000000000")
    assert (missing.value.status, missing.value.code) == (404, "RESOURCE_NOT_FOUND")
    with pytest.raises(ValidationError) as bad_type:
        await transport.create_relationship(
            "MENTIONS", "ent_000000000000000000000000", "ent_000000000000000000000001"
        )
    assert bad_type.value.status == 400
    with pytest.raises(ValidationError) as refused:
        await transport.store(
            [{"entity_type": "conversation_message", "role": "user", "content": "x"}],
            idempotency_key="a",
            relationships=[
                {"relationship_type": "REFERS_TO", "source_index": 0, "target_entity_id": "nope"}
            ],
        )
    assert refused.value.code == "ERR_STORE_RESOLUTION_FAILED"


# --- the two side by side ------------------------------------------------------------------


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    if isinstance(value, str):
        return _TIMESTAMP.sub("<timestamp>", value)
    return value


Step = Callable[[Transport, dict[str, str]], Awaitable[Any]]


async def _script(t: Transport) -> list[Any]:
    """One session touching every method; each answer (or error) is recorded."""
    ids: dict[str, str] = {}
    out: list[Any] = []

    async def seed(t: Transport, ids: dict[str, str]) -> Any:
        result = await t.store(
            [
                {"entity_type": "company", "name": "Acme Corp."},
                {"entity_type": "person", "name": "Ana Lopez"},
            ],
            idempotency_key="seed",
        )
        ids["acme"], ids["ana"] = result.entity_id(0), result.entity_id(1)
        return result

    steps: list[Step] = [
        seed,
        lambda t, ids: t.store([CONVERSATION, USER], idempotency_key=KEY, relationships=[PART_OF]),
        lambda t, ids: t.store([CONVERSATION, USER], idempotency_key=KEY, relationships=[PART_OF]),
        lambda t, ids: t.store([dict(USER, content="other")], idempotency_key=KEY),
        lambda t, ids: t.store(
            [{"entity_type": "conversation", "title": "no id"}], idempotency_key="t1"
        ),
        lambda t, ids: t.store(
            [{"entity_type": "conversation", "title": "no id"}], idempotency_key="t2"
        ),
        lambda t, ids: t.retrieve_entity_by_identifier("Acme"),
        lambda t, ids: t.retrieve_entity_by_identifier("acme corp", entity_type="company"),
        lambda t, ids: t.retrieve_entity_by_identifier(ids["ana"]),
        lambda t, ids: t.retrieve_entity_by_identifier("chat-42:7", by="turn_key"),
        lambda t, ids: t.create_relationship("works_at", ids["ana"], ids["acme"]),
        lambda t, ids: t.create_relationship(
            "works_at", ids["ana"], ids["acme"], metadata={"r": 1}
        ),
        lambda t, ids: t.create_relationship("MENTIONS", ids["ana"], ids["acme"]),
        lambda t, ids: t.create_relationships(
            [
                {
                    "relationship_type": "REFERS_TO",
                    "source_entity_id": ids["ana"],
                    "target_entity_id": ids["acme"],
                }
            ]
        ),
        lambda t, ids: t.retrieve_related_entities(ids["ana"]),
        lambda t, ids: t.retrieve_related_entities(
            ids["acme"], relationship_types=["works_at"], direction="inbound", max_hops=2
        ),
        lambda t, ids: t.get_entity_snapshot(ids["acme"]),
        lambda t, ids: t.get_entity_snapshot("ent_000000000000000000000000"),
        lambda t, ids: t.list_observations(ids["acme"], limit=1),
        lambda t, ids: t.query_entities(entity_type="company"),
        lambda t, ids: t.query_entities(search="lopez", limit=5),
        lambda t, ids: t.correct(ids["acme"], "company", "name", "Acme Inc", idempotency_key="c"),
        lambda t, ids: t.correct(ids["acme"], "company", "name", "Acme Inc", idempotency_key="c"),
        lambda t, ids: t.correct(ids["acme"], "no_such_type", "x", 1, idempotency_key="d"),
    ]
    for step in steps:
        try:
            result = await step(t, ids)
        except APIError as exc:
            out.append(("error", type(exc).__name__, exc.status, exc.code, exc.body))
        else:
            out.append(("ok", type(result).__name__, result.raw, repr(result)))
    return out


async def test_both_transports_give_identical_answers() -> None:
    results = []
    for kind in ("embedded", "http"):
        async for t in _open(kind):
            results.append(_normalize(await _script(t)))
    embedded, http = results
    assert len(embedded) == len(http)
    for step, (ours, theirs) in enumerate(zip(embedded, http, strict=True)):
        assert ours == theirs, f"step {step} differs"
