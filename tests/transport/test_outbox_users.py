"""An outbox file belongs to one user: whose transport opened it first.

Its queued stores are delivered through the transport that opens it; so a file shared by
two users' transports would deliver Alice's queued turn into Bob's memory. The first
``OutboxTransport`` binds the file to its user (a digest, never the id); another user's
refuses to open it with ``OutboxError``, and Alice's turn stays queued for her own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neotoma_agent import EmbeddedStore, HttpTransport, NeotomaMemory, OutboxTransport
from neotoma_agent._records.keys import key_phase
from neotoma_agent.exceptions import ConnectionLost, OutboxError
from neotoma_agent.testing import FaultyTransport

pytestmark = pytest.mark.anyio

ALICE, BOB = "alice-Q7", "bob-Q7"
MARK = "Zqueuedmark"


async def _queue_alice_s_turn(store: EmbeddedStore, outbox: Path) -> None:
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


async def test_another_user_s_transport_never_delivers_a_user_s_queued_turn(
    tmp_path: Path,
) -> None:
    outbox = tmp_path / "outbox.db"
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        await _queue_alice_s_turn(store, outbox)
        for other in (store.for_user(BOB), store):  # another user, the default user
            with pytest.raises(OutboxError, match="another user's") as refused:
                async with OutboxTransport(other, outbox, background=False) as theirs:
                    await theirs.flush()
            assert ALICE not in str(refused.value)
            found = await other.search(MARK)
            assert found.hits == ()
        assert ALICE.encode() not in outbox.read_bytes()

        # Alice's own transport delivers it, into her memory.
        async with OutboxTransport(store.for_user(ALICE), outbox, background=False) as mine:
            done = await mine.flush()
        assert (done.delivered, done.remaining) == (1, 0)
        assert (await store.for_user(ALICE).search(MARK)).hits
        assert (await store.for_user(BOB).search(MARK)).hits == ()


async def test_a_default_user_s_outbox_stays_the_default_user_s(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.db"
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        async with OutboxTransport(store, outbox, background=False):
            pass
        async with OutboxTransport(store, outbox, background=False):  # again: its own
            pass
        with pytest.raises(OutboxError, match="another user's"):
            async with OutboxTransport(store.for_user(BOB), outbox, background=False):
                pass


@pytest.mark.one_backend
async def test_an_http_transport_s_user_binds_its_outbox(tmp_path: Path) -> None:
    """``HttpTransport(user_id=)`` with unscoped ids, behind a wrapper: the file is that
    user's; the default user's transport (no ``user_id``) refuses it, and Alice's opens it."""
    outbox = tmp_path / "outbox.db"
    url = "http://127.0.0.1:9"  # nothing is sent: opening the outbox is local

    def alice() -> FaultyTransport:
        return FaultyTransport(HttpTransport(url, token="t", user_id=ALICE))

    async with OutboxTransport(alice(), outbox, background=False):
        pass
    with pytest.raises(OutboxError, match="another user's"):
        async with OutboxTransport(HttpTransport(url, token="t"), outbox, background=False):
            pass
    async with OutboxTransport(alice(), outbox, background=False):
        pass
