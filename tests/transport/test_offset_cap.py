"""A real server's offset cap, on the embedded store and the dev server: refused as the
server refuses it, and every listing degrades to an explicit partial result.

A plain listing pages by cursor (no cap); a search offers no cursor (as on a server), so
``audit --conversation`` pages a search by offset and, past 2,000, must say "partial".
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from cli_support import cli, ok, serving

from neotoma_agent.exceptions import ValidationError
from neotoma_agent.qa import _audit as audit_module
from neotoma_agent.qa import audit
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

TURNS = 2_150  # more turn records than a 2,000-deep offset reaches with pages of 100


async def _seed(store: EmbeddedStore, conversation: str = "deep") -> None:
    records = [
        {"entity_type": "conversation_turn", "session_id": conversation, "turn_id": f"t{n:05d}"}
        for n in range(TURNS)
    ]
    for start in range(0, TURNS, 500):
        await store.store(records[start : start + 500], idempotency_key=f"seed-{start}")


async def test_a_query_offset_past_2000_is_refused_as_a_server_refuses_it(
    tmp_path: Path,
) -> None:
    async with EmbeddedStore.open(tmp_path / "s.db") as store:
        assert (await store.request("entities/query", {"offset": 2000}))["offset"] == 2000
        with pytest.raises(ValidationError) as caught:
            await store.request("entities/query", {"offset": 2001})
    body = caught.value.body
    assert (caught.value.status, body["error_code"]) == (400, "VALIDATION_INVALID_FORMAT")
    (issue,) = body["details"]["issues"]
    assert issue["path"] == ["offset"]
    assert issue["params"]["code"] == "ERR_OFFSET_TOO_DEEP"


async def test_a_search_offers_no_cursor_and_a_listing_does(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "s.db") as store:
        await _seed(store)
        listing = await store.query_entities(entity_type="conversation_turn", limit=100)
        search = await store.query_entities(
            entity_type="conversation_turn", search="deep", limit=100
        )
    assert listing.next_cursor is not None
    assert search.next_cursor is None
    assert "next_cursor" not in search.raw


async def test_an_audit_that_pages_a_search_past_the_cap_is_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_module, "_PAGE", 100)
    async with EmbeddedStore.open(tmp_path / "s.db") as store:
        await _seed(store)
        scoped = await audit(store, conversation_id="deep", min_age=0)
        everything = await audit(store, min_age=0)
    assert scoped.partial
    assert not scoped.clean
    assert scoped.to_json()["partial"] is True
    assert scoped.turns == 2_100  # offsets 0..2,000 read, 2,100 refused
    assert not everything.partial  # a plain listing goes by cursor: no cap
    assert everything.turns == TURNS


def test_stats_and_audit_over_the_dev_server_page_by_cursor_past_the_cap(
    tmp_path: Path,
) -> None:

    db = tmp_path / "s.db"

    async def seed() -> None:
        async with EmbeddedStore.open(db) as store:
            await _seed(store)

    anyio.run(seed)
    with serving(db, tmp_path) as url:
        stats = json.loads(ok(cli("stats", "--json", "--url", url, home=tmp_path)))
        checked = cli("audit", "--json", "--min-age", "0", "--url", url, home=tmp_path)
    assert (stats["turns"], stats["partial"]) == (TURNS, False)
    report = json.loads(checked.stdout)
    assert report["partial"] is False
    assert report["turns"] == TURNS
