"""The dev server's GET routes answer as a real server's do (samples k20-k32 and n).

The k group is replayed over HTTP on a fresh dev server (its stores k1-k7, then each GET),
the n group on another; the rest are focused tests of each query option and refusal. Every
server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import attrs
import pytest

from neotoma_agent.server import create_app, serving
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = pytest.mark.anyio

SAMPLES = Path(
    os.environ.get("NEOTOMA_SAMPLES", Path(__file__).resolve().parent / "data" / "samples")
)
TOKEN = "dev-local"  # the token the recorded server was started with
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# Undeclared fields the real server leaves out of snapshots while today's embedded store
# keeps them. The fidelity branch makes the store drop them; then this set can go.
UNDECLARED_SNAPSHOT_FIELDS = frozenset(("platform",))
# Types whose schema version the embedded store does not give yet (it says 1.0 where the
# server says conversation_turn 1.1): the fidelity branch declares them; then this can go.
PENDING_SCHEMA_VERSIONS = frozenset(("conversation_turn",))
# Maps whose keys are snapshot fields.
_FIELD_MAPS = frozenset(("snapshot", "provenance"))
# Lists of edges: edges written by one store share one timestamp here (one clock reading
# per store), so their order among themselves is the server's insertion order there and
# undefined here. Such lists are compared as sets, after checking ours are time-ordered.
_EDGE_LISTS = frozenset(("outgoing", "incoming", "relationships"))
# The server orders primary_fields by the type's declared fields, which the embedded
# schemas do not list yet: compared as sets.
_FIELD_LISTS = frozenset(("primary_fields",))
# Recorded GETs that are not this branch's: the history branch adds /recent_conversations.
_NOT_OURS = ("/recent_conversations",)


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp runs on asyncio only."""
    return "asyncio"


@attrs.frozen
class Answer:
    status: int
    content_type: str
    body: Any


@attrs.define
class Client:
    """Raw HTTP to one dev server."""

    session: aiohttp.ClientSession
    url: str

    async def call(
        self, method: str, path: str, body: object = None, headers: Mapping[str, str] = AUTH
    ) -> Answer:
        data = None if body is None else json.dumps(body)
        all_headers = {"Content-Type": "application/json", **headers}
        async with self.session.request(
            method, self.url + path, data=data, headers=all_headers
        ) as resp:
            text = await resp.text()
            decoded = json.loads(text) if resp.content_type == "application/json" else text
            return Answer(resp.status, resp.content_type, decoded)

    async def get(self, path: str, **query: object) -> Answer:
        if query:
            path += "?" + urllib.parse.urlencode({k: str(v) for k, v in query.items()})
        return await self.call("GET", path)


async def _serve(store: object, token: str | None = TOKEN) -> AsyncIterator[Client]:
    app = create_app(store, token=token)  # type: ignore[arg-type]
    async with serving(app, shutdown_timeout=2.0) as url, aiohttp.ClientSession() as session:
        yield Client(session, url)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "store.db") as s:
        yield s


@pytest.fixture
async def client(store: EmbeddedStore) -> AsyncIterator[Client]:
    async for c in _serve(store):
        yield c


# --- the recordings ------------------------------------------------------------------------


def _group(letter: str) -> list[dict[str, Any]]:
    index = SAMPLES / "INDEX.json"
    if not index.is_file():
        pytest.skip(f"recorded samples not found at {SAMPLES}")
    calls: list[dict[str, Any]] = json.loads(index.read_text("utf-8"))["calls"]
    return [c for c in calls if c["name"].startswith(letter) and c["name"][1].isdigit()]


def _load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    request = json.loads((SAMPLES / f"{name}.request.json").read_text("utf-8"))
    response = json.loads((SAMPLES / f"{name}.response.json").read_text("utf-8"))
    return request, response


async def _replay(client: Client, name: str) -> tuple[Answer, dict[str, Any]]:
    request, response = _load(name)
    answer = await client.call(
        request["method"], request["path"], request["body"], headers=request["headers"]
    )
    return answer, response


def _comparable(value: Any, parent: str = "") -> Any:
    """``value`` without what may differ: times, undeclared fields, orders that tie here."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "timestamp" or (key.endswith("_at") and isinstance(item, str)):
                out[key] = "<time>"
            elif parent in _FIELD_MAPS and key in UNDECLARED_SNAPSHOT_FIELDS:
                continue
            elif key == "schema_version" and value.get("entity_type") in PENDING_SCHEMA_VERSIONS:
                out[key] = "<pending>"
            else:
                out[key] = _comparable(item, key)
        return out
    if isinstance(value, list):
        items = [_comparable(item, parent) for item in value]
        if parent in _FIELD_LISTS:
            return sorted(set(items) - UNDECLARED_SNAPSHOT_FIELDS)
        if parent in _EDGE_LISTS and all(isinstance(i, dict) for i in items):
            return sorted(items, key=lambda e: str(e.get("relationship_key")))
        return items
    return value


def _edges_in_time_order(body: Any, path: str) -> bool:
    """Whether our edge lists are ordered as the server orders them (by observation time)."""
    newest_first = path.startswith("/relationships?")
    for key in _EDGE_LISTS - {"relationships"} if "/entities/" in path else {"relationships"}:
        times = [e["last_observation_at"] for e in body.get(key, [])]
        if times != sorted(times, reverse=newest_first):
            return False
    return True


async def test_the_k_recordings_replayed_over_http_give_the_servers_answers(
    client: Client,
) -> None:
    calls = _group("k")
    replayed = []
    for call in calls:
        name = call["name"]
        if call["path"].startswith(_NOT_OURS):
            continue
        if call["method"] == "POST":
            # The server's stores were milliseconds apart; so are these (one clock reading
            # per store), so that sorting by observation time finds the same order.
            await anyio.sleep(0.003)
        answer, response = await _replay(client, name)
        assert answer.status == response["status"], (name, answer.body)
        if call["method"] == "POST":
            continue
        expected, ours = response["body"], answer.body
        if name == "k30f_get_entities_search_acme":
            # Known gap (as e7b): the server's lexical search also matches snapshot text (a
            # message mentioning "Acme"); ours searches names only and finds a subset.
            assert {e["entity_id"] for e in ours["entities"]} < {
                e["entity_id"] for e in expected["entities"]
            }
            replayed.append(name)
            continue
        assert _edges_in_time_order(ours, call["path"]), name
        assert _comparable(ours) == _comparable(expected), name
        replayed.append(name)
    assert len(replayed) == 23


async def test_the_n_recordings_give_the_servers_refusals(client: Client) -> None:
    replayed = 0
    for call in _group("n"):
        if call["path"].startswith(_NOT_OURS):
            continue
        answer, response = await _replay(client, call["name"])
        assert answer.status == response["status"], call["name"]
        assert _comparable(answer.body) == _comparable(response["body"]), call["name"]
        replayed += 1
    assert replayed == 15
