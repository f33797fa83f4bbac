"""The outbox: a close the server could not take is queued durably and delivered exactly once.

Against real parts: a dev server on 127.0.0.1 that the tests stop and start again on the same
port, real SQLite outbox files, and child processes killed with SIGKILL (tests/outbox_child.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from cli_support import cli
from outbox_child import entry
from outbox_support import FAST, Server, outbox_over_http, running_server
from paths_support import TESTS
from server_support import TOKEN

from neotoma_agent import (
    OutboxError,
    OutboxFullError,
    Transport,
    TurnCloseError,
    TurnState,
    ValidationError,
    outbox_status,
)
from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.exceptions import IdempotencyMismatchError, TransportError
from neotoma_agent.transport._outbox import SCHEMA_VERSION, Outbox, expected_result
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport, flush_outbox
from neotoma_agent.transport.outbox import OutboxTransport

pytestmark = pytest.mark.anyio

CHILD = TESTS / "outbox_child.py"
REPLY = "The reply the user already saw."


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp runs on asyncio only."""
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with running_server() as srv:
        yield srv


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """The outbox file."""
    return tmp_path / "outbox.db"


Outboxed = Callable[..., OutboxTransport]


@pytest.fixture
def outboxed(server: Server, box: Path) -> Outboxed:
    """The transport of these tests: an outbox at ``box`` over HTTP to ``server``, no
    background delivery unless asked (``background=True, poll=...``; ``max_entries=...``)."""
    return functools.partial(outbox_over_http, server.url, box)


def memory(transport: Transport, conversation: str = "chat-1") -> NeotomaMemory:
    return NeotomaMemory(transport, conversation_id=conversation, platform="outbox-test")


async def until(condition: Callable[[], bool], what: str) -> None:
    """Check ``condition`` every 20 ms until it holds; AssertionError naming ``what`` if it
    does not within 10 s."""
    deadline = anyio.current_time() + 10
    while not condition():
        assert anyio.current_time() < deadline, f"not seen within 10 s: {what}"
        await anyio.sleep(0.02)


async def observations(store: EmbeddedStore, entity_id: str) -> int:
    return len(await store.list_observations(entity_id))


async def turn_with_server_stopping(server: Server, transport: Transport) -> Any:
    """One turn whose server goes away while the body runs; its result."""
    async with memory(transport).turn("Tell me about Acme Corp", turn_id="t1") as t:
        await server.stop()
        t.reply = REPLY
    return t.result


async def abandon_with_server_stopping(server: Server, turn: Any) -> None:
    async with turn as t:
        t.reply = "half a rep"
        await server.stop()
        raise KeyError("boom")


# --- queued when the server is unreachable ------------------------------------------------


async def test_without_an_outbox_the_reply_is_lost(server: Server) -> None:
    # What issue 16 is about: the closing store fails, the reply the user saw is not stored.
    async with HttpTransport(server.url, token=TOKEN, retry=FAST) as transport:
        with pytest.raises(TurnCloseError) as caught:
            await turn_with_server_stopping(server, transport)
    # The error says how not to lose it next time, and never quotes it.
    assert "OutboxTransport(transport, PATH)" in str(caught.value)
    assert REPLY not in str(caught.value)


