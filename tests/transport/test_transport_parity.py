"""One history, two transports: the readers give the same answers on both.

The same scenario (turns that complete, raise, get cancelled mid-stream, replay, are
revised, and one left open and then closed by ``audit --repair``) runs on an embedded
store file and, over HTTP, against the dev server (a ``neotoma-agent serve`` subprocess on
127.0.0.1). ``show --json``, ``stats --json`` and ``audit --json`` (run as a user runs
them) and ``render_turn_report`` must then agree field by field, times and the store's
name aside: ids are derived from the same keys on both sides.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from cli_support import cli, ok, server_token, serving

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.qa import render_turn_report
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, RetryPolicy

pytestmark = pytest.mark.anyio

CONVERSATION = "parity"


@pytest.fixture
def anyio_backend() -> str:
    """HttpTransport runs on asyncio only."""
    return "asyncio"


class Boom(Exception):
    """The agent's failure in turn t2."""


async def _chunks(*parts: str) -> AsyncIterator[str]:
    for part in parts:
        await anyio.lowlevel.checkpoint()
        yield part


async def scenario(transport: Transport) -> list[str]:
    """Write the history; return the turn reports of the turns run to their end."""
    memory = NeotomaMemory(
        transport, conversation_id=CONVERSATION, platform="parity-test", conversation_title="P"
    )
    await memory.remember("company", name="Acme Corp", website="acme.com")
    reports = []
    async with memory.turn("What does Acme Corp make?", turn_id="t1", turn_number=1) as t:
        t.reply = "Anvils."
    reports.append(render_turn_report(t))
    with pytest.raises(Boom):
        async with memory.turn("And Globex?", turn_id="t2", turn_number=2):
            raise Boom
    with anyio.CancelScope() as scope:
        async with (
            memory.turn("Tell me a story about Acme Corp", turn_id="t3", turn_number=3) as t,
            aclosing(t.stream(_chunks("Once ", "upon ", "a ", "time"))) as stream,
        ):
            async for chunk in stream:
                if chunk == "a ":
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    async with memory.turn("What does Acme Corp make?", turn_id="t1", turn_number=1) as t:
        t.reply = "Anvils."  # a retried turn: replays
    assert t.result.replayed
    reports.append(render_turn_report(t))
    async with memory.turn(
        "What does Acme Corp make?", turn_id="t1", turn_number=1, revision=2
    ) as t:
        t.reply = "Anvils and rocket skates."
    reports.append(render_turn_report(t))
    await memory.open_turn("the process died here", turn_id="t4", turn_number=4)
    return reports


_VOLATILE = frozenset(("store", "duration_ms", "last_activity", "last_activity_at"))


def comparable(value: Any) -> Any:
    """``value`` without what differs between two runs: times and the store's name."""
    if isinstance(value, dict):
        return {
            k: comparable(v)
            for k, v in value.items()
            if k not in _VOLATILE and not k.endswith("_at")
        }
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def _read_back(where: list[str], home: Path) -> dict[str, Any]:
    repaired = cli("audit", "--repair", "--min-age", "0", *where, home=home)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    audit = cli("audit", "--json", "--min-age", "0", *where, home=home)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    return {
        "show": json.loads(ok(cli("show", CONVERSATION, "--json", *where, home=home))),
        "show_text": ok(cli("show", CONVERSATION, *where, home=home)),
        "stats": json.loads(ok(cli("stats", "--json", *where, home=home))),
        "audit": json.loads(audit.stdout),
    }


async def test_show_stats_and_audit_agree_on_the_embedded_store_and_over_http(
    tmp_path: Path,
) -> None:
    db = tmp_path / "embedded.db"
    async with EmbeddedStore.open(db) as store:
        embedded_reports = await scenario(store)
    embedded = await anyio.to_thread.run_sync(_read_back, ["--db", str(db)], tmp_path)

    with serving(tmp_path / "served.db", tmp_path) as url:
        token = server_token(url, tmp_path)
        async with HttpTransport(url, token=token, retry=RetryPolicy(backoff=False)) as http:
            http_reports = await scenario(http)
        served = await anyio.to_thread.run_sync(_read_back, ["--url", url], tmp_path)

    assert embedded_reports == http_reports
    for reader in ("show", "stats", "audit"):
        assert comparable(embedded[reader]) == comparable(served[reader]), reader
    text_embedded = embedded["show_text"].splitlines()
    assert text_embedded == served["show_text"].splitlines()

    # What the history holds, as the readers tell it (so that agreeing is not vacuous).
    turns = {t["turn_id"]: t for t in embedded["show"]["turns"]}
    assert embedded["show"]["platform"] == "parity-test"
    assert turns["t1"]["status"] == "completed"
    assert turns["t2"]["error_class"].endswith("Boom")
    assert not turns["t2"]["repaired"]
    assert turns["t3"]["messages"][1]["content"] == "Once upon a "
    assert turns["t3"]["error_class"] is not None
    assert turns["t4"]["status"] == "abandoned"
    assert turns["t4"]["repaired"]
    assert "turn 4 [t4] ABANDONED (repaired by audit: the reply was never stored)" in (
        text_embedded
    )
    assert "turn 2 [t2] ABANDONED (Boom)" in text_embedded
    stats = embedded["stats"]
    assert (stats["abandoned_turns"], stats["repaired_turns"], stats["partial"]) == (3, 1, False)
    reasons = {f["turn_id"]: f["reason"] for f in embedded["audit"]["findings"]}
    assert reasons["t4"] == "orphan_found_by_audit"
    assert reasons["t2"].endswith("Boom")
    assert embedded["audit"]["clean"] is True
