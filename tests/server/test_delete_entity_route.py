"""The dev server's ``POST /delete_entity`` and ``/restore_entity``, shaped as a real server's.

What matters: the body the real server takes (``entity_id``, ``entity_type``, ``reason``,
``user_id``; anything else 400), its answer ``{success, entity_id, observation_id}``, a 404
for an unknown entity, a 403 for another user, and the deletion seen by the next read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.server import create_app, serving

pytestmark = pytest.mark.anyio


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        maria = await NeotomaMemory(store, conversation_id="c").remember(
            "person", name="Maria Gomez"
        )
        async with serving(create_app(store, token="tok")) as url:
            yield url, maria


async def _post(url: str, path: str, body: object) -> tuple[int, Any]:
    headers = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, data=json.dumps(body), headers=headers) as resp,
    ):
        return resp.status, await resp.json()


async def test_delete_and_restore_answer_as_a_real_server(served: tuple[str, str]) -> None:
    url, maria = served
    status, answer = await _post(
        url, "/delete_entity", {"entity_id": maria, "entity_type": "person"}
    )
    assert status == 200
    assert sorted(answer) == ["entity_id", "observation_id", "success"]
    assert (answer["success"], answer["entity_id"]) == (True, maria)
    status, _ = await _post(url, "/get_entity_snapshot", {"entity_id": maria})
    assert status == 404
    status, answer = await _post(
        url, "/restore_entity", {"entity_id": maria, "entity_type": "person", "reason": "oops"}
    )
    assert (status, answer["success"]) == (200, True)
    status, snapshot = await _post(url, "/get_entity_snapshot", {"entity_id": maria})
    assert (status, snapshot["snapshot"]["name"]) == (200, "Maria Gomez")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"entity_type": "person"}, 400),  # entity_id required
        ({"entity_id": "MARIA"}, 400),  # entity_type required
        ({"entity_id": "MARIA", "entity_type": "person", "purge": True}, 400),  # closed body
        ({"entity_id": "MARIA", "entity_type": 7}, 400),
        ({"entity_id": "ent_" + "0" * 24, "entity_type": "person"}, 404),
        # Another user (the server token may act for any): no such entity there.
        ({"entity_id": "MARIA", "entity_type": "person", "user_id": "someone-else"}, 404),
    ],
)
async def test_bad_bodies_are_refused_and_change_nothing(
    served: tuple[str, str], body: dict[str, Any], status: int
) -> None:
    url, maria = served
    body = {k: (maria if v == "MARIA" else v) for k, v in body.items()}
    for path in ("/delete_entity", "/restore_entity"):
        got, answer = await _post(url, path, body)
        assert got == status, answer
    got, _ = await _post(url, "/get_entity_snapshot", {"entity_id": maria})
    assert got == 200
