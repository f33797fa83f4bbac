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
from paths_support import TESTS

from neotoma_agent.server import create_app, serving
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = pytest.mark.anyio

SAMPLES = Path(os.environ.get("NEOTOMA_SAMPLES", TESTS / "data" / "samples"))
TOKEN = "dev-local"  # the token the recorded server was started with
AUTH = {"Authorization": f"Bearer {TOKEN}"}

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
            else:
                out[key] = _comparable(item, key)
        return out
    if isinstance(value, list):
        items = [_comparable(item, parent) for item in value]
        if parent in _FIELD_LISTS:
            return sorted(set(items))
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


# --- focused: what each route answers --------------------------------------------------------

COMPANIES = ["Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Industries"]


async def _seed(store: EmbeddedStore) -> dict[str, str]:
    """Six companies (one store each, a clock tick apart) and a message referring to two."""
    ids: dict[str, str] = {}
    for i, name in enumerate(COMPANIES):
        await anyio.sleep(0.003)
        fields = {"entity_type": "company", "name": name, "external_id": 10 * (i + 1)}
        if i % 2:
            fields["description"] = f"R&D, {name} and co"
        result = await store.store([fields], idempotency_key=f"company-{i}")
        ids[name] = result.entities[0].entity_id
    await anyio.sleep(0.003)
    message = {
        "entity_type": "conversation_message",
        "role": "user",
        "content": "Acme or Globex?",
        "turn_key": "c1:t1",
    }
    rels = [
        {"relationship_type": "REFERS_TO", "source_index": 0, "target_entity_id": ids[n]}
        for n in ("Acme Corp", "Globex")
    ]
    result = await store.store([message], idempotency_key="c1-t1", relationships=rels)
    ids["message"] = result.entities[0].entity_id
    return ids


def _ids(answer: Answer) -> list[str]:
    return [e["entity_id"] for e in answer.body["entities"]]


def _issue(answer: Answer) -> dict[str, Any]:
    assert answer.status == 400, answer.body
    issues: list[dict[str, Any]] = answer.body["details"]["issues"]
    assert len(issues) == 1
    return issues[0]


async def test_get_entity_is_the_snapshot_under_the_canonical_name(
    store: EmbeddedStore, client: Client
) -> None:
    ids = await _seed(store)
    answer = await client.get(f"/entities/{ids['Acme Corp']}")
    assert answer.status == 200
    assert answer.body["snapshot"] == {"name": "Acme Corp", "external_id": 10}
    assert answer.body["entity_type_label"] == "Company"
    assert answer.body["primary_fields"] == ["name", "external_id"]
    snapshot = await store.get_entity_snapshot(ids["Acme Corp"])
    assert answer.body["provenance"] == dict(snapshot.raw["provenance"])


async def test_unknown_and_malformed_ids_are_both_not_found(client: Client) -> None:
    for path in (
        "/entities/ent_000000000000000000000000",
        "/entities/%20nope",
        "/entities/ent_000000000000000000000000/observations",
        "/entities/nope/observations",
        "/entities/ent_000000000000000000000000/relationships?expand_entities=true",
        "/entities/nope/relationships",
    ):
        answer = await client.get(path)
        assert (answer.status, answer.body["error_code"]) == (404, "RESOURCE_NOT_FOUND"), path
        assert answer.body["message"] == "Entity not found"
    answer = await client.get("/relationships/PART_OF:ent_a:ent_b")
    assert (answer.status, answer.body["message"]) == (
        404,
        "Relationship not found: PART_OF:ent_a:ent_b",
    )


async def test_observations_are_newest_first_paged_and_name_their_key(
    store: EmbeddedStore, client: Client
) -> None:
    ids = await _seed(store)
    for i in range(3):
        await anyio.sleep(0.003)
        await store.store(
            [{"entity_type": "company", "name": "Acme Corp", "external_id": 100 + i}],
            idempotency_key=f"acme-update-{i}",
        )
    acme = ids["Acme Corp"]
    everything = await client.get(f"/entities/{acme}/observations")
    rows = everything.body["observations"]
    assert [r["source"] for r in rows] == [
        "acme-update-2",
        "acme-update-1",
        "acme-update-0",
        "company-0",
    ]
    assert [r["observed_at"] for r in rows] == sorted(
        (r["observed_at"] for r in rows), reverse=True
    )
    assert (everything.body["total"], everything.body["limit"], everything.body["offset"]) == (
        4,
        100,
        0,
    )
    page = await client.get(f"/entities/{acme}/observations", limit=2, offset=1)
    assert [r["id"] for r in page.body["observations"]] == [r["id"] for r in rows[1:3]]
    assert (page.body["total"], page.body["limit"], page.body["offset"]) == (4, 2, 1)
    refused = await client.get(f"/entities/{acme}/observations", limit="many")
    assert _issue(refused)["message"] == "Expected number, received string"


