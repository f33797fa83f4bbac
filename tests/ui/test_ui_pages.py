"""The web view: every page and its JSON twin, over the embedded store and a real server
stack (the dev server on 127.0.0.1 through HttpTransport), read through aiohttp's own client.

What matters: the pages show what the store holds (exact texts, statuses, partial replies,
the turns that referred to an entity), in the shapes ``show --json`` prints, page long
conversations, and require the token when one is set.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from server_support import TOKEN
from turn_support import db_path, store

from neotoma_agent import NeotomaMemory
from neotoma_agent.cli._show import load_transcript, render_transcript
from neotoma_agent.ui import create_ui_app, mount_ui

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


async def _client(
    transport: Any, *, token: str = TOKEN, send_token: bool = True, **kw: Any
) -> TestClient[web.Request, web.Application]:
    """A client of the view over ``transport``, sending its token unless told not to."""
    app = web.Application()
    mount_ui(app, create_ui_app(transport, token=token, **kw))
    headers = {"Authorization": f"Bearer {token}"} if send_token else {}
    client: TestClient[web.Request, web.Application] = TestClient(TestServer(app), headers=headers)
    await client.start_server()
    return client


async def _seed(store: Any) -> NeotomaMemory:
    memory = NeotomaMemory(store, conversation_id="support-7", platform="helpdesk")
    await memory.remember("company", name="Acme Corp", website="https://acme.example")
    async with memory.turn("What do we know about Acme Corp?", turn_number=1) as t:
        t.reply = "Acme Corp is a customer."

    async def failing_turn() -> None:
        async with memory.turn("And their invoices?", turn_number=2) as t:
            t.reply = "Looking th"
            raise RuntimeError("model went away")

    with pytest.raises(RuntimeError):
        await failing_turn()
    return memory


async def test_conversation_list_counts_turns_by_status(store: Any) -> None:
    await _seed(store)
    client = await _client(store)
    async with client:
        data = await (await client.get("/ui/api/conversations")).json()
        html = await (await client.get("/ui/")).text()
    [conv] = data["conversations"]
    assert conv["conversation_id"] == "support-7"
    assert conv["platform"] == "helpdesk"
    assert (conv["turns"], conv["completed"], conv["abandoned"], conv["open"]) == (2, 1, 1, 0)
    assert 'href="/ui/conversation?id=support-7"' in html


async def test_conversation_page_shows_exact_texts_statuses_and_partial_reply(store: Any) -> None:
    await _seed(store)
    client = await _client(store)
    async with client:
        data = await (await client.get("/ui/api/conversation", params={"id": "support-7"})).json()
        html = await (await client.get("/ui/conversation", params={"id": "support-7"})).text()
    first, second = data["turns"]
    assert [m["content"] for m in first["messages"]] == [
        "What do we know about Acme Corp?",
        "Acme Corp is a customer.",
    ]
    assert first["status"] == "completed"
    assert second["status"] == "abandoned"
    assert second["error_class"] == "RuntimeError"
    assert second["messages"][1]["content"] == "Looking th"
    assert "partial reply the user saw" in html
    assert "RuntimeError" in html
    # The entity the message refers to is a link to its page.
    acme = first["messages"][0]["refers_to"][0]["entity_id"]
    assert f'href="/ui/entity?id={acme}"' in html


async def test_conversation_json_twin_has_show_json_turn_shape(store: Any) -> None:
    await _seed(store)
    client = await _client(store)
    async with client:
        data = await (await client.get("/ui/api/conversation", params={"id": "support-7"})).json()
    shown = (await load_transcript(store, "support-7")).to_json()
    for page_turn, show_turn in zip(data["turns"], shown["turns"], strict=True):
        # One numbering (the stored turn number); every other key as `show --json` has it.
        assert {k: v for k, v in page_turn.items() if k in show_turn} == show_turn
    assert data["platform"] == shown["platform"] == "helpdesk"


async def test_conversation_json_twin_gives_tool_calls_as_show_json_does(store: Any) -> None:
    memory = NeotomaMemory(store, conversation_id="tools-2", platform="t")
    async with memory.turn("Find flights to Lisbon") as t:
        async with t.tool("search_flights", {"to": "LIS"}, call_id="c-1") as call:
            call.result = {"flights": 3}
        t.reply = "Found 3 flights."
    client = await _client(store)
    async with client:
        data = await (await client.get("/ui/api/conversation", params={"id": "tools-2"})).json()
    shown = (await load_transcript(store, "tools-2")).to_json()
    [page_call] = data["turns"][0]["tools"]
    assert page_call == shown["turns"][0]["tools"][0]
    assert (page_call["args"], page_call["result"], page_call["call_id"]) == (
        {"to": "LIS"},
        {"flights": 3},
        "c-1",
    )


async def test_long_conversation_pages_from_the_latest_turns(store: Any) -> None:
    memory = NeotomaMemory(store, conversation_id="long", platform="t")
    for n in range(1, 58):
        await memory.record_turn(f"q{n}", f"a{n}", turn_id=f"t{n}", turn_number=n, retrieve=False)
    client = await _client(store)
    async with client:
        first = await (await client.get("/ui/api/conversation", params={"id": "long"})).json()
        older = await (
            await client.get(
                "/ui/api/conversation", params={"id": "long", "before": first["older"]}
            )
        ).json()
        html = await (await client.get("/ui/conversation", params={"id": "long"})).text()
    assert [t["turn"] for t in first["turns"]] == list(range(8, 58))
    assert first["older"] == "t8"
    assert [t["turn"] for t in older["turns"]] == list(range(1, 8))
    assert older["older"] is None
    assert "earlier turns" in html


async def test_entity_page_lists_fields_observations_and_turns_that_referred_to_it(
    store: Any,
) -> None:
    await _seed(store)
    client = await _client(store)
    found = await store.retrieve_entity_by_identifier("Acme Corp")
    acme = next(e.id for e in found.entities if e.entity_type == "company")
    async with client:
        data = await (await client.get("/ui/api/entity", params={"id": acme})).json()
        html = await (await client.get("/ui/entity", params={"id": acme})).text()
    assert data["snapshot"]["website"] == "https://acme.example"
    assert data["observations"]
    # Both messages of the first turn refer to it (the reply links what retrieval found).
    [referred] = data["referred_by"]
    assert (referred["conversation_id"], referred["roles"]) == ("support-7", ["user", "assistant"])
    assert '<a href="https://acme.example" rel="noopener noreferrer nofollow">' in html
    assert "/ui/conversation?id=support-7#turn-" in html


async def test_entity_page_names_related_entities_by_their_display_names(store: Any) -> None:
    # A relationship read gives canonical names ("person:ana.lopez@acme.com", "Acme"); the
    # page shows the names a user knows them by, as every other page does.
    stored = await store.store(
        [
            {"entity_type": "person", "name": "Ana Lopez", "email": "ana.lopez@acme.com"},
            {"entity_type": "company", "name": "Acme Corp", "website": "acme.com"},
        ],
        idempotency_key="ana-works-at-acme",
        relationships=[{"relationship_type": "works_at", "source_index": 0, "target_index": 1}],
    )
    ana, acme = (e.entity_id for e in stored.entities)
    client = await _client(store)
    async with client:
        of_ana = await (await client.get("/ui/api/entity", params={"id": ana})).json()
        of_acme = await (await client.get("/ui/api/entity", params={"id": acme})).json()
        html = await (await client.get("/ui/entity", params={"id": acme})).text()
    assert of_ana["related"][acme] == {"entity_type": "company", "name": "Acme Corp"}
    assert of_acme["related"][ana] == {"entity_type": "person", "name": "Ana Lopez"}
    assert f'<a href="/ui/entity?id={ana}">Ana Lopez</a>' in html
    assert "ana.lopez@acme.com</a>" not in html


class ModelDown(Exception):
    """An application's own error class (recorded qualified: ``test_ui_pages.ModelDown``)."""


