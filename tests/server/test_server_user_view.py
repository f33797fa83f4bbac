"""The dev server over one user's view (``create_app(store.for_user(uid))``).

An application may serve one user's memory alone by giving the app that user's view: every
route, the GET reads included, answers with that user's rows, and another user's entity
is not found. A real aiohttp server on 127.0.0.1 over one store file.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from two_users_support import ALICE, BOB, MARKERS, seed

from neotoma_agent import EmbeddedStore
from neotoma_agent.server import create_app, serving

pytestmark = pytest.mark.anyio

TOKEN = "tok-view-SECRET"


async def _get(url: str, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url + path, headers={"Authorization": f"Bearer {TOKEN}"}) as answer,
    ):
        return answer.status, await answer.text()


async def test_the_get_reads_answer_over_a_user_s_view(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        alice = await seed(store.for_user(ALICE), ALICE)
        bob = await seed(store.for_user(BOB), BOB)
        async with serving(create_app(store.for_user(ALICE), token=TOKEN)) as url:
            for entity_id in alice.entity_ids:
                for path in (
                    f"/entities/{entity_id}",
                    f"/entities/{entity_id}/observations",
                    f"/entities/{entity_id}/relationships",
                ):
                    status, text = await _get(url, path)
                    assert status == 200, (path, text)
                    assert MARKERS[BOB] not in text
            status, text = await _get(url, f"/entities/{alice.conversation_entity_id}")
            assert status == 200
            for entity_id in bob.entity_ids:
                status, text = await _get(url, f"/entities/{entity_id}")
                assert status == 404, text
                assert MARKERS[BOB] not in text
            status, text = await _get(url, "/relationships")
            assert status == 200
            assert MARKERS[BOB] not in text