async def test_relationships_of_an_entity_both_ways_and_expanded(
    store: EmbeddedStore, client: Client
) -> None:
    ids = await _seed(store)
    plain = await client.get(f"/entities/{ids['message']}/relationships")
    # Both edges were written by one store: one timestamp, so in key order.
    assert [e["target_entity_id"] for e in plain.body["outgoing"]] == sorted(
        [ids["Acme Corp"], ids["Globex"]]
    )
    assert plain.body["relationships"] == plain.body["outgoing"]
    assert plain.body["incoming"] == []
    assert "related_entities" not in plain.body
    expanded = await client.get(f"/entities/{ids['message']}/relationships?expand_entities=true")
    assert set(expanded.body["related_entities"]) == {ids["Acme Corp"], ids["Globex"]}
    names = {e["target_entity_name"] for e in expanded.body["outgoing"]}
    assert names == {"Acme Corp", "Globex"}
    assert {e["source_entity_name"] for e in expanded.body["outgoing"]} == {None}
    incoming = await client.get(f"/entities/{ids['Globex']}/relationships?expand_entities=true")
    (edge,) = incoming.body["incoming"]
    assert (edge["source_entity_type"], edge["target_entity_name"]) == (
        "conversation_message",
        None,
    )
    assert edge["id"] == edge["relationship_key"]


async def test_relationships_by_key_and_by_source(store: EmbeddedStore, client: Client) -> None:
    ids = await _seed(store)
    key = f"REFERS_TO:{ids['message']}:{ids['Globex']}"
    one = await client.get(f"/relationships/{key}")
    assert one.status == 200
    assert (one.body["id"], one.body["target_entity_type"]) == (key, "company")
    listed = await client.get("/relationships", source_entity_id=ids["message"])
    assert listed.body["total"] == 2
    assert {e["relationship_key"] for e in listed.body["relationships"]} == {
        key,
        f"REFERS_TO:{ids['message']}:{ids['Acme Corp']}",
    }
    assert (await client.get("/relationships", source_entity_id=ids["Globex"])).body["total"] == 0
    assert (await client.get("/relationships", target_entity_id=ids["Globex"])).body["total"] == 1


# --- focused: GET /entities and its options --------------------------------------------------


async def test_get_entities_pages_by_cursor_in_id_order_both_ways(
    store: EmbeddedStore, client: Client
) -> None:
    await _seed(store)
    for order in ("asc", "desc"):
        seen: list[str] = []
        page = await client.get("/entities", entity_type="company", limit=4, sort_order=order)
        while True:
            assert page.status == 200, page.body
            assert page.body["total"] == 6
            seen += _ids(page)
            if "next_cursor" not in page.body:
                break
            page = await client.get(
                "/entities",
                entity_type="company",
                limit=4,
                sort_order=order,
                cursor=page.body["next_cursor"],
            )
        assert seen == sorted(seen, reverse=order == "desc")
        assert len(set(seen)) == 6
    first = await client.get("/entities", entity_type="company", limit=4)
    flipped = await client.get(
        "/entities",
        entity_type="company",
        limit=4,
        sort_order="desc",
        cursor=first.body["next_cursor"],
    )
    assert (flipped.status, flipped.body["error_code"]) == (400, "INVALID_CURSOR")
    assert (await client.get("/entities")).body["limit"] == 100


@pytest.mark.parametrize(
    ("sort_by", "key"),
    [
        ("canonical_name", lambda e: e["canonical_name"]),
        ("observation_count", lambda e: e["observation_count"]),
        ("last_observation_at", lambda e: e["last_observation_at"]),
        ("snapshot.external_id", lambda e: e["snapshot"]["external_id"]),
    ],
)
async def test_get_entities_sorts_by_each_column(
    store: EmbeddedStore, client: Client, sort_by: str, key: Any
) -> None:
    await _seed(store)
    await store.store(
        [{"entity_type": "company", "name": "Hooli", "external_id": 1}], idempotency_key="again"
    )
    for order in ("asc", "desc"):
        page = await client.get(
            "/entities", entity_type="company", sort_by=sort_by, sort_order=order
        )
        values = [key(e) for e in page.body["entities"]]
        assert len(values) == 6
        assert values == sorted(values, reverse=order == "desc"), values
        assert "next_cursor" not in page.body  # cursors walk the default sort only