async def test_an_abandoned_turns_error_class_reads_as_show_prints_it(store: Any) -> None:
    memory = NeotomaMemory(store, conversation_id="support-8")

    async def failing_turn() -> None:
        async with memory.turn("Hello?", turn_number=1) as t:
            t.reply = "Hel"
            raise ModelDown

    with pytest.raises(ModelDown):
        await failing_turn()
    transcript = await load_transcript(store, "support-8")
    out = io.StringIO()
    render_transcript(transcript, out)
    assert f"{__name__}.ModelDown" in json.dumps(transcript.to_json())  # JSON: qualified
    assert "ABANDONED (ModelDown)" in out.getvalue()
    client = await _client(store)
    async with client:
        html = await (await client.get("/ui/conversation", params={"id": "support-8"})).text()
    assert '<span class="muted">ModelDown</span>' in html
    assert f"{__name__}.ModelDown" not in html


async def test_search_finds_entities_and_conversations(store: Any) -> None:
    await _seed(store)
    client = await _client(store)
    async with client:
        by_name = await (await client.get("/ui/api/search", params={"q": "Acme Corp"})).json()
        by_id = await (await client.get("/ui/api/search", params={"q": "support-7"})).json()
    assert "company" in {e["entity_type"] for e in by_name["entities"]}
    assert by_id["conversation_id"] == "support-7"


