"""The dev server with users: each token acts for its user alone, on every route.

A real aiohttp server on 127.0.0.1 over one store file, with Alice's and Bob's tokens and
the admin's. Both users' memories are written through ``HttpTransport(user_id=)`` (a
marker of each in a prompt, a reply, a tool call's arguments and a remembered entity);
then every GET and POST route, and every page of the web view and its JSON twin, is
asked by Alice about Bob's rows: no answer holds Bob's marker, a direct read of Bob's
entity is not found, a write to it changes nothing of Bob's. Naming Bob's user id with
Alice's token is 403 on every route; the admin token may act for either.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
import structlog
from two_users_support import ALICE, BOB, Planted, seed
from users_server_support import ADMIN, TOKENS, users_server

from neotoma_agent import EmbeddedStore, HttpTransport, RetryPolicy
from neotoma_agent.server._conversations import CONVERSATION_ROUTES
from neotoma_agent.server._get_routes import READ_ROUTES
from neotoma_agent.server._routes import GET_ROUTES, POST_ROUTES
from neotoma_agent.server._search import SEARCH_ROUTES

pytestmark = pytest.mark.anyio


@attrs.frozen
class World:
    url: str
    planted: dict[str, Planted]
    store: EmbeddedStore


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with users_server(tmp_path / "m.db") as (store, url):
        planted = {}
        for user, token in TOKENS.items():
            async with _transport(url, token, user) as transport:
                planted[user] = await seed(transport, user)
        yield World(url, planted, store)


def _transport(url: str, token: str, user: str) -> HttpTransport:
    return HttpTransport(
        url,
        token=token,
        user_id=user,
        tenant_scoped_ids=True,
        retry=RetryPolicy(attempts=1),
    )


@attrs.frozen
class Answer:
    status: int
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)


async def _call(
    url: str, method: str, path: str, token: str, body: dict[str, Any] | None = None
) -> Answer:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            url + path,
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            allow_redirects=False,
        ) as answer,
    ):
        return Answer(answer.status, await answer.text())


def _requests(bob: Planted) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every route of the dev server, asked about Bob's rows (a request per route and id)."""
    requests: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/recent_conversations", None),
        ("GET", "/me", None),
        ("GET", f"/recent_conversations/{bob.conversation_entity_id}", None),
        ("GET", "/conversation_summaries", None),
        ("GET", "/entities?limit=100", None),
        ("GET", "/relationships?limit=100", None),
        ("POST", "/entities/query", {"limit": 100}),
        ("POST", "/entities/query", {"search": "Maria"}),
        ("POST", "/text_search", {"q": bob.marker}),
        ("POST", "/text_search", {"q": "Maria"}),
        ("POST", "/retrieve_entity_by_identifier", {"identifier": "Maria Gomez"}),
        ("POST", "/retrieve_entity_by_identifier", {"identifier": "Acme Corp"}),
        ("POST", "/retrieve_entity_by_identifier", {"identifier": bob.conversation_id}),
    ]
    for entity_id in bob.entity_ids:
        requests += [
            ("GET", f"/entities/{entity_id}", None),
            ("GET", f"/entities/{entity_id}/observations", None),
            ("GET", f"/entities/{entity_id}/relationships?expand_entities=true", None),
            ("GET", f"/relationships?source_entity_id={entity_id}", None),
            ("POST", "/get_entity_snapshot", {"entity_id": entity_id}),
            ("POST", "/list_observations", {"entity_id": entity_id}),
            ("POST", "/retrieve_related_entities", {"entity_id": entity_id}),
            ("POST", "/retrieve_entity_by_identifier", {"identifier": entity_id}),
        ]
    return requests


#: the route patterns :func:`_requests` and :func:`_writes` cover (the rest: /health)
_COVERED = {
    "/recent_conversations",
    "/recent_conversations/{entity_id}",
    "/conversation_summaries",
    "/entities",
    "/entities/{id}",
    "/entities/{id}/observations",
    "/entities/{id}/relationships",
    "/relationships",
    "/relationships/{id}",
    "/entities/query",
    "/text_search",
    "/retrieve_entity_by_identifier",
    "/get_entity_snapshot",
    "/list_observations",
    "/retrieve_related_entities",
    "/store",
    "/create_relationship",
    "/create_relationships",
    "/correct",
    "/delete_entity",
    "/restore_entity",
    "/health",
    "/me",
}


