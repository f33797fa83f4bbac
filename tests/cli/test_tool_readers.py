"""Tool calls read back by ``show`` (text and ``--json``), ``stats`` and the audit."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_support import cli, ok
from turn_support import db_path, memory, store

from neotoma_agent import EmbeddedStore
from neotoma_agent.cli._show import load_transcript, render_transcript
from neotoma_agent.cli._stats import collect_stats, render_stats
from neotoma_agent.qa import FindingKind, audit
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio

AT = "2026-12-01T10:00:00.{:03d}Z"


async def _turns_with_tools(store: Transport) -> None:
    m = memory(store, conversation_id="trip")
    async with m.turn("Flights to Lisbon?", turn_id="t1") as t:
        t.record_tool(
            "search_flights",
            args={"to": "LIS", "note": "line\nbreak \x1b[31m"},
            result=[{"id": 1}],
            invoked_at=AT.format(1),
            duration_ms=12.5,
        )
        t.record_tool(
            "book", args={"id": 1}, status="error", error_class="app.Full", invoked_at=AT.format(2)
        )
        t.reply = "Could not book."
    with pytest.raises(KeyboardInterrupt):
        async with m.turn("Try again", turn_id="t2") as t, t.tool("book", {"id": 1}):
            raise KeyboardInterrupt


async def test_show_prints_the_calls_under_their_turn(store: Transport) -> None:
    await _turns_with_tools(store)
    transcript = await load_transcript(store, "trip")
    out = io.StringIO()
    render_transcript(transcript, out)
    text = out.getvalue()
    assert (
        '  tool search_flights: ok, 12.5 ms, args {"to":"LIS","note":"line\\nbreak \\u001b[31m"}'
        in text
    )
    assert '  tool book: error, Full, args {"id":1}' in text
    assert "\x1b" not in text  # escaped, never a raw control sequence
    turn2 = text[text.index("turn 2") :]
    assert "tool book: cancelled" in turn2
    data = transcript.to_json()
    [t1, t2] = data["turns"]
    assert [c["name"] for c in t1["tools"]] == ["search_flights", "book"]
    assert t1["tools"][0]["args"] == {"to": "LIS", "note": "line\nbreak \x1b[31m"}
    assert t1["tools"][0]["result"] == [{"id": 1}]
    assert t1["tools"][1]["error_class"] == "app.Full"
    assert t2["tools"][0]["status"] == "cancelled"
    json.dumps(data)  # plain JSON


async def test_stats_counts_calls_by_tool_and_status(store: Transport) -> None:
    await _turns_with_tools(store)
    stats = await collect_stats(store)
    data = stats.to_json()
    assert data["tool_calls"] == 3
    assert data["tool_calls_by_tool"] == {
        "book": {"cancelled": 1, "error": 1},
        "search_flights": {"ok": 1},
    }
    out = io.StringIO()
    render_stats(stats, out, "test")
    assert "tool calls: 3\n" in out.getvalue()
    assert "  book            1 cancelled, 1 error\n" in out.getvalue()


async def test_audit_reports_a_tool_call_whose_turn_is_missing(store: Transport) -> None:
    await _turns_with_tools(store)
    assert (await audit(store, min_age=0)).clean
    stray = await store.store(
        [
            {
                "entity_type": "tool_invocation",
                "turn_key": "trip:gone",
                "tool_name": "search",
                "invoked_at": AT.format(9),
            }
        ],
        idempotency_key="another-writer-1",
    )
    report = await audit(store, min_age=0)
    [finding] = report.problems
    assert finding.kind is FindingKind.TOOL_CALL_WITHOUT_TURN
    assert (finding.conversation_id, finding.turn_id) == ("trip", "gone")
    assert finding.tool_invocation_ids == (stray.entity_id(0),)
    assert not report.clean
    scoped = await audit(store, conversation_id="trip", min_age=0)
    assert [f.kind for f in scoped.problems] == [FindingKind.TOOL_CALL_WITHOUT_TURN]
    other = await audit(store, conversation_id="elsewhere", min_age=0)
    assert other.problems == ()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_show_json_carries_the_calls_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as embedded:
        await _turns_with_tools(embedded)
    data = json.loads(ok(cli("show", "trip", "--json", "--db", str(path), home=tmp_path)))
    assert [c["name"] for c in data["turns"][0]["tools"]] == ["search_flights", "book"]
    stats = json.loads(ok(cli("stats", "--json", "--db", str(path), home=tmp_path)))
    assert stats["tool_calls"] == 3