async def test_health_counts_charts_and_audits_on_demand(store: Any, tmp_path: Path) -> None:
    await _seed(store)
    client = await _client(store, outbox=tmp_path / "no-outbox.db")
    async with client:
        plain = await (await client.get("/ui/api/health")).json()
        audited = await (await client.get("/ui/api/health", params={"audit": "1"})).json()
        html = await (await client.get("/ui/health")).text()
    assert plain["stats"]["turns_by_status"] == {"abandoned": 1, "completed": 1}
    assert plain["audit"] is None
    assert sum(d["turns"] for d in plain["turns_per_day"]) == 2
    assert sum(d["abandoned"] for d in plain["turns_per_day"]) == 1
    assert audited["audit"]["turns"] == 2
    assert plain["outbox"] == {"missing": True, "path": str(tmp_path / "no-outbox.db")}
    assert "<svg" in html
    assert "Run the audit now" in html


async def test_health_chart_day_labels_never_overlap(store: Any) -> None:
    # 30 bars 22 px apart; a "MM-DD" label is wider than one bar, so labels stand a week
    # apart, counted back from the last day (which is always labelled).
    await _seed(store)
    client = await _client(store)
    async with client:
        data = await (await client.get("/ui/api/health")).json()
        html = await (await client.get("/ui/health")).text()
    labels = re.findall(r'<text x="(\d+)"[^>]*>(\d\d-\d\d)</text>', html)
    xs = [int(x) for x, _ in labels]
    assert len(xs) >= 4
    assert min(b - a for a, b in itertools.pairwise(xs)) >= 3 * 22
    assert labels[-1][1] == data["turns_per_day"][-1]["day"][5:]


async def test_missing_things_are_404_and_bad_parameters_400(store: Any) -> None:
    client = await _client(store)
    async with client:
        assert (await client.get("/ui/conversation", params={"id": "nope"})).status == 404
        assert (await client.get("/ui/api/entity", params={"id": "ent_nope"})).status == 404
        assert (await client.get("/ui/conversation")).status == 400
        bad = await client.get("/ui/api/conversations", params={"after": "no cursor"})
        assert bad.status == 400
        assert (await bad.json())["error"]["status"] == 400


async def test_every_answer_forbids_scripts_framing_and_caching(store: Any) -> None:
    client = await _client(store)
    async with client:
        for path in ("/ui/", "/ui/health", "/ui/api/conversations", "/ui/entity?id=x"):
            response = await client.get(path)
            csp = response.headers["Content-Security-Policy"]
            assert "default-src 'none'" in csp
            assert "script-src" not in csp
            assert response.headers["X-Frame-Options"] == "DENY"
            assert response.headers["Cache-Control"] == "no-store"


