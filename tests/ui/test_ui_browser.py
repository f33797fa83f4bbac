"""The web view in a real browser: headless Chromium loads every page, follows the links,
and no script from the hostile corpus runs (``slow``: ``nox -s browser`` runs it).

Chromium comes from Debian's packages (``apt-get install chromium``); the test skips, saying
so, where it is not installed. Each page is loaded with ``--dump-dom``, which prints the
DOM after the page's scripts would have run: every hostile payload, if it ran, marks the
document (``data-pwned``), so a clean DOM means none did. Screenshots of each kind of page
go to ``$NEOTOMA_UI_SCREENSHOTS`` (the README's pictures) or the test's temporary folder.
"""

from __future__ import annotations

import html.parser
import os
import shutil
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from aiohttp import web
from server_support import TOKEN

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.server import serving
from neotoma_agent.ui import create_ui_app, mount_ui

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
_MARK = "document.documentElement.setAttribute('data-pwned', '1')"
PAYLOADS = (
    f"<script>{_MARK}</script>",
    f'"><img src=x onerror="{_MARK}">',
    f'<svg onload="{_MARK}"></svg>',
    f'<a href="javascript:{_MARK}">click</a>',
    f"' autofocus onfocus='{_MARK}",
    "\u202eevil\u202c",
)


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[str]:
    if CHROMIUM is None:
        pytest.skip("no chromium here (Debian: apt-get install chromium)")
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        memory = NeotomaMemory(store, conversation_id="support-7", platform="helpdesk")
        await memory.remember("company", name="Acme Corp", website="https://acme.example")
        for n, text in enumerate(PAYLOADS, 1):
            await memory.remember("company", name=f"Evil {n}", website=f"javascript:{_MARK}")
            await memory.record_turn(
                f"About Acme Corp: {text}", text, turn_id=f"t{n}", turn_number=n
            )

        async def failing_turn() -> None:
            async with memory.turn("And the invoices?", turn_number=len(PAYLOADS) + 1) as t:
                t.reply = "Looking th"
                raise RuntimeError("model went away")

        with pytest.raises(RuntimeError):
            await failing_turn()
        app = web.Application()
        mount_ui(app, create_ui_app(store, token=TOKEN))
        async with serving(app) as url:
            yield url


def _page(url: str) -> str:
    """``url`` as a login link: the view moves the token to a cookie and redirects back."""
    return url + ("&" if "?" in url else "?") + urllib.parse.urlencode({"token": TOKEN})


async def _browser(*args: str, profile: Path) -> str:
    assert CHROMIUM is not None
    result = await anyio.run_process(
        [CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", *args], check=False
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout.decode()


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.pwned = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "html" and "data-pwned" in names:
            self.pwned = True
        if tag == "a" and names.get("href"):
            self.links.append(names["href"] or "")


async def test_every_page_loads_in_chromium_and_no_stored_script_runs(
    site: str, tmp_path: Path
) -> None:
    origin = urllib.parse.urlsplit(site).netloc
    todo, seen = [f"{site}/ui/", f"{site}/ui/health?audit=1"], set()
    while todo and len(seen) < 40:
        url = todo.pop(0)
        if url in seen:
            continue
        seen.add(url)
        dom = await _browser("--dump-dom", _page(url), profile=tmp_path / "profile")
        parser = _Links()
        parser.feed(dom)
        assert not parser.pwned, url
        assert "<html" in dom
        for link in parser.links:
            target = urllib.parse.urljoin(url, link)
            parts = urllib.parse.urlsplit(target)
            assert parts.scheme in ("http", "https"), (url, link)
            if parts.netloc == origin:
                todo.append(target.split("#")[0])
    assert len(seen) >= 8  # the list, the conversation, entities, search, health


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("NEOTOMA_UI_SCREENSHOTS", tmp_path / "shots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


async def test_screenshots_of_each_page(site: str, shots: Path, tmp_path: Path) -> None:
    out = shots
    found = await _browser("--dump-dom", _page(f"{site}/ui/search?q=Acme"), profile=tmp_path / "p")
    parser = _Links()
    parser.feed(found)
    entity = next(link for link in parser.links if "/ui/entity?id=" in link)
    pages = {
        "conversations": "/ui/",
        "conversation": "/ui/conversation?id=support-7",
        "entity": entity,
        "health": "/ui/health?audit=1",
    }
    for name, path in pages.items():
        shot = out / f"ui-{name}.png"
        await _browser(
            f"--screenshot={shot}",
            "--window-size=1100,820",
            _page(f"{site}{path}"),
            profile=tmp_path / "p",
        )
        assert shot.stat().st_size > 5_000, name