def test_every_route_is_in_the_matrix() -> None:
    routes = {*POST_ROUTES, *GET_ROUTES, *CONVERSATION_ROUTES, *READ_ROUTES, *SEARCH_ROUTES}
    assert routes == _COVERED


async def test_a_user_never_sees_another_user_s_rows(world: World) -> None:
    for reader, other in ((ALICE, BOB), (BOB, ALICE)):
        theirs = world.planted[other]
        for method, path, body in _requests(theirs):
            answer = await _call(world.url, method, path, TOKENS[reader], body)
            assert theirs.marker not in answer.text, (reader, method, path)
            if answer.status == 200 and path.startswith(("/entities/ent_", "/get_entity")):
                pytest.fail(f"{reader} read {other}'s entity: {method} {path}")
        # Bob's relationship keys are not Alice's to read either.
        async with _transport(world.url, ADMIN, other) as admin:
            edges = await admin.get_route("/relationships", {"limit": 100})
        for edge in edges["relationships"]:
            key = edge["relationship_key"]
            answer = await _call(world.url, "GET", f"/relationships/{key}", TOKENS[reader])
            assert answer.status == 404, (reader, key)


async def test_a_user_s_own_rows_are_all_there(world: World) -> None:
    for user, token in TOKENS.items():
        mine = world.planted[user]
        for path in (
            "/recent_conversations",
            f"/recent_conversations/{mine.conversation_entity_id}",
            "/conversation_summaries",
            "/entities?limit=100",
        ):
            answer = await _call(world.url, "GET", path, token)
            assert answer.status == 200, path
            assert mine.marker in answer.text or mine.conversation_id in answer.text, path
        found = await _call(world.url, "POST", "/text_search", token, {"q": mine.marker})
        assert found.json["hits"], user
        for entity_id in mine.entity_ids:
            for path in ("", "/observations", "/relationships"):
                answer = await _call(world.url, "GET", f"/entities/{entity_id}{path}", token)
                assert answer.status == 200, (user, path, answer.text)
            snapshot = await _call(
                world.url, "POST", "/get_entity_snapshot", token, {"entity_id": entity_id}
            )
            assert snapshot.status == 200, (user, snapshot.text)


async def test_the_same_company_is_one_entity_per_user(world: World) -> None:
    ids = {}
    for user, token in TOKENS.items():
        answer = await _call(
            world.url, "POST", "/retrieve_entity_by_identifier", token, {"identifier": "Acme Corp"}
        )
        [entity] = answer.json["entities"]
        ids[user] = entity["id"]
    assert ids[ALICE] != ids[BOB]


def _writes(bob: Planted, alice: Planted) -> list[tuple[str, dict[str, Any]]]:
    person = next(i for i in bob.entity_ids if i != bob.conversation_entity_id)
    mine = alice.entity_ids[0]
    return [
        ("/correct", {
            "entity_id": person, "entity_type": "person", "field": "note",
            "value": "overwritten", "idempotency_key": "k-correct",
        }),
        ("/delete_entity", {"entity_id": person, "entity_type": "person"}),
        ("/restore_entity", {"entity_id": person, "entity_type": "person"}),
        ("/create_relationship", {
            "relationship_type": "REFERS_TO", "source_entity_id": mine,
            "target_entity_id": person,
        }),
        ("/create_relationships", {"relationships": [{
            "relationship_type": "REFERS_TO", "source_entity_id": person,
            "target_entity_id": mine,
        }]}),
        ("/store", {
            "entities": [{"entity_type": "note", "title": "mine", "about": person}],
            "idempotency_key": "k-store",
        }),
    ]  # fmt: skip


async def test_a_user_cannot_change_another_user_s_rows(world: World) -> None:
    bob, alice = world.planted[BOB], world.planted[ALICE]

    async def bob_sees() -> str:
        async with _transport(world.url, TOKENS[BOB], BOB) as transport:
            parts = [await transport.get_route("/entities", {"limit": 100})]
            parts.append(await transport.get_route("/relationships", {"limit": 100}))
            for entity_id in bob.entity_ids:
                parts.append(await transport.request("list_observations", {"entity_id": entity_id}))
        return json.dumps(parts, sort_keys=True)

    before = await bob_sees()
    for path, body in _writes(bob, alice):
        answer = await _call(world.url, "POST", path, TOKENS[ALICE], body)
        assert answer.status != 500, (path, answer.text)
    assert await bob_sees() == before


