"""HttpTransport against what a real Neotoma server sends.

A loopback aiohttp server answers each call with a response recorded from a real server
(reference/samples/), and records what the transport sent, so these tests pin both the wire
format going out and the parsing of real answers coming back.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog
from aiohttp import web
from paths_support import TESTS

from neotoma_agent.exceptions import (
    APIError,
    AuthenticationError,
    ConnectionLost,
    IdempotencyMismatchError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    ValidationError,
)
from neotoma_agent.server import serving
from neotoma_agent.transport._base import StoreResult
from neotoma_agent.transport._wire import (
    envelope_of,
    error_code,
    error_from_response,
    parse_retry_after,
)
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = pytest.mark.anyio

SAMPLES = Path(
    os.environ.get(
        "NEOTOMA_SAMPLES",
        TESTS / "data" / "samples",
    )
)
TOKEN = "tok-9f3a-SECRET-value"
NO_RETRY_WAITS = RetryPolicy(backoff=False)


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp runs on asyncio only."""
    return "asyncio"


def sample(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recorded (request, response) pair ``name``."""
    found = sorted(SAMPLES.rglob(f"{name}.request.json"))
    if not found:
        pytest.skip(f"recorded sample {name} not found under {SAMPLES}")
    request = json.loads(found[0].read_text())
    response = json.loads(found[0].with_name(f"{name}.response.json").read_text())
    return request, response


@attrs.define
class Replayer:
    """Answers every request with the next queued recorded response; keeps what it got."""

    queue: list[dict[str, Any]] = attrs.Factory(list)
    received: list[dict[str, Any]] = attrs.Factory(list)

    def answer(self, *names: str) -> None:
        for name in names:
            self.queue.append(sample(name)[1])

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.received.append(
            {
                "method": request.method,
                "path": request.path,
                "headers": dict(request.headers),
                "body": json.loads(raw) if raw else None,
            }
        )
        recorded = self.queue.pop(0)
        headers = dict(recorded["headers"])
        content_type = headers.pop("Content-Type", "application/json; charset=utf-8")
        body = recorded["body"]
        text = body if isinstance(body, str) else json.dumps(body)
        return web.Response(
            status=recorded["status"],
            headers={**headers, "Content-Type": content_type},
            text=text,
        )


@pytest.fixture
async def replayer() -> AsyncIterator[tuple[Replayer, str]]:
    replay = Replayer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", replay.handle)
    async with serving(app) as url:
        yield replay, url


@pytest.fixture
async def transport(replayer: tuple[Replayer, str]) -> AsyncIterator[HttpTransport]:
    async with HttpTransport(replayer[1], retry=NO_RETRY_WAITS) as t:
        yield t


@pytest.fixture
def replay(replayer: tuple[Replayer, str]) -> Replayer:
    return replayer[0]


# --- what goes out ---------------------------------------------------------------------------


async def test_store_sends_the_recorded_request_body(
    transport: HttpTransport, replay: Replayer
) -> None:
    request, _ = sample("a_store_turn1_user")
    replay.answer("a_store_turn1_user")
    body = request["body"]
    await transport.store(
        body["entities"],
        idempotency_key=body["idempotency_key"],
        relationships=body["relationships"],
    )
    sent = replay.received[0]
    assert (sent["method"], sent["path"]) == ("POST", "/store")
    assert sent["body"] == body
    assert sent["headers"]["Content-Type"] == "application/json"


async def test_no_authorization_header_without_a_token(
    transport: HttpTransport, replay: Replayer
) -> None:
    replay.answer("d3_retrieve_by_identifier_nonexistent")
    await transport.retrieve_entity_by_identifier("Nonexistent Thing")
    assert "Authorization" not in replay.received[0]["headers"]


async def test_bearer_token_is_sent_when_given(replayer: tuple[Replayer, str]) -> None:
    replay, url = replayer
    replay.answer("d3_retrieve_by_identifier_nonexistent")
    async with HttpTransport(url, TOKEN, retry=NO_RETRY_WAITS) as transport:
        await transport.retrieve_entity_by_identifier("Nonexistent Thing")
    assert replay.received[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("e2_create_relationship", "create_relationship"),
        ("e3_create_relationships_batch", "create_relationships"),
        ("e6_get_entity_snapshot_msg", "get_entity_snapshot"),
        ("e5_list_observations_msg", "list_observations"),
        ("e4_retrieve_related_entities_msg", "retrieve_related_entities"),
        ("e7_entities_query_conversation_message", "query_entities"),
        ("d4_retrieve_by_identifier_acme_typed", "retrieve_entity_by_identifier"),
    ],
)
async def test_each_route_and_body_matches_the_server(
    transport: HttpTransport, replay: Replayer, name: str, call: str
) -> None:
    request, _ = sample(name)
    replay.answer(name)
    body = request["body"]
    if call == "create_relationship":
        await transport.create_relationship(
            body["relationship_type"], body["source_entity_id"], body["target_entity_id"]
        )
    elif call == "create_relationships":
        await transport.create_relationships(body["relationships"])
    elif call == "get_entity_snapshot":
        await transport.get_entity_snapshot(body["entity_id"])
    elif call == "list_observations":
        await transport.list_observations(body["entity_id"])
    elif call == "retrieve_related_entities":
        await transport.retrieve_related_entities(body["entity_id"])
    elif call == "query_entities":
        await transport.query_entities(entity_type=body["entity_type"])
    else:
        await transport.retrieve_entity_by_identifier(
            body["identifier"], entity_type=body.get("entity_type")
        )
    sent = replay.received[0]
    assert sent["path"] == request["path"]
    # Everything the recorded client sent, we send; extras are the server's own defaults.
    assert {k: sent["body"][k] for k in body} == body
    defaults = {"limit": 100, "offset": 0, "direction": "both", "max_hops": 1}
    assert {k: v for k, v in sent["body"].items() if k not in body}.items() <= defaults.items()


async def test_correct_sends_the_closed_body_the_server_accepts(
    transport: HttpTransport, replay: Replayer
) -> None:
    replay.queue.append(
        {
            "status": 200,
            "headers": {},
            "body": {
                "success": True,
                "snapshot": {"name": "Acme Inc"},
                "observation_id": "o-1",
                "entity_id": "ent_af939bedafbd1838b259772a",
                "field": "name",
                "value": "Acme Inc",
                "message": "ok",
            },
        }
    )
    result = await transport.correct(
        "ent_af939bedafbd1838b259772a", "company", "name", "Acme Inc", idempotency_key="fix-1"
    )
    assert replay.received[0]["path"] == "/correct"
    assert set(replay.received[0]["body"]) == {
        "entity_id",
        "entity_type",
        "field",
        "value",
        "idempotency_key",
    }
    assert result.snapshot == {"name": "Acme Inc"}


# --- what comes back -------------------------------------------------------------------------


async def test_fresh_store_is_aligned_by_observation_index(
    transport: HttpTransport, replay: Replayer
) -> None:
    request, response = sample("a_store_turn1_user")
    replay.answer("a_store_turn1_user")
    body = request["body"]
    result = await transport.store(
        body["entities"],
        idempotency_key=body["idempotency_key"],
        relationships=body["relationships"],
    )
    assert not result.replayed
    assert result.entity_id(0) == "ent_0029f6f8fa7224fb13a2366b"  # the conversation
    assert result.entity_id(1) == "ent_8ba334e4de46bb2ab3e93d94"  # the message
    assert result.raw == response["body"]


def test_a_fresh_answer_out_of_request_order_is_put_in_request_order() -> None:
    _, response = sample("a_store_turn1_user")
    raw = dict(response["body"])
    raw["entities"] = list(reversed(raw["entities"]))
    result = StoreResult.from_json(raw, request_entities=[{}] * len(raw["entities"]))
    assert [e.observation_index for e in result.entities] == list(range(len(raw["entities"])))
    assert result.entity_id(0) == "ent_0029f6f8fa7224fb13a2366b"


async def test_replayed_store_is_aligned_by_identity_not_position(
    transport: HttpTransport, replay: Replayer
) -> None:
    request, response = sample("b_store_turn1_user_replay")
    replay.answer("b_store_turn1_user_replay")
    # The replay lists the message first (newest first) and carries no observation_index.
    assert response["body"]["entities"][0]["entity_type"] == "conversation_message"
    body = request["body"]
    result = await transport.store(
        body["entities"],
        idempotency_key=body["idempotency_key"],
        relationships=body["relationships"],
    )
    assert result.replayed
    assert result.entity_id(0) == "ent_0029f6f8fa7224fb13a2366b"
    assert result.entity_id(1) == "ent_8ba334e4de46bb2ab3e93d94"
    assert [e.entity_type for e in result.entities] == ["conversation", "conversation_message"]


async def test_lookup_reads_id_not_entity_id(transport: HttpTransport, replay: Replayer) -> None:
    replay.answer("d2_retrieve_by_identifier_acme", "d6_retrieve_by_identifier_entity_id")
    by_name = await transport.retrieve_entity_by_identifier("Acme Corp")
    assert by_name.match_mode == "snapshot_field"
    assert [e.id for e in by_name.entities] == ["ent_af939bedafbd1838b259772a"]
    assert by_name.entities[0].snapshot == {"name": "Acme Corp"}
    by_id = await transport.retrieve_entity_by_identifier("ent_af939bedafbd1838b259772a")
    assert by_id.match_mode == "direct"
    # direct mode nests the snapshot record; the field map is unwrapped either way
    assert by_id.entities[0].snapshot == {"name": "Acme Corp"}


async def test_other_reads_parse(transport: HttpTransport, replay: Replayer) -> None:
    replay.answer(
        "e3_create_relationships_batch",
        "e4_retrieve_related_entities_msg",
        "e5_list_observations_msg",
        "e7_entities_query_conversation_message",
    )
    created = await transport.create_relationships([])
    assert len(created.relationships) == 2
    assert not created.errors
    related = await transport.retrieve_related_entities("ent_8ba334e4de46bb2ab3e93d94")
    assert related.relationships
    assert all(e.id.startswith("ent_") for e in related.entities)
    observations = await transport.list_observations("ent_8ba334e4de46bb2ab3e93d94")
    assert len(observations) == 2
    assert observations.observations[0].fields["content"] == "Tell me about Acme Corp"
    query = await transport.query_entities(entity_type="conversation_message")
    assert query.total == 2
    assert {e.entity_type for e in query.entities} == {"conversation_message"}


@pytest.mark.parametrize(
    ("name", "error", "status", "code"),
    [
        (
            "c_store_same_key_different_content",
            IdempotencyMismatchError,
            400,
            "ERR_IDEMPOTENCY_MISMATCH",
        ),
        (
            "f3b_store_conversation_without_conversation_id_again",
            ValidationError,
            400,
            "ERR_STORE_RESOLUTION_FAILED",
        ),
        (
            "e1b_store_target_entity_id_bad_format",
            ValidationError,
            400,
            "ERR_STORE_RESOLUTION_FAILED",
        ),
        ("g4f_store_unknown_top_level_field", ValidationError, 400, "ERR_UNKNOWN_FIELD"),
        ("g4b_store_without_idempotency_key", ValidationError, 400, "VALIDATION_ERROR"),
        ("g2b_invalid_bearer_store", AuthenticationError, 401, "AUTH_INVALID"),
        ("g4_entity_without_entity_type", ServerError, 500, "DB_QUERY_FAILED"),
        ("g3_malformed_json_store", ValidationError, 400, None),
    ],
)
async def test_store_errors_map_onto_the_tree(
    transport: HttpTransport,
    replay: Replayer,
    name: str,
    error: type[APIError],
    status: int,
    code: str | None,
) -> None:
    _, response = sample(name)
    replay.answer(name)
    with pytest.raises(error) as info:
        await transport.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
    assert type(info.value) is error
    assert info.value.status == status
    assert info.value.code == code
    if isinstance(response["body"], dict):
        assert info.value.body == response["body"]
    assert len(replay.received) == 1  # a 4xx or a 500 is never retried


async def test_both_envelope_families_give_message_and_hint(
    transport: HttpTransport, replay: Replayer
) -> None:
    replay.answer(
        "c_store_same_key_different_content", "f3b_store_conversation_without_conversation_id_again"
    )
    with pytest.raises(IdempotencyMismatchError) as mismatch:
        await transport.store([{"entity_type": "note"}], idempotency_key="k")
    assert mismatch.value.message.startswith("ERR_IDEMPOTENCY_MISMATCH: idempotency_key")
    assert mismatch.value.hint is not None
    assert mismatch.value.hint.startswith("Each unique payload")
    with pytest.raises(ValidationError) as refused:
        await transport.store([{"entity_type": "note"}], idempotency_key="k")
    assert refused.value.message == "Structured store refused: 1 observation(s) failed resolution."
    assert refused.value.hint is not None
    assert "conversation_id" in refused.value.hint  # the hint.text


async def test_html_pages_become_readable_errors(
    transport: HttpTransport, replay: Replayer
) -> None:
    replay.answer("g3b_malformed_json_retrieve", "g5_unknown_endpoint_post")
    with pytest.raises(ValidationError) as bad_json:
        await transport.retrieve_entity_by_identifier("x")
    assert str(bad_json.value) == (
        "[400] SyntaxError: Expected property name or '}' in JSON at position 1"
    )
    assert "node_modules" not in str(bad_json.value)  # the stack trace stays in .body
    with pytest.raises(NotFoundError) as unknown:
        await transport.retrieve_entity_by_identifier("x")
    assert unknown.value.message == "Cannot POST /no_such_endpoint"


async def test_missing_entity_is_not_found(transport: HttpTransport, replay: Replayer) -> None:
    replay.answer("e6b_get_entity_snapshot_unknown")
    with pytest.raises(NotFoundError) as info:
        await transport.get_entity_snapshot("ent_000000000000000000000000")
    assert info.value.code == "RESOURCE_NOT_FOUND"


async def test_bad_relationship_type_is_a_validation_error(
    transport: HttpTransport, replay: Replayer
) -> None:
    replay.answer("e2c_create_relationship_bad_type")
    with pytest.raises(ValidationError) as info:
        await transport.create_relationship("MENTIONS", "ent_a", "ent_b")
    assert info.value.code == "VALIDATION_INVALID_FORMAT"
    assert info.value.body["details"]["issues"][0]["code"] == "invalid_enum_value"


async def test_plain_text_429_beyond_the_time_bound_is_raised_with_retry_after(
    replayer: tuple[Replayer, str],
) -> None:
    replay, url = replayer
    replay.answer("v3_rate_limit_store_4")
    # Retry-After: 60 is beyond this call's 5 s bound: raise at once instead of sleeping.
    async with HttpTransport(url, token=TOKEN, retry=RetryPolicy(timeout=5.0)) as transport:
        with structlog.testing.capture_logs() as logs, pytest.raises(RateLimitedError) as info:
            await transport.store([{"entity_type": "note"}], idempotency_key="rl-3")
    assert info.value.retry_after == 60
    assert info.value.message == "Write rate limit exceeded, please slow down"
    assert info.value.body == {"text": "Write rate limit exceeded, please slow down"}
    assert len(replay.received) == 1
    assert not [e for e in logs if e["event"] == "transport.retry"]


async def test_success_that_is_not_a_json_object_is_a_server_error(
    transport: HttpTransport, replay: Replayer
) -> None:
    replay.queue.append({"status": 200, "headers": {"Content-Type": "text/html"}, "body": "<html>"})
    with pytest.raises(ServerError, match="expected a JSON object"):
        await transport.get_entity_snapshot("ent_x")


# --- lifecycle -------------------------------------------------------------------------------


async def test_session_is_created_lazily_and_closed_once(replayer: tuple[Replayer, str]) -> None:
    replay, url = replayer
    transport = HttpTransport(url, token=TOKEN, retry=NO_RETRY_WAITS)
    assert "idle" in repr(transport)
    replay.answer("d3_retrieve_by_identifier_nonexistent")
    await transport.retrieve_entity_by_identifier("Nonexistent Thing")
    assert "open" in repr(transport)
    await transport.aclose()
    await transport.aclose()  # idempotent
    assert "closed" in repr(transport)


async def test_use_after_close_is_a_clear_error(replayer: tuple[Replayer, str]) -> None:
    async with HttpTransport(replayer[1], token=TOKEN) as transport:
        pass
    with pytest.raises(RuntimeError, match="HttpTransport is closed"):
        await transport.retrieve_entity_by_identifier("x")
    with pytest.raises(RuntimeError, match="HttpTransport is closed"):
        async with transport:
            pass


def test_trio_is_refused_with_a_clear_error() -> None:
    import trio

    transport = HttpTransport()
    with pytest.raises(RuntimeError, match="asyncio only"):
        trio.run(transport.get_entity_snapshot, "ent_x")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.invalid",
        "127.0.0.1:3080",
        "http://user:pw@127.0.0.1:3080",
        "ftp://user:pw@example.invalid",
    ],
)
def test_bad_base_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="base_url") as info:
        HttpTransport(url, token=TOKEN)
    assert "pw" not in str(info.value)


def test_repr_never_shows_the_token() -> None:
    transport = HttpTransport("http://127.0.0.1:3080", TOKEN)
    assert TOKEN not in repr(transport)
    assert TOKEN not in str(vars(transport).get("_retry"))
    assert "token='***'" in repr(transport)
    assert "token=None" in repr(HttpTransport())


async def test_token_never_reaches_logs_or_error_messages(replayer: tuple[Replayer, str]) -> None:
    replay, url = replayer
    replay.answer("v3_rate_limit_store_4")  # retried (Retry-After 60 > 0 with backoff off)
    replay.answer("g2_invalid_bearer")
    with structlog.testing.capture_logs() as logs:
        async with HttpTransport(url, TOKEN, retry=RetryPolicy(backoff=False)) as transport:
            with pytest.raises(AuthenticationError) as auth:
                await transport.store([{"entity_type": "note"}], idempotency_key="k")
            assert TOKEN not in repr(transport)
    async with HttpTransport("http://127.0.0.1:1", TOKEN, retry=NO_RETRY_WAITS) as down:
        with pytest.raises(ConnectionLost) as lost:
            await down.get_entity_snapshot("ent_x")
    assert [e["event"] for e in logs] == ["transport.retry"]
    for text in (repr(logs), str(auth.value), repr(auth.value), str(lost.value), repr(lost.value)):
        assert TOKEN not in text


# --- the retry policy ------------------------------------------------------------------------


def test_backoff_is_full_jitter_capped_by_wait_max(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = RetryPolicy(wait_initial=0.5, wait_max=3.0, wait_exp_base=2.0)
    caps: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        caps.append((low, high))
        return high

    monkeypatch.setattr(random, "uniform", uniform)
    assert [policy.wait(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert all(low == 0.0 for low, _ in caps)


def test_backoff_draws_vary() -> None:
    policy = RetryPolicy(wait_initial=1.0, wait_max=10.0)
    draws = {policy.wait(3) for _ in range(50)}
    assert len(draws) > 1
    assert all(0.0 <= d <= 4.0 for d in draws)


def test_retry_after_is_honoured_as_given() -> None:
    assert RetryPolicy().wait(1, retry_after=7.0) == 7.0


def test_testing_switch_turns_every_wait_off() -> None:
    policy = RetryPolicy(backoff=False)
    assert policy.wait(5) == 0.0
    assert policy.wait(1, retry_after=60.0) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": 0}, {"timeout": 0}, {"wait_initial": -1}, {"wait_exp_base": 0}],
)
def test_retry_policy_refuses_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)


def test_no_retries_makes_one_attempt() -> None:
    assert RetryPolicy.no_retries().attempts == 1


@pytest.fixture(autouse=True)
def _no_global_random_state_leak() -> Iterator[None]:
    state = random.getstate()
    yield
    random.setstate(state)


# --- envelopes, both ways --------------------------------------------------------------------

_ERROR_SAMPLES = [
    "c_store_same_key_different_content",
    "e1b_store_target_entity_id_bad_format",
    "e2c_create_relationship_bad_type",
    "e6b_get_entity_snapshot_unknown",
    "f3b_store_conversation_without_conversation_id_again",
    "g2_invalid_bearer",
    "g2d_missing_bearer_with_xff",
    "g4_entity_without_entity_type",
    "g4e_retrieve_missing_identifier",
    "g4f_store_unknown_top_level_field",
]


@pytest.mark.parametrize("name", _ERROR_SAMPLES)
def test_an_error_envelope_survives_the_round_trip(name: str) -> None:
    _, response = sample(name)
    error = error_from_response(response["status"], response["body"], response["headers"])
    assert error.status == response["status"]
    assert error.code == error_code(response["body"])
    # What the dev server sends for that error is exactly what the server sent.
    assert envelope_of(error) == response["body"]


def test_an_error_without_a_body_gets_a_flat_envelope() -> None:
    body = envelope_of(NotFoundError("Entity not found", status=404))
    assert body["error_code"] == "RESOURCE_NOT_FOUND"
    assert body["message"] == "Entity not found"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", body["timestamp"])


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("60", 60.0),
        (" 1.5 ", 1.5),
        ("-3", 0.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
    ],
)
def test_retry_after_header_values(header: str | None, seconds: float | None) -> None:
    now = dt.datetime(2015, 10, 21, 7, 28, 0, tzinfo=dt.timezone.utc)
    assert parse_retry_after(header, now=now) == seconds
