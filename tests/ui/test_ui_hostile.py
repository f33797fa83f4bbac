"""Stored text is hostile: every page renders a corpus of attacks inert.

The texts go in through the real write path (turns, remembered entities) and come out
through the real pages; an HTML parser then checks what a browser would build: no element
but the templates' own, no event-handler attribute, no link that is not ours or http(s),
and every control or bidi-override character shown as a visible escape.
"""

from __future__ import annotations

import html.parser
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from server_support import TOKEN

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.ui import create_ui_app, mount_ui
from neotoma_agent.ui._html import render, visible

pytestmark = pytest.mark.anyio

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "' onmouseover='alert(1)",
    "</textarea></pre></div><iframe src=//evil.example>",
    "javascript:alert(document.cookie)",
    '<a href="javascript:alert(1)">click</a>',
    "{{ 7*7 }} {% raw %}",
    "\u202eevil\u202c \u2066isolate\u2069",
    "\x1b]0;title\x07 \x1b[2J \r overwritten",
    "<svg onload=alert(1)>",
    "<style>body{display:none}</style>",
    "&lt;script&gt; already escaped &amp;",
)

#: the elements the templates themselves use
_OURS = frozenset(
    "html head meta title link body header nav a form input main h1 h2 h3 p span div table "
    "thead tbody tr th td caption section details summary pre ul li code svg g rect text".split()
)


class _Inspector(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.bad: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name.startswith("on"):
                self.bad.append(f"{tag}[{name}]")
            ours = value is not None and value.startswith(("/ui", "https://"))
            if name in ("href", "src", "action") and value is not None and not ours:
                self.bad.append(f"{tag}[{name}={value}]")


def _inspect(page: str) -> _Inspector:
    inspector = _Inspector()
    inspector.feed(page)
    return inspector


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="<script>c</script>", platform="<b>p</b>")
        for n, text in enumerate(HOSTILE, 1):
            await memory.remember("company", name=f"Evil {n}", website=text, notes=text)
            await memory.record_turn(text, text, turn_id=f"t{n}", turn_number=n, retrieve=False)
        await memory.record_turn("big", "x" * 10_000_000, turn_id="big", retrieve=False)
        app = web.Application()
        mount_ui(app, create_ui_app(store, token=TOKEN))
        async with TestClient(TestServer(app), headers={"Authorization": f"Bearer {TOKEN}"}) as c:
            yield c


async def test_hostile_texts_render_inert_on_every_page(
    client: TestClient[web.Request, web.Application],
) -> None:
    pages = ["/ui/", "/ui/health?audit=1"]
    pages.append("/ui/conversation?id=%3Cscript%3Ec%3C%2Fscript%3E")
    found = await (await client.get("/ui/api/search", params={"q": "Evil"})).json()
    assert len(found["entities"]) >= len(HOSTILE)
    pages += [f"/ui/entity?id={e['entity_id']}" for e in found["entities"]]
    pages.append("/ui/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    for path in pages:
        response = await client.get(path)
        assert response.status == 200, path
        page = await response.text()
        inspector = _inspect(page)
        assert inspector.tags <= _OURS, (path, inspector.tags - _OURS)
        assert not inspector.bad, (path, inspector.bad)
        for raw in ("\u202e", "\u2066", "\x1b", "\x07", "\r"):
            assert raw not in page, (path, repr(raw))
    conversation = await (await client.get(pages[2])).text()
    assert "\\u202eevil" in conversation  # shown, not obeyed
    assert "{{ 7*7 }}" in conversation  # stored text is never a template


async def test_ten_megabyte_message_renders_whole_and_inert(
    client: TestClient[web.Request, web.Application],
) -> None:
    data = await (
        await client.get("/ui/api/conversation", params={"id": "<script>c</script>"})
    ).json()
    big = next(t for t in data["turns"] if t["turn_id"] == "big")
    assert len(big["messages"][1]["content"]) == 10_000_000


def test_lone_surrogates_a_foreign_writer_stored_are_shown_not_fatal() -> None:
    text = "before \ud800 after \udfff"
    assert visible(text) == "before \\ud800 after \\udfff"
    page = render("error.html", "/ui", {"status": 400, "message": text, "query": ""})
    page.encode("utf-8")  # would raise on a lone surrogate
    assert "\\ud800" in page


def test_links_only_for_http_urls() -> None:
    from neotoma_agent.ui._html import href

    assert href("https://acme.example/x?y=1") == "https://acme.example/x?y=1"
    assert href("http://acme.example") == "http://acme.example"
    for bad in (
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "java\tscript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "//evil.example",
        "https:",
        "vbscript:msgbox",
        "https://acme.example/\u202e",
        None,
        42,
    ):
        assert href(bad) is None, bad
