"""A user's token alone (no ``user_id``) acts as that user everywhere on ``serve --users``.

A real aiohttp server on 127.0.0.1 over one store file, with Alice's and Bob's tokens.
Each writes through ``HttpTransport(url, token=...)`` with no ``user_id``: the server
derives the user's entity ids under the user, so the client must derive its own (a
conversation's, for the history read) the same way, which it learns from ``GET /me``.
Then every read a turn and the tools make (the history, the recent conversations,
retrieval's lookups, the search, the web view) finds the user's own rows, and never the
other user's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import attrs
import pytest
from two_users_support import ALICE, BOB, MARKERS
from users_server_support import TOKENS, users_server

from neotoma_agent import HttpTransport, NeotomaMemory, OutboxTransport, RetryPolicy
from neotoma_agent.exceptions import NotFoundError
from neotoma_agent.reads import search, tenant_for

pytestmark = pytest.mark.anyio

#: both users talk in a conversation of the same name: two conversations, one per user
CONVERSATION = "same-name"


@attrs.frozen
class Server:
    url: str
    #: each user's conversation entity id, as the first turn's result gave it
    conversations: dict[str, str]


def _token_alone(url: str, user: str) -> HttpTransport:
    return HttpTransport(url, token=TOKENS[user], retry=RetryPolicy(attempts=1))


def _memory(transport: HttpTransport) -> NeotomaMemory:
    return NeotomaMemory(
        transport, conversation_id=CONVERSATION, retrieval_timeout=5.0, close_timeout=5.0
    )


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with users_server(tmp_path / "m.db") as (_store, url):
        conversations = {}
        for user in TOKENS:
            async with _token_alone(url, user) as transport:
                memory = _memory(transport)
                async with memory.turn(f"Note {MARKERS[user]} first prompt") as t:
                    t.remember("person", name="Maria Gomez", notes=f"{MARKERS[user]} notes")
                    t.reply = f"Noted {MARKERS[user]}."
                conversation = t.result.conversation_entity_id
                assert conversation is not None
                conversations[user] = conversation
        yield Server(url, conversations)


async def test_the_next_turn_reads_the_history_a_token_alone_stored(server: Server) -> None:
    for user, other in ((ALICE, BOB), (BOB, ALICE)):
        async with _token_alone(server.url, user) as transport:
            memory = _memory(transport)
            async with memory.turn("Do you know Maria Gomez?") as t:
                history = t.history
                retrieved = t.retrieved
                t.reply = "Yes."
            assert [h.user for h in history] == [f"Note {MARKERS[user]} first prompt"]
            assert tenant_for(transport) == user  # learned from the server, once
            # Retrieval's lookups: the user's own Maria, never the other's.
            notes = [str(e.snapshot.get("notes", "")) for e in retrieved]
            assert any(MARKERS[user] in n for n in notes), notes
            assert not any(MARKERS[other] in n for n in notes), notes
            assert t.result.conversation_entity_id == server.conversations[user]


async def test_every_read_answers_a_token_alone_with_its_user_s_rows(server: Server) -> None:
    """The history read outside a turn, the recent conversations, the search and the web
    view: the user's own conversation, never the other's."""
    async with aiohttp.ClientSession() as session:
        for user, other in ((ALICE, BOB), (BOB, ALICE)):
            async with _token_alone(server.url, user) as transport:
                history = await _memory(transport).history()
                assert [h.user for h in history] == [f"Note {MARKERS[user]} first prompt"]
                page = await transport.recent_conversations()
                assert [c.entity_id for c in page.items] == [server.conversations[user]]
                window = await transport.recent_conversation(server.conversations[user])
                assert MARKERS[user] in str(window.raw)
                assert MARKERS[other] not in str(window.raw)
                assert (await search(transport, MARKERS[user])).hits
                assert not (await search(transport, MARKERS[other])).hits
                # The other user's conversation, by its id: not this user's to read.
                with pytest.raises(NotFoundError):
                    await transport.recent_conversation(server.conversations[other])
            headers = {"Authorization": f"Bearer {TOKENS[user]}"}
            path = f"/ui/api/conversation?id={CONVERSATION}"
            async with session.get(server.url + path, headers=headers) as answer:
                text = await answer.text()
            assert answer.status == 200
            assert MARKERS[user] in text
            assert MARKERS[other] not in text


async def test_me_says_whose_the_token_is(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        for token, user in ((TOKENS[ALICE], ALICE), (TOKENS[BOB], BOB)):
            headers = {"Authorization": f"Bearer {token}"}
            async with session.get(server.url + "/me", headers=headers) as answer:
                assert answer.status == 200
                assert await answer.json() == {"user_id": user, "tenant_scoped_ids": True}
            # Naming another user with a user's token is refused, as on every route.
            async with session.get(
                server.url + "/me", params={"user_id": BOB if user == ALICE else ALICE},
                headers=headers,
            ) as answer:  # fmt: skip
                assert answer.status == 403
        async with session.get(server.url + "/me") as answer:
            assert answer.status == 401


async def test_an_outbox_over_a_token_alone_is_the_same_file_before_and_after_it_asked(
    server: Server, tmp_path: Path
) -> None:
    """The file is bound to the transport's user when first opened: a token alone binds it
    the same way whether its transport asked the server whose it is (a turn ran first) or
    not yet (opened on entering), so the next run opens it."""
    path = tmp_path / "outbox.db"
    lazy = OutboxTransport(_token_alone(server.url, ALICE), path, background=False)
    try:
        async with _memory(lazy).turn("Anything new?") as t:  # asks /me, then opens the file
            t.reply = "No."
        assert tenant_for(lazy) == ALICE
    finally:
        await lazy.aclose()
    async with OutboxTransport(_token_alone(server.url, ALICE), path, background=False) as again:
        assert (await again.status()).queued == 0
        async with _memory(again).turn("And now?") as t:
            t.reply = "Still no."
        assert [h.user for h in t.history][-1] == "Anything new?"