async def test_get_entities_filters_on_snapshot_fields(
    store: EmbeddedStore, client: Client
) -> None:
    ids = await _seed(store)

    async def names(filters: dict[str, Any]) -> set[str]:
        page = await client.get(
            "/entities", entity_type="company", snapshot_filters=json.dumps(filters)
        )
        assert page.status == 200, page.body
        assert page.body["total"] == len(page.body["entities"])
        return {e["snapshot"]["name"] for e in page.body["entities"]}

    assert await names({"name": {"op": "eq", "value": "Globex"}}) == {"Globex"}
    assert await names({"name": {"op": "in", "value": ["Globex", "Hooli"]}}) == {"Globex", "Hooli"}
    assert await names({"external_id": {"op": "gt", "value": 40}}) == {"Hooli", "Stark Industries"}
    assert await names({"external_id": {"op": "lte", "value": 20}}) == {"Acme Corp", "Globex"}
    assert await names({"external_id": {"op": "gte", "value": 60}}) == {"Stark Industries"}
    assert await names({"external_id": {"op": "lt", "value": 20}}) == {"Acme Corp"}
    assert await names({"name": {"op": "contains", "value": "INDUS"}}) == {"Stark Industries"}
    # Whole words only, punctuation inside the term matching the stored value's.
    assert await names({"description": {"op": "contains_word", "value": "r&d"}}) == {
        "Globex",
        "Umbrella",
        "Stark Industries",
    }
    assert await names({"description": {"op": "contains_word", "value": "an"}}) == set()
    both = {"name": {"op": "contains", "value": "o"}, "external_id": {"op": "gt", "value": 20}}
    assert await names(both) == {"Hooli"}
    assert ids  # seeded


async def test_get_entities_by_time_identity_basis_and_snapshots(
    store: EmbeddedStore, client: Client
) -> None:
    await _seed(store)
    everything = await client.get("/entities", entity_type="company", sort_by="last_observation_at")
    fourth = everything.body["entities"][3]
    since = await client.get(
        "/entities", entity_type="company", updated_since=fourth["last_observation_at"]
    )
    assert since.body["total"] == 3
    created = await client.get("/entities", created_since="2999-01-01T00:00:00.000Z")
    assert created.body["total"] == 0
    totals = [
        (await client.get("/entities", identity_basis=basis)).body["total"]
        for basis in ("schema_rule", "heuristic_name", "target_id")
    ]
    assert totals == [1, 6, 0]  # the message by its rule, the companies by name
    light = await client.get("/entities", include_snapshots="false", limit=600)
    assert light.status == 200
    assert {json.dumps(e["snapshot"]) for e in light.body["entities"]} == {"{}"}
    merged = await client.get("/entities", include_merged="true")
    assert merged.body["total"] == 7


async def test_get_entities_search_and_its_aliases(store: EmbeddedStore, client: Client) -> None:
    ids = await _seed(store)
    for alias in ("search", "query", "search_query"):
        page = await client.get("/entities", **{alias: "globex"})
        assert _ids(page) == [ids["Globex"]], alias
        assert page.body["search_mode"] == "lexical_fallback"
        assert "next_cursor" not in page.body
    # An alias of a type is not resolved here (sample k30i).
    assert (await client.get("/entities", entity_type="agent_message")).body["total"] == 0
    assert (await client.get("/entities", entity_type="companies")).body["total"] == 0


async def test_exclude_bookkeeping_acts_on_the_search_path_only(
    store: EmbeddedStore, client: Client
) -> None:
    await _seed(store)
    listing = await client.get("/entities", exclude_bookkeeping="true")
    assert listing.body["total"] == 7  # the message included (sample k30h)
    # "c1:t1" names the message only; excluded, the search finds nothing.
    found = await client.get("/entities", search="c1:t1")
    hidden = await client.get("/entities", search="c1:t1", exclude_bookkeeping="true")
    assert (found.body["total"], hidden.body["total"]) == (1, 0)


# --- focused: refusals --------------------------------------------------------------------------


async def test_get_entities_refuses_bad_query_strings_as_zod_does(client: Client) -> None:
    cases: list[tuple[dict[str, Any], list[Any], str]] = [
        ({"limit": "abc"}, ["limit"], "Expected number, received string"),
        ({"limit": 0}, ["limit"], "Number must be greater than 0"),
        ({"limit": -2}, ["limit"], "Number must be greater than 0"),
        ({"offset": -1}, ["offset"], "Number must be greater than or equal to 0"),
        (
            {"sort_order": "up"},
            ["sort_order"],
            "Invalid enum value. Expected 'asc' | 'desc', received 'up'",
        ),
        ({"snapshot_filters": "{oops"}, ["snapshot_filters"], "Expected object, received string"),
        ({"include_snapshots": "yes"}, ["include_snapshots"], "Expected boolean, received string"),
        ({"entity_types": "company"}, ["entity_types"], "Expected array, received string"),
        (
            {"identity_basis": "guess"},
            ["identity_basis"],
            "Invalid enum value. Expected 'schema_rule' | 'schema_lookup' | 'heuristic_name' | "
            "'heuristic_fallback' | 'target_id', received 'guess'",
        ),
        (
            {"snapshot_filters": json.dumps({"name": {"op": "like", "value": "x"}})},
            ["snapshot_filters", "name", "op"],
            "Invalid enum value. Expected 'eq' | 'in' | 'gt' | 'lt' | 'gte' | 'lte' | "
            "'contains' | 'contains_word', received 'like'",
        ),
    ]
    for query, path, message in cases:
        issue = _issue(await client.get("/entities", **query))
        assert (issue["path"], issue["message"]) == (path, message), query


