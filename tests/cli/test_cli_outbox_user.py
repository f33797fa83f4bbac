"""``outbox flush --user USER``: a user's outbox delivered as that user, and only so.

An outbox file is one user's (the first transport to open it binds it): flushing Alice's
queued turn without ``--user``, or as Bob, is one line of error naming no user and leaves
it queued; with ``--user`` Alice it lands in her memory, not the default user's.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from cli_support import assert_one_line_error, cli, ok

from neotoma_agent import EmbeddedStore, NeotomaMemory, OutboxTransport
from neotoma_agent._records.keys import key_phase
from neotoma_agent.exceptions import ConnectionLost
from neotoma_agent.testing import FaultyTransport

pytestmark = pytest.mark.one_backend

ALICE, BOB, MARK = "alice-Q8", "bob-Q8", "Zflushmark"


async def _queued(db: Path, outbox: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        down = FaultyTransport(store.for_user(ALICE)).fail(
            "store",
            ConnectionLost("down"),
            when=lambda m, a, kw: key_phase(kw["idempotency_key"]) == "assistant",
        )
        async with OutboxTransport(down, outbox, background=False) as queued:
            memory = NeotomaMemory(queued, conversation_id="support", close_timeout=5.0)
            async with memory.turn("hello", turn_id="t1") as t:
                t.reply = f"queued {MARK} reply"
            assert t.result.queued


def test_a_user_s_outbox_is_flushed_as_that_user_only(tmp_path: Path) -> None:
    db, outbox = tmp_path / "m.db", tmp_path / "outbox.db"
    anyio.run(_queued, db, outbox)
    store = ["--outbox", str(outbox), "--db", str(db)]
    for who in ([], ["--user", BOB]):
        run = cli("outbox", "flush", *store, *who, home=tmp_path)
        assert_one_line_error(run, "another user's")
        assert ALICE not in run.stderr
    status = json.loads(
        ok(cli("outbox", "status", "--outbox", str(outbox), "--json", home=tmp_path))
    )
    assert status["queued"] == 1

    ok(cli("outbox", "flush", *store, "--user", ALICE, home=tmp_path))
    found = json.loads(
        ok(cli("search", MARK, "--json", "--db", str(db), "--user", ALICE, home=tmp_path))
    )
    assert found["hits"]
    for who in ([], ["--user", BOB]):
        found = json.loads(ok(cli("search", MARK, "--json", "--db", str(db), *who, home=tmp_path)))
        assert found["hits"] == []