async def test_stopped_server_queues_the_reply_and_the_turn_ends_normally(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with outboxed() as transport:
            result = await turn_with_server_stopping(server, transport)
    assert result.queued
    assert result.status is TurnState.COMPLETED
    assert result.stored_status == "completed"
    assert result.assistant_message_id is not None  # computed locally, as the server will
    closed = [e for e in logs if e["event"] == "turn.closed"]
    assert closed
    assert closed[0]["log_level"] == "info"  # queued is safe on disk: not a warning
    assert closed[0]["queued"] is True
    assert REPLY not in json.dumps([{k: str(v) for k, v in e.items()} for e in logs])
    status = outbox_status(box)
    assert (status.queued, status.dead) == (1, 0)
    assert [lane.lane for lane in status.lanes] == ["chat-1"]


async def test_restarted_server_gets_the_queued_reply_exactly_once(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        result = await turn_with_server_stopping(server, transport)
        await server.start()
        first = await transport.flush()
        again = await transport.flush()
    assert (first.delivered, first.remaining) == (1, 0)
    assert (again.delivered, again.remaining) == (0, 0)
    assert result.assistant_message_id is not None
    snapshot = await server.store.get_entity_snapshot(result.assistant_message_id)
    assert snapshot.snapshot["content"] == REPLY
    assert await observations(server.store, result.assistant_message_id) == 1
    assert server.keys.count(server.keys[-1]) == 1
    assert outbox_status(box).queued == 0


async def test_background_task_delivers_once_the_server_is_back(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed(background=True, poll=0.02) as transport:
        result = await turn_with_server_stopping(server, transport)
        # a delivery round fails while it is down (the queueing itself records no error)
        await until(lambda: outbox_status(box).last_error is not None, "a failed delivery")
        await server.start()
        await until(lambda: outbox_status(box).queued == 0, "the background delivery")
    assert outbox_status(box).queued == 0
    assert result.assistant_message_id is not None
    assert await observations(server.store, result.assistant_message_id) == 1


async def test_queued_close_is_delivered_at_the_next_open(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        result = await turn_with_server_stopping(server, transport)
    await server.start()
    async with outboxed(background=True, poll=0.02):
        await until(lambda: outbox_status(box).queued == 0, "the background delivery")
    assert outbox_status(box).queued == 0
    assert result.assistant_message_id is not None
    assert await observations(server.store, result.assistant_message_id) == 1


async def test_abandoned_record_is_queued_and_the_error_goes_on(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        t = memory(transport).turn("Tell me about Acme Corp", turn_id="t1")
        with pytest.raises(KeyError):
            await abandon_with_server_stopping(server, t)
        await server.start()
        assert (await transport.flush()).delivered == 1
    assert t.result.queued
    assert t.result.status is TurnState.ABANDONED
    assert t.result.stored_status == "abandoned"
    assert t.result.turn_record_id is not None
    record = await server.store.get_entity_snapshot(t.result.turn_record_id)
    assert record.snapshot["status"] == "abandoned"


async def test_the_deprecated_outbox_argument_still_queues_and_delivers(
    server: Server, box: Path
) -> None:
    # HttpTransport(outbox=...) was 0.2's spelling of the wrapper: kept until 0.4, warning.
    with pytest.warns(DeprecationWarning, match=r"OutboxTransport\(HttpTransport\(url\), path"):
        transport = HttpTransport(
            server.url, token=TOKEN, retry=FAST, outbox=box, outbox_max_entries=5, outbox_poll=60
        )
    with pytest.warns(DeprecationWarning, match="path on the OutboxTransport"):
        assert transport.outbox == str(box)
    async with transport:
        result = await turn_with_server_stopping(server, transport)
        assert result.queued
        assert outbox_status(box).queued == 1
        await server.start()
        with pytest.warns(DeprecationWarning, match=r"flush\(\) on the OutboxTransport"):
            done = await transport.flush_outbox()
    # delivered by this flush or by the background delivery its wake-up started: once
    assert (done.remaining, outbox_status(box).queued) == (0, 0)
    assert result.assistant_message_id is not None
    assert await observations(server.store, result.assistant_message_id) == 1


# --- never queued ---------------------------------------------------------------------------


async def test_a_4xx_is_never_queued(server: Server, box: Path, outboxed: Outboxed) -> None:
    refusal = {"error_code": "VALIDATION_INVALID_FORMAT", "message": "no"}
    server.refuse["conversation-chat-1-t1-assistant"] = (400, refusal)
    async with outboxed() as transport:
        with pytest.raises(TurnCloseError) as caught:
            async with memory(transport).turn("Tell me about Acme Corp", turn_id="t1") as t:
                t.reply = REPLY
    assert isinstance(caught.value.__cause__, ValidationError)
    assert "outbox" not in str(caught.value)  # an outbox would not have kept it either
    assert not t.result.queued
    assert t.result.status is TurnState.FAILED
    assert outbox_status(box).queued == 0


async def test_a_mismatch_is_never_queued(server: Server, box: Path, outboxed: Outboxed) -> None:
    async with outboxed() as transport:
        for reply in ("one reply", "another reply"):
            try:
                async with memory(transport).turn("Tell me", turn_id="t1") as t:
                    t.reply = reply
            except IdempotencyMismatchError:
                assert reply == "another reply"
    assert outbox_status(box).queued == 0


async def test_enter_stays_store_first_while_the_server_is_down(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        await turn_with_server_stopping(server, transport)
        with pytest.raises(TransportError):
            async with memory(transport).turn("And Globex?", turn_id="t2"):
                pytest.fail("the body must not run")
    assert outbox_status(box).queued == 1  # the earlier close, and nothing of t2


# --- order per conversation -----------------------------------------------------------------


async def test_next_turn_waits_behind_the_queued_close(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        await turn_with_server_stopping(server, transport)
        await server.start()
        server.keys.clear()
        async with memory(transport).turn("And Globex?", turn_id="t2") as t:
            t.reply = "Globex too."
    assert [k.rsplit("-", 1)[0] for k in server.keys] == [
        "conversation-chat-1-t1-assistant",
        "conversation-chat-1-t2-user",
        "conversation-chat-1-t2-assistant",
    ]
    assert t.result.completed
    assert not t.result.queued


async def test_a_close_queues_behind_its_conversations_queued_close(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    reply2 = "the second reply"
    async with outboxed() as transport:
        mem = memory(transport)
        async with mem.turn("one", turn_id="t1") as t1:
            async with mem.turn("two", turn_id="t2") as t2:
                t2.reply = reply2
                await server.stop()
            t1.reply = REPLY
        # t2 closed first (queued), so t1's close, queued behind it, goes after it.
        assert t1.result.queued
        assert t2.result.queued
        await server.start()
        server.keys.clear()
        assert (await transport.flush()).delivered == 2
    assert [k.rsplit("-", 1)[0] for k in server.keys] == [
        "conversation-chat-1-t2-assistant",
        "conversation-chat-1-t1-assistant",
    ]


async def test_a_refused_delivery_is_kept_dead_and_frees_its_lane(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        await turn_with_server_stopping(server, transport)
        await server.start()
        server.refuse["conversation-chat-1-t1-assistant"] = (
            400,
            {"error_code": "VALIDATION_INVALID_FORMAT", "message": "no"},
        )
        done = await transport.flush()
        async with memory(transport).turn("And Globex?", turn_id="t2") as t:
            t.reply = "fine"
    assert (done.delivered, done.dead, done.remaining) == (0, 1, 0)
    assert t.result.completed
    status = outbox_status(box)
    assert (status.queued, status.dead) == (0, 1)
    assert status.last_error == "ValidationError 400 VALIDATION_INVALID_FORMAT"
    assert "1 dead" in status.render()


# --- the file -----------------------------------------------------------------------------


def test_outbox_file_is_private(box: Path) -> None:
    Outbox(box).close()
    assert stat.S_IMODE(box.stat().st_mode) == 0o600


def test_newer_schema_is_refused(box: Path) -> None:
    Outbox(box).close()
    with sqlite3.connect(box) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(OutboxError, match="newer"):
        Outbox(box)


def test_a_full_outbox_fails_loudly(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.db", max_entries=2)
    try:
        outbox.append("c", "store", "k1", {"idempotency_key": "k1"})
        outbox.append("c", "store", "k2", {"idempotency_key": "k2"})
        # An identical entry is a replay, not a new entry: it fits.
        outbox.append("c", "store", "k2", {"idempotency_key": "k2"})
        with pytest.raises(OutboxFullError):
            outbox.append("c", "store", "k3", {"idempotency_key": "k3"})
        assert outbox.count() == 2
    finally:
        outbox.close()


async def test_a_full_outbox_makes_the_close_fail(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed(max_entries=1) as tr:
        await turn_with_server_stopping(server, tr)
        await server.start()
        busy = (503, {"error": {"code": "X", "message": "down"}})
        server.refuse["conversation-chat-2-t1-assistant"] = busy
        with pytest.raises(TurnCloseError) as caught:
            async with memory(tr, "chat-2").turn("x", turn_id="t1") as t:
                t.reply = "y"
    assert isinstance(caught.value.__cause__, OutboxFullError)


def test_status_reports_counts_age_and_lanes_as_json(box: Path) -> None:
    with pytest.raises(FileNotFoundError):
        outbox_status(box)
    outbox = Outbox(box)
    outbox.append("a", "store", "k1", {"idempotency_key": "k1"})
    outbox.append("b", "store", "k2", {"idempotency_key": "k2"})
    outbox.append("a", "store", "k3", {"idempotency_key": "k3"})
    outbox.close()
    shape = outbox_status(box).to_json()
    assert shape["queued"] == 3
    assert shape["dead"] == 0
    assert shape["oldest_age_s"] is not None
    assert shape["oldest_age_s"] >= 0
    assert [(c["conversation_id"], c["queued"]) for c in shape["conversations"]] == [
        ("a", 2),
        ("b", 1),
    ]
    assert json.loads(json.dumps(shape)) == shape
    assert "3 queued" in outbox_status(box).render()


async def test_flush_function_delivers_a_file(
    server: Server, tmp_path: Path, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        await turn_with_server_stopping(server, transport)
    await server.start()
    done = await flush_outbox(box, server.url, TOKEN, retry=FAST)
    assert (done.delivered, done.remaining) == (1, 0)
    with pytest.raises(FileNotFoundError):
        await flush_outbox(tmp_path / "missing.db", server.url)


# --- crashes and two processes ---------------------------------------------------------------


async def run_child(*args: str, kill_on: str | None = None, server: Server | None = None) -> Any:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    if kill_on is not None:
        assert server is not None

        def kill(key: str) -> None:
            if key.startswith(kill_on):
                os.kill(proc.pid, signal.SIGKILL)

        server.after_commit = kill
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    if server is not None:
        server.after_commit = None
    return proc.returncode, out.decode(), err.decode()


async def test_kill9_after_queueing_is_delivered_at_next_open(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    busy = (503, {"error": {"code": "ERR_UNAVAILABLE", "message": "down"}})
    server.refuse["conversation-outbox-conv-t1-assistant"] = busy
    code, out, err = await run_child("turn", server.url, str(box))
    assert code == -signal.SIGKILL, (out, err)
    assert out.startswith("queued ")
    message_id = out.split()[1]
    del server.refuse["conversation-outbox-conv-t1-assistant"]
    async with outboxed(background=True, poll=0.02):
        await until(lambda: outbox_status(box).queued == 0, "the background delivery")
    assert outbox_status(box).queued == 0
    snapshot = await server.store.get_entity_snapshot(message_id)
    assert snapshot.snapshot["content"] == "The reply the user already saw."
    assert await observations(server.store, message_id) == 1


async def test_kill9_during_delivery_writes_no_duplicate(
    server: Server, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        result = await turn_with_server_stopping(server, transport)
    await server.start()
    # The server commits the delivered store, then the client dies before removing it.
    code, out, err = await run_child(
        "flush", server.url, str(box), kill_on="conversation-chat-1-t1-assistant", server=server
    )
    assert code == -signal.SIGKILL, (out, err)
    assert outbox_status(box).queued == 1
    done = await flush_outbox(box, server.url, TOKEN, retry=FAST)
    assert done.delivered == 1
    assert result.assistant_message_id is not None
    assert await observations(server.store, result.assistant_message_id) == 1
    assert result.turn_record_id is not None
    # open, then completed: the re-delivery was a replay
    assert await observations(server.store, result.turn_record_id) == 2


@pytest.mark.slow  # about 5 s: four child processes
async def test_two_processes_share_one_outbox_without_loss_or_duplicates(
    server: Server, box: Path
) -> None:
    down = "http://127.0.0.1:9"  # discard port: nothing listens, connections are refused
    n = 12
    queued = await asyncio.gather(
        *(run_child("queue", down, str(box), tag, str(n)) for tag in "ab")
    )
    assert [q[0] for q in queued] == [0, 0], queued
    assert outbox_status(box).queued == 2 * n
    with sqlite3.connect(box) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = db.execute("SELECT lane, idempotency_key FROM entries ORDER BY id").fetchall()
    db.close()
    flushed = await asyncio.gather(*(run_child("flush", server.url, str(box)) for _ in "ab"))
    assert [f[0] for f in flushed] == [0, 0], flushed
    assert sum(json.loads(f[1])["delivered"] for f in flushed) >= 2 * n
    assert outbox_status(box).queued == 0
    # Every key reached the store; a second delivery of one was a replay (one observation).
    assert set(server.keys) == {key for _, key in rows}
    for tag in "ab":
        for i in range(n):
            _, entity, _ = entry(tag, i)
            entity_id = expected_result([entity]).entity_id(0)
            assert await observations(server.store, entity_id) == 1
    # Per lane, stores first reached the server in insertion order.
    first_seen = list(dict.fromkeys(server.keys))
    for lane in {lane for lane, _ in rows}:
        inserted = [key for ln, key in rows if ln == lane]
        assert [k for k in first_seen if k in inserted] == inserted


# --- the command line -----------------------------------------------------------------------


async def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    # In a worker thread: the command runs its own event loop, and the test's server keeps
    # serving in this one.
    env = {"NEOTOMA_TOKEN": TOKEN}
    return await anyio.to_thread.run_sync(functools.partial(cli, *args, home=home, env=env))


async def test_outbox_status_and_flush_on_the_command_line(
    server: Server, tmp_path: Path, box: Path, outboxed: Outboxed
) -> None:
    async with outboxed() as transport:
        assert (await turn_with_server_stopping(server, transport)).queued
    status = await _cli("outbox", "status", "--outbox", str(box), home=tmp_path)
    assert status.returncode == 0, status.stderr
    assert ": 1 queued, 0 dead" in status.stdout
    assert REPLY not in status.stdout + status.stderr
    as_json = await _cli("outbox", "status", "--outbox", str(box), "--json", home=tmp_path)
    assert json.loads(as_json.stdout)["queued"] == 1

    down = await _cli("outbox", "flush", "--outbox", str(box), "--url", server.url, home=tmp_path)
    assert down.returncode == 1  # the server is still down: the entry stays
    assert "0 still queued" not in down.stdout

    await server.start()
    flushed = await _cli(
        "outbox", "flush", "--outbox", str(box), "--url", server.url, home=tmp_path
    )
    assert flushed.returncode == 0, flushed.stderr
    assert "delivered 1; 0 still queued; 0 dead" in flushed.stdout
    record = await server.store.query_entities(entity_type="conversation_turn")
    assert [e.snapshot["status"] for e in record.entities] == ["completed"]

    missing = await _cli("outbox", "status", "--outbox", str(tmp_path / "no.db"), home=tmp_path)
    assert missing.returncode != 0
    assert "no outbox file at" in missing.stderr
    assert not (tmp_path / "no.db").exists()


def test_audit_help_says_it_knows_nothing_of_an_outbox(tmp_path: Path) -> None:
    result = cli("audit", "--help", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "knows nothing of an outbox" in " ".join(result.stdout.split())
