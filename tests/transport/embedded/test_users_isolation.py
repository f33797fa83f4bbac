"""The isolation matrix: every read path of the embedded store, through every user's view.

Three users (alice, bob and the local dev user, the unscoped store's own) store the same
shapes under the same conversation and turn ids, each with words of its own in the prompt,
the reply, a tool call's arguments and result, remembered fields and an orphan turn. Each
reads everything it can (the Transport reads, history, tools, search, show's and export's
readers, the audit, the actions and GET routes the dev server forwards, and a point read of
every id of every user): its own words are all there, no other user's is.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from users_support import MARKS, everything_visible, seed_user

from neotoma_agent import LOCAL_USER_ID, EmbeddedStore, NeotomaMemory, UserStore
from neotoma_agent.transport.embedded._rows import entity_text

pytestmark = pytest.mark.anyio

_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight")


def _all_ids(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute(f"SELECT {entity_text('id')} FROM entities ORDER BY id")]


async def test_no_read_path_shows_one_user_another_users_rows(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with EmbeddedStore.open(path) as store:
        for user, mark in MARKS.items():
            await seed_user(store.for_user(user), mark)
        ids = _all_ids(path)
        assert len(ids) > 20
        for user, mark in MARKS.items():
            for view in (store.for_user(user), *((store,) if user == LOCAL_USER_ID else ())):
                seen = await everything_visible(view, ids)
                for word in _WORDS:
                    assert f"{mark}{word}" in seen, (user, word)
                for other, other_mark in MARKS.items():
                    if other != user:
                        assert other_mark not in seen, (user, other)


async def test_an_id_of_another_user_is_not_found_not_forbidden(tmp_path: Path) -> None:
    from neotoma_agent import NotFoundError

    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        made = await seed_user(store.for_user("alice"), MARKS["alice"])
        bob = store.for_user("bob")
        with pytest.raises(NotFoundError):
            await bob.get_entity_snapshot(made["maria"])
        with pytest.raises(NotFoundError):
            await bob.request("get_entity", {"entity_id": made["maria"]})
        with pytest.raises(NotFoundError):
            await bob.request("delete_entity", {"entity_id": made["maria"]})
        with pytest.raises(NotFoundError):
            await bob.correct(made["maria"], "person", "notes", "overwritten", idempotency_key="k")
        # a store aimed at alice's entity by id lands nowhere
        from neotoma_agent import ValidationError

        with pytest.raises(ValidationError):
            await bob.store(
                [{"entity_type": "person", "target_id": made["maria"], "notes": "bob's"}],
                idempotency_key="bob-1",
            )
        snap = await store.for_user("alice").get_entity_snapshot(made["maria"])
        assert "Xalicemark" in snap.snapshot["notes"]


async def test_an_edge_bob_writes_to_alices_entity_reaches_neither(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        alice, bob = store.for_user("alice"), store.for_user("bob")
        made = await seed_user(alice, MARKS["alice"])
        mine = await NeotomaMemory_remember(bob)
        await bob.create_relationship("REFERS_TO", mine, made["maria"])
        related = await alice.retrieve_related_entities(made["maria"])
        assert mine not in {e.id for e in related.entities}
        assert all(
            mine not in (r.source_entity_id, r.target_entity_id) for r in related.relationships
        )
        related = await bob.retrieve_related_entities(mine)
        assert made["maria"] not in {e.id for e in related.entities}


async def NeotomaMemory_remember(view: UserStore) -> str:
    return await NeotomaMemory(view, conversation_id="c").remember("note", title="Bob's note")


async def test_another_users_many_matches_take_no_place_in_a_users_best_hits(
    tmp_path: Path,
) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        alice = NeotomaMemory(store.for_user("alice"), conversation_id="c")
        for n in range(12):
            async with alice.turn(f"quarterly budget review {n}") as t:
                t.reply = "quarterly budget noted"
        for view in (store.for_user("bob"), store):
            memory = NeotomaMemory(view, conversation_id="c")
            async with memory.turn("the quarterly budget is mine") as t:
                t.reply = "ok"
            found = await view.search("quarterly budget", limit=3)
            assert [h.text for h in found.hits] == ["the quarterly budget is mine"]


async def test_the_audit_of_a_view_repairs_that_users_turns_alone(tmp_path: Path) -> None:
    from neotoma_agent.qa import audit

    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        alice, bob = store.for_user("alice"), store.for_user("bob")
        for view in (alice, bob):
            await seed_user(view, MARKS["alice" if view is alice else "bob"])
        before = await audit(alice, min_age=0)
        assert [(f.conversation_id, f.kind.value) for f in before.findings] == [
            ("open-Xalicemarkeight", "orphan_turn")
        ]
        repaired = await audit(alice, min_age=0, repair=True)
        assert repaired.repairs
        assert all(r.ok for r in repaired.repairs)
        after = await audit(alice, min_age=0)
        assert [f.kind.value for f in after.findings if f.severity.value != "info"] == []
        still = await audit(bob, min_age=0)
        assert [(f.conversation_id, f.kind.value) for f in still.findings] == [
            ("open-Ybobmarkeight", "orphan_turn")
        ]
