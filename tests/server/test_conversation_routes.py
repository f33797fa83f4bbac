"""The dev server's ``GET /recent_conversations`` routes answer as the real server did.

The k group's stores (k1–k7: a 3-turn conversation written as the turn protocol writes it)
are replayed on a fresh dev server, then m1–m4 are sent as recorded: the answers must match
the recordings but for times and human-readable messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from paths_support import TESTS
from server_support import TOKEN

from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore, _edges, _write

SAMPLES = TESTS / "data" / "samples"
SETUP = ("k1", "k2", "k3", "k4", "k5", "k6", "k7")
IGNORED = frozenset(("timestamp", "message"))

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not (SAMPLES / "INDEX.json").is_file(), reason="samples not laid out"),
]


def _calls(prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    calls = json.loads((SAMPLES / "INDEX.json").read_text("utf-8"))["calls"]
    return [c for c in calls if c["name"].split("_", 1)[0] in prefixes]


def _load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    request = json.loads((SAMPLES / f"{name}.request.json").read_text("utf-8"))
    response = json.loads((SAMPLES / f"{name}.response.json").read_text("utf-8"))
    return request, response


def _comparable(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _comparable(v)
            for k, v in value.items()
            if k not in IGNORED and not k.endswith("_at")
        }
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


@pytest.fixture
def clock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store's clock: the real one, or (``"one millisecond"``) one fixed time."""
    kind = str(getattr(request, "param", "real"))
    if kind == "one millisecond":
        fixed = "2026-12-01T10:00:00.000Z"
        monkeypatch.setattr(_write, "now_iso", lambda: fixed)
        monkeypatch.setattr(_edges, "now_iso", lambda: fixed)
    return kind


@pytest.fixture
async def server(clock: str, tmp_path: Path) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    async with (
        EmbeddedStore.open(tmp_path / "fresh.db") as store,
        serving(create_app(store, token=TOKEN)) as url,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session,
    ):
        for call in _calls(SETUP):
            request, response = _load(call["name"])
            async with session.post(url + call["path"], json=request["body"]) as answer:
                assert answer.status == response["status"], call["name"]
        yield session, url


# With every store in one millisecond, each message ties with every other: the turns and
# roles alone must give the recorded order (a tie broken by message id put a reply before
# its prompt whenever a turn's two stores shared a millisecond, in 4-54% of runs).
@pytest.mark.parametrize("clock", ["real", "one millisecond"], indirect=True)
async def test_recorded_conversation_reads_answer_as_the_real_server(
    server: tuple[aiohttp.ClientSession, str],
) -> None:
    session, url = server
    replayed = 0
    for call in _calls(("m1", "m1b", "m2", "m3", "m4")):
        request, response = _load(call["name"])
        async with session.get(url + request["path"]) as answer:
            body = await answer.json()
            assert answer.status == response["status"], call["name"]
        assert _comparable(body) == _comparable(response["body"]), call["name"]
        replayed += 1
    assert replayed == 5


async def test_messages_come_in_activity_order_and_a_revision_moves_last(
    server: tuple[aiohttp.ClientSession, str],
) -> None:
    session, url = server
    conversation = "ent_b287065c297c9c9e06663659"
    first = "ent_5081f64f8c7aa535d7e69fb2"  # t1's user message
    revised = {
        "entities": [
            {
                "entity_type": "conversation_message",
                "role": "user",
                "sender_kind": "user",
                "content": "Tell me about Acme Corp, please",
                "turn_key": "conv-3t:t1",
            }
        ],
        "idempotency_key": "conversation-conv-3t-t1-user-turn-r2",
    }
    async with session.post(url + "/store", json=revised) as answer:
        assert answer.status == 200
    async with session.get(f"{url}/recent_conversations/{conversation}") as answer:
        messages = (await answer.json())["messages"]
    assert [m["message_id"] for m in messages][-1] == first
    assert messages[-1]["content"] == "Tell me about Acme Corp, please"
    # The extension pages in write order instead: t1's message stays first.
    async with session.get(f"{url}/recent_conversations/{conversation}?limit=6") as answer:
        page = await answer.json()
    assert page["messages"][0]["message_id"] == first
    assert page["has_more"] is False
    assert {r["snapshot"]["turn_id"] for r in page["turn_records"]} == {"t1", "t2", "t3"}


@pytest.mark.parametrize(
    ("query", "status"),
    [("limit=0", 400), ("limit=101", 400), ("limit=x", 400), ("offset=-1", 400)],
)
async def test_listing_bounds(
    server: tuple[aiohttp.ClientSession, str], query: str, status: int
) -> None:
    session, url = server
    async with session.get(f"{url}/recent_conversations?{query}") as answer:
        assert answer.status == status
        assert (await answer.json())["error_code"] == "VALIDATION_INVALID_FORMAT"