async def test_a_token_is_required_by_every_page_and_a_login_link_sets_a_cookie(
    store: Any,
) -> None:
    await _seed(store)
    client = await _client(store, token="s3cret-token", send_token=False)
    async with client:
        for path in ("/ui/", "/ui/api/conversations", "/ui/health", "/ui/static/ui.css"):
            assert (await client.get(path)).status == 401, path
        wrong = await client.get("/ui/", params={"token": "nope"})
        assert wrong.status == 401
        assert "s3cret" not in await wrong.text()
        header = {"Authorization": "Bearer s3cret-token"}
        assert (await client.get("/ui/api/conversations", headers=header)).status == 200
        login = await client.get("/ui/", params={"token": "s3cret-token"}, allow_redirects=False)
        assert login.status == 303
        assert "token" not in login.headers["Location"]
        # The client keeps the cookie: later pages need nothing else.
        assert (await client.get("/ui/health")).status == 200


async def test_pages_link_only_to_themselves_and_load_no_script(store: Any) -> None:
    await _seed(store)
    client = await _client(store)
    async with client:
        html = await (await client.get("/ui/conversation", params={"id": "support-7"})).text()
    assert "<script" not in html
    assert re.findall(r'href="([^"]+)"', html)
    for link in re.findall(r'href="([^"]+)"', html):
        assert link.startswith("/ui/"), link


async def test_conversation_list_pages_newest_first(store: Any) -> None:
    for n in range(30):
        memory = NeotomaMemory(store, conversation_id=f"c{n:02d}", platform="t")
        await memory.record_turn("q", "a", turn_id="t1", retrieve=False)
    client = await _client(store)
    async with client:
        first = await (await client.get("/ui/api/conversations")).json()
        after = {"after": first["next"]}
        second = await (await client.get("/ui/api/conversations", params=after)).json()
        html = await (await client.get("/ui/")).text()
        older = await (await client.get("/ui/", params=after)).text()
    assert (first["total"], len(first["conversations"]), len(second["conversations"])) == (
        30,
        25,
        5,
    )
    assert second["next"] is None
    shown = [c["conversation_id"] for c in first["conversations"] + second["conversations"]]
    assert sorted(shown) == [f"c{n:02d}" for n in range(30)]
    keys = [(c["last_activity"], c["conversation_id"]) for c in first["conversations"]]
    keys += [(c["last_activity"], c["conversation_id"]) for c in second["conversations"]]
    assert keys == sorted(keys, reverse=True)
    assert f'href="/ui/?{urllib.parse.urlencode(after)}"' in html
    assert 'href="/ui/"' in older
    assert "older" not in older.split("pager")[-1]


async def test_conversation_page_lists_tool_calls_and_links_their_arguments(store: Any) -> None:
    memory = NeotomaMemory(store, conversation_id="tools-1", platform="t")
    async with memory.turn("Find flights to Lisbon") as t:
        async with t.tool("search_flights", {"to": "LIS"}) as call:
            call.result = {"flights": 3}
        t.record_tool("book", args={"id": 7}, status="error", error_class="TimeoutError")
        t.reply = "Found 3 flights."
    client = await _client(store)
    async with client:
        data = await (await client.get("/ui/api/conversation", params={"id": "tools-1"})).json()
        html = await (await client.get("/ui/conversation", params={"id": "tools-1"})).text()
        [turn] = data["turns"]
        calls = {c["name"]: c for c in turn["tools"]}
        assert calls["search_flights"]["status"] == "ok"
        assert calls["book"]["status"] == "error"
        assert "search_flights" in html
        assert "book (error)" in html
        entity = await (
            await client.get("/ui/api/entity", params={"id": calls["search_flights"]["entity_id"]})
        ).json()
        health = await (await client.get("/ui/health")).text()
    assert "Tool calls" in health
    assert "search_flights" in health
    fields = entity["observations"][0]["fields"]
    assert fields["tool_name"] == "search_flights"
    assert "LIS" in json.dumps(fields)


@pytest.mark.parametrize(
    "proxy", ["Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-IP", "Via"]
)
async def test_no_forwarding_header_stands_in_for_the_token(store: Any, proxy: str) -> None:
    """The standalone view trusts no header for where a request comes from."""
    await _seed(store)
    client = await _client(store, token="s3cret-token", send_token=False)
    async with client:
        for value in ("127.0.0.1", "for=127.0.0.1", "203.0.113.9", "localhost"):
            answer = await client.get("/ui/api/conversations", headers={proxy: value})
            assert answer.status == 401, (proxy, value)
