"""A property test of isolation: two users and the local dev user interleave turns,
remembers, forgets, restores and erasures on one store file, and after every step each
one finds exactly its own live words, through search and through its conversation list.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from neotoma_agent import (
    LOCAL_USER_ID,
    EmbeddedStore,
    ForgottenUser,
    NeotomaMemory,
    purge_user,
)

USERS = ("alice", "bob", LOCAL_USER_ID)
users = st.sampled_from(USERS)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


class Users(RuleBasedStateMachine):
    """The model: each user's live words and conversations, and the words a forget hid."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "memory.db"
        self.store = EmbeddedStore.open(self.path)
        self.n = 0
        self.live: dict[str, dict[str, str]] = {u: {} for u in USERS}  # word -> conversation
        self.forgets: list[str] = []  # who forgot, in order
        self.hits: dict[str, int] = {}  # how many hits each word's search had when written
        self.hidden: dict[str, list[tuple[ForgottenUser, dict[str, str]]]] = {u: [] for u in USERS}

    def _word(self, user: str) -> str:
        self.n += 1
        return f"w{USERS.index(user)}q{self.n}"

    @rule(user=users)
    def turn(self, user: str) -> None:
        word = self._word(user)
        cid = f"conv{self.n}"  # a forgotten conversation stays deleted: each turn a new one

        async def go() -> None:
            memory = NeotomaMemory(self.store.for_user(user), conversation_id=cid)
            async with memory.turn(f"prompt {word}", turn_id="t1") as t:
                t.record_tool("lookup", args={"q": word})
                t.reply = f"reply {word}"

        _run(go())
        self._written(user, word, cid)

    def _written(self, user: str, word: str, cid: str) -> None:
        found = _run(self.store.for_user(user).search(word))
        assert found.hits
        self.hits[word] = len(found.hits)
        self.live[user][word] = cid

    @rule(user=users)
    def remember(self, user: str) -> None:
        word = self._word(user)
        memory = NeotomaMemory(self.store.for_user(user), conversation_id="notes")
        _run(memory.remember("note", title=f"note {word}"))
        self._written(user, word, "")

    @rule(user=users)
    def forget(self, user: str) -> None:
        forgotten = _run(self.store.forget_user(user))
        self.hidden[user].append((forgotten, self.live[user]))
        self.forgets.append(user)
        self.live[user] = {}

    @precondition(lambda self: any(self.hidden.values()))
    @rule()
    def restore(self) -> None:
        user = next(u for u in reversed(self.forgets) if self.hidden[u])
        forgotten, words = self.hidden[user].pop()
        _run(self.store.restore_user(forgotten))
        self.live[user].update(words)

    @rule(user=users)
    def purge(self, user: str) -> None:
        _run(self.store.aclose())
        purge_user(self.path, user)
        self.store = EmbeddedStore.open(self.path)
        self.live[user] = {}
        self.hidden[user] = []

    @invariant()
    def each_user_finds_exactly_its_own_live_words(self) -> None:
        async def check() -> None:
            everyone = {w for u in USERS for w in self.live[u]}
            everyone |= {w for u in USERS for _, ws in self.hidden[u] for w in ws}
            for user in USERS:
                view = self.store.for_user(user)
                for word in everyone:
                    found = len((await view.search(word)).hits)
                    expected = self.hits[word] if word in self.live[user] else 0
                    assert found == expected, (user, word)
                page = await view.conversation_summaries(limit=100)
                listed = {i.conversation_id for i in page.items} - {"notes"}
                assert listed == {c for c in self.live[user].values() if c}, user

        _run(check())

    def teardown(self) -> None:
        _run(self.store.aclose())
        self.dir.cleanup()


TestUsers = Users.TestCase
TestUsers.settings = settings(max_examples=25, stateful_step_count=10, deadline=None)