async def test_naming_another_user_is_forbidden(world: World) -> None:
    bob = world.planted[BOB]
    with structlog.testing.capture_logs() as events:
        await _refused_everywhere(world, bob)
    assert "bob" not in repr(events)  # the server logs no user id


async def _refused_everywhere(world: World, bob: Planted) -> None:
    for method, path, body in _requests(bob):
        if method == "GET":
            sep = "&" if "?" in path else "?"
            answer = await _call(world.url, "GET", f"{path}{sep}user_id={BOB}", TOKENS[ALICE])
        else:
            answer = await _call(
                world.url, "POST", path, TOKENS[ALICE], {**(body or {}), "user_id": BOB}
            )
        assert answer.status == 403, (method, path, answer.text)
        assert answer.json["error_code"] == "FORBIDDEN"
        assert bob.marker not in answer.text
    for path, body in _writes(bob, world.planted[ALICE]):
        answer = await _call(world.url, "POST", path, TOKENS[ALICE], {**body, "user_id": BOB})
        assert answer.status == 403, path


async def test_naming_one_s_own_user_is_allowed(world: World) -> None:
    alice = world.planted[ALICE]
    answer = await _call(world.url, "GET", f"/recent_conversations?user_id={ALICE}", TOKENS[ALICE])
    assert answer.status == 200
    assert alice.conversation_id in answer.text


async def test_the_admin_token_acts_for_any_user(world: World) -> None:
    for user, planted in world.planted.items():
        other = world.planted[BOB if user == ALICE else ALICE]
        async with _transport(world.url, ADMIN, user) as admin:
            found = await admin.search(planted.marker)
            assert found.hits
            missed = await admin.search(other.marker)
            assert not missed.hits
        # The same by query string, with no transport in between.
        answer = await _call(world.url, "GET", f"/conversation_summaries?user_id={user}", ADMIN)
        assert planted.conversation_id in answer.text
        assert other.conversation_id not in answer.text
    # Without a user id, the admin is the default user: neither Alice's nor Bob's.
    answer = await _call(world.url, "GET", "/recent_conversations", ADMIN)
    assert all(p.conversation_id not in answer.text for p in world.planted.values())


async def test_a_user_token_naming_a_bad_user_id_is_forbidden_and_the_admin_s_is_invalid(
    world: World,
) -> None:
    answer = await _call(world.url, "POST", "/text_search", TOKENS[ALICE], {"q": "x", "user_id": 7})
    assert answer.status == 403
    answer = await _call(world.url, "POST", "/text_search", ADMIN, {"q": "x", "user_id": "a\x00"})
    assert answer.status == 400
    assert "a\x00" not in answer.text


# --- the web view -----------------------------------------------------------------------


def _pages(bob: Planted) -> list[str]:
    pages = ["", "conversation?id=" + bob.conversation_id, "search?q=Maria", "health"]
    pages += [f"entity?id={i}" for i in bob.entity_ids]
    return pages


async def test_the_web_view_under_a_user_token_shows_that_user_alone(world: World) -> None:
    for reader, other in ((ALICE, BOB), (BOB, ALICE)):
        theirs, mine = world.planted[other], world.planted[reader]
        for page in _pages(theirs):
            for prefix in ("/ui/", "/ui/api/"):
                path = prefix + (page or ("conversations" if prefix.endswith("api/") else ""))
                answer = await _call(world.url, "GET", path, TOKENS[reader])
                assert answer.status in (200, 404), (reader, path)
                assert theirs.marker not in answer.text, (reader, path)
                assert theirs.conversation_id not in answer.text or "conversation?id" in page
        listing = await _call(world.url, "GET", "/ui/api/conversations", TOKENS[reader])
        assert mine.conversation_id in listing.text
        own = await _call(
            world.url, "GET", f"/ui/api/conversation?id={mine.conversation_id}", TOKENS[reader]
        )
        assert own.status == 200
        assert mine.marker in own.text


async def test_the_web_view_logs_a_user_in_with_the_user_s_token(world: World) -> None:
    alice = world.planted[ALICE]
    # A browser keeps a cookie of 127.0.0.1 (aiohttp's jar refuses IP hosts by default).
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        async with session.get(
            f"{world.url}/ui/?token={TOKENS[ALICE]}", allow_redirects=True
        ) as page:
            text = await page.text()
        assert page.status == 200
        assert alice.conversation_id in text
        assert world.planted[BOB].conversation_id not in text