async def test_get_entities_refuses_what_a_cursor_cannot_be_combined_with(
    store: EmbeddedStore, client: Client
) -> None:
    await _seed(store)
    cursor = (await client.get("/entities", limit=2)).body["next_cursor"]
    for extra in ({"offset": 2}, {"search": "acme"}, {"sort_by": "canonical_name"}):
        issue = _issue(await client.get("/entities", limit=2, cursor=cursor, **extra))
        assert (issue["path"], issue["params"]["code"]) == (["cursor"], "ERR_CURSOR_COMBINATION")
    for bad in ("not-a-cursor", "e30", cursor[:-4]):
        answer = await client.get("/entities", cursor=bad)
        assert (answer.status, answer.body["error_code"]) == (400, "INVALID_CURSOR"), bad
    for query in ({"offset": 2001}, {"limit": 501}, {"search": "acme", "sort_order": "desc"}):
        answer = await client.get("/entities", **query)
        assert (answer.status, answer.body["error_code"]) == (400, "VALIDATION_INVALID_FORMAT")
    assert (await client.get("/entities", offset=2000)).status == 200


async def test_the_get_routes_require_the_token(client: Client) -> None:
    answer = await client.call("GET", "/entities", headers={})
    assert (answer.status, answer.body["error_code"]) == (401, "AUTH_REQUIRED")
    answer = await client.call("GET", "/entities/x", headers={"Authorization": "Bearer nope"})
    assert (answer.status, answer.body["error_code"]) == (401, "AUTH_INVALID")


async def test_over_another_transport_the_reads_are_not_implemented(
    store: EmbeddedStore,
) -> None:
    recording = RecordingTransport(store)
    async for other in _serve(recording):
        answer = await other.get("/entities/ent_000000000000000000000000")
        assert (answer.status, answer.body["error_code"]) == (501, "NOT_IMPLEMENTED")
        # GET /entities goes through the typed method, which takes the basic options only.
        assert (await other.get("/entities", entity_type="company")).status == 200
        answer = await other.get("/entities", sort_by="canonical_name")
        assert (answer.status, answer.body["error_code"]) == (501, "NOT_IMPLEMENTED")


# --- a GET never writes ----------------------------------------------------------------------


def _every_get(ids: Mapping[str, str]) -> list[str]:
    message, acme = ids["message"], ids["Acme Corp"]
    return [
        f"/entities/{acme}",
        f"/entities/{acme}/observations?limit=2",
        f"/entities/{message}/relationships?expand_entities=true",
        f"/relationships/REFERS_TO:{message}:{acme}",
        f"/relationships?source_entity_id={message}",
        "/entities?limit=3",
        "/entities?search=acme&exclude_bookkeeping=true",
        "/entities?sort_by=snapshot.name&sort_order=desc&include_snapshots=false",
        "/entities?identity_basis=schema_rule&updated_since=2000-01-01T00:00:00.000Z",
    ]


async def test_a_get_never_writes(store: EmbeddedStore, client: Client, tmp_path: Path) -> None:
    ids = await _seed(store)
    await store.aclose()
    before = (tmp_path / "store.db").read_bytes()
    # A read-only store refuses every write before touching the file: each GET ran as a read.
    async with EmbeddedStore.open(tmp_path / "store.db", read_only=True) as reader:
        async for c in _serve(reader):
            for path in _every_get(ids):
                answer = await c.call("GET", path)
                assert answer.status == 200, (path, answer.body)
    assert (tmp_path / "store.db").read_bytes() == before


async def test_a_snapshot_filter_too_deep_to_store_is_refused_not_a_crash(client: Client) -> None:
    # Deeper than a store may hold, and deeper than the JSON decoder recurses.
    for text in ('{"a":' * 150 + "1" + "}" * 150, "[" * 2000):
        issue = _issue(await client.get("/entities", snapshot_filters=text))
        assert issue["path"] == ["snapshot_filters"]
        assert "nested deeper than" in issue["message"]
