"""A web page can send a form across sites without asking (no preflight): ``text/plain``,
``application/x-www-form-urlencoded`` or ``multipart/form-data``. The dev server reads only
``application/json`` bodies, so such a write is refused and stores nothing, and no answer
carries ``Access-Control-Allow-Origin`` (a page of another origin cannot read one)."""

from __future__ import annotations

import json

import aiohttp
import pytest
from server_support import TOKEN

from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

BODY = json.dumps(
    {
        "entities": [{"entity_type": "company", "canonical_name": "planted", "name": "Planted"}],
        "idempotency_key": "csrf-1",
    }
)


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_a_cross_site_form_cannot_write(content_type: str) -> None:
    async with EmbeddedStore.open(":memory:") as store:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            serving(create_app(store, token=TOKEN)) as url,
            aiohttp.ClientSession(headers=auth) as session,
        ):
            # The Origin says cross-site: refused before the route (403). Without one (a
            # browser that sends none), the body's type still refuses it (400).
            for origin, status in (({"Origin": "http://evil.example"}, 403), ({}, 400)):
                headers = {"Content-Type": content_type, **origin}
                async with session.post(url + "/store", data=BODY, headers=headers) as resp:
                    assert resp.status == status
                    assert "Access-Control-Allow-Origin" not in resp.headers
        found = await store.retrieve_entity_by_identifier("Planted")
    assert found.entities == ()
