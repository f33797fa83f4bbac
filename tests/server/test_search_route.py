"""The dev server's ``POST /text_search``: the store's search, refusals in the server's shapes.

Over the EmbeddedStore the body goes to the store, which checks it; over any other
Transport the handler checks it and runs the typed search. Either way: a token is needed
when the server has one, a bad body is a 400 in the flat or Zod-like envelope a real server
uses, and no refusal quotes the query.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.server import create_app, serving
from neotoma_agent.testing import RecordingTransport

pytestmark = pytest.mark.anyio

SECRET = "s3cret-query-words"


@pytest.fixture(params=["embedded", "typed"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="chat-1")
        async with memory.turn("Rotate the TLS certificates", turn_id="t1") as t:
            t.reply = "Done."
        served = store if request.param == "embedded" else RecordingTransport(store)
        async with serving(create_app(served, token="tok")) as url:
            yield url


async def _post(url: str, body: Any, token: str | None = "tok") -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/text_search", json=body, headers=headers) as answer,
    ):
        return answer.status, await answer.json(content_type=None)


async def test_it_answers_the_search_result(server: str) -> None:
    status, body = await _post(server, {"q": "certificates", "conversation_id": "chat-1"})

    assert status == 200
    [hit] = body["hits"]
    assert hit["text"] == "Rotate the TLS certificates"
    assert (hit["kind"], hit["conversation_id"], hit["turn_id"], hit["role"]) == (
        "message",
        "chat-1",
        "t1",
        "user",
    )
    assert hit["message_id"] == hit["entity_id"]
    assert body["partial"] is False


async def test_it_needs_the_token(server: str) -> None:
    status, _ = await _post(server, {"q": "certificates"}, token=None)
    assert status == 401


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"q": 7},
        {"q": ""},
        {"q": "   "},
        {"q": SECRET, "limit": 0},
        {"q": SECRET, "limit": 101},
        {"q": SECRET, "limit": "ten"},
        {"q": SECRET, "conversation_id": 5},
    ],
)
async def test_a_bad_body_is_a_400_that_quotes_no_query(server: str, body: Any) -> None:
    status, answer = await _post(server, body)

    assert status == 400
    assert SECRET not in str(answer)
    assert answer["error_code"].startswith("VALIDATION")
