"""The scripted demo stores what it says it stores (read back through the store)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from cli_support import cli, ok, serving
from turn_support import messages, targets, turn_record

from neotoma_agent.cli._demo_script import CONVERSATION_ID, run_demo
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


async def demo_output(path: Path | None) -> str:
    out = io.StringIO()
    await run_demo(None if path is None else str(path), out=out)
    return out.getvalue()


async def test_the_demo_records_a_conversation_with_edges_and_an_abandoned_turn(
    tmp_path: Path,
) -> None:
    path = tmp_path / "demo.db"
    text = await demo_output(path)
    for turn in range(1, 7):
        assert f"-- turn {turn} (t{turn})" in text
    assert "abandoned (DemoModelError)" in text
    assert "The conversation graph, read back from the store" in text

    async with EmbeddedStore.open(path) as store:
        statuses = {
            f"t{i}": (await turn_record(store, CONVERSATION_ID, f"t{i}"))["status"]
            for i in range(1, 7)
        }
        assert statuses == {
            "t1": "completed",
            "t2": "completed",
            "t3": "completed",
            "t4": "abandoned",
            "t5": "completed",
            "t6": "completed",
        }
        acme = await store.retrieve_entity_by_identifier("Acme Corp", entity_type="company")
        acme_id = acme.entities[0].id
        found = await store.retrieve_entity_by_identifier("demo", entity_type="conversation")
        conversation_id = next(
            e.id for e in found.entities if e.snapshot.get("conversation_id") == "demo"
        )
        stored = await messages(store, conversation_id)
        assert len(stored) == 12
        assert stored["demo:t4:assistant"]["content"] == "The Lisbon offsite for Acme Corp: day "
        # Later turns name entities stored earlier: retrieval finds them, edges appear.
        assert acme_id in await targets(store, stored["demo:t2"]["id"], "REFERS_TO")
        assert acme_id in await targets(store, stored["demo:t2:assistant"]["id"], "REFERS_TO")
        assert stored["demo:t3:assistant"]["content"].startswith("Here is a draft for")


async def test_running_the_demo_again_replays_instead_of_duplicating(tmp_path: Path) -> None:
    path = tmp_path / "demo.db"
    await demo_output(path)
    async with EmbeddedStore.open(path) as store:
        before = (await store.query_entities(limit=500)).total
    text = await demo_output(path)
    assert text.count("(replayed: this turn was already stored)") == 6
    async with EmbeddedStore.open(path) as store:
        assert (await store.query_entities(limit=500)).total == before


async def test_the_demo_defaults_to_a_temporary_store() -> None:
    text = await demo_output(None)
    assert "a temporary store" in text
    assert "t4 abandoned (DemoModelError)" in text


async def test_a_replayed_demo_reports_the_edges_the_store_keeps(tmp_path: Path) -> None:
    path = tmp_path / "demo.db"

    def edge_counts(text: str) -> list[str]:
        return [
            line.split("REFERS_TO")[0].strip()
            for line in text.splitlines()
            if "REFERS_TO edge" in line
        ]

    first = edge_counts(await demo_output(path))
    again = await demo_output(path)
    assert "replayed" in again
    # The second run's retrieval finds more (the entities exist now), but a replay writes
    # nothing: the report says what is stored, so the counts do not change.
    assert edge_counts(again) == first


def test_demo_runs_against_a_server_with_url(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    with serving(db, tmp_path) as url:
        first = ok(cli("demo", "--url", url, home=tmp_path))
        again = ok(cli("demo", "--url", url, home=tmp_path))
    assert f"conversation 'demo' in {url}" in first
    assert "-- turn 6 (t6)" in first
    assert "abandoned (DemoModelError)" in first
    assert f"neotoma-agent show demo --url {url}" in first
    assert "replayed" in again
    # The same graph as on a file: read the server's store back directly.
    local = ok(cli("demo", "--db", str(tmp_path / "local.db"), home=tmp_path))
    assert _stored_lines(first) == _stored_lines(local)


def _stored_lines(text: str) -> list[str]:
    # The per-turn "stored:" lines without ids and timings.
    return [
        re.sub(r"ent_[0-9a-f]{24}|[\d.]+ ms", "", line).split(" lookup(s)")[0]
        for line in text.splitlines()
        if "REFERS_TO edge" in line or line.strip().startswith("stored:")
    ]
