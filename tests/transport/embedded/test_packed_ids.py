"""Entity ids packed in their rows (schema version 12): an entity row, its unique index and
the type index hold its id as 12 bytes, and every read answers, and every write writes, as
on the same file as version 11 held it (each id its text), upgraded."""

from __future__ import annotations

import re
import shutil
from contextlib import suppress
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packed_ids_support import entity_ids, entity_rows, id_types, unpacked_copy
from part_of_support import clock
from paths_support import TESTS
from users_support import everything_visible, seed_user

from neotoma_agent import LOCAL_USER_ID, EmbeddedStore, NeotomaMemory, UserStore
from neotoma_agent._engine import closing
from neotoma_agent._neotoma.identity import entity_id_for
from neotoma_agent._records import tools
from neotoma_agent.exceptions import NeotomaError

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

_USERS = (LOCAL_USER_ID, "alice")
_COMPANY = {"entity_type": "company", "name": "Acme Corp", "domain": "acme.example"}

Step = tuple[str, int, int]
#: what a read measures of itself (its time), not of the file
_TIMED = re.compile(r'"duration_ms": [0-9.]+|\bms=[0-9.]+')


def _view(store: EmbeddedStore, user: str) -> EmbeddedStore | UserStore:
    return store if user == LOCAL_USER_ID else store.for_user(user)


async def _step(store: EmbeddedStore, step: Step, n: int) -> None:
    kind, who, k = step
    user = _USERS[who % len(_USERS)]
    view = _view(store, user)
    acme = entity_id_for("company", "Acme Corp", None if user == LOCAL_USER_ID else user)
    try:
        if kind == "turn":
            memory = NeotomaMemory(view, conversation_id=f"c{k % 2}")
            async with memory.turn(f"question {n} Acme Corp", turn_id=f"t{n}") as t:
                if k % 3 == 0:
                    t.record_tool("lookup", args={"q": f"q{n}"}, result={"hit": n})
                if k % 2:
                    t.remember("person", name=f"Maria {k}", notes=f"note {n}")
                t.reply = f"answer {n}"
        elif kind == "store":
            fields = _COMPANY if k % 3 == 0 else {**_COMPANY, "domain": f"acme{k}.example"}
            await view.store([fields], idempotency_key=f"w-{k}-{n}")
        elif kind == "correct":
            await view.store([_COMPANY], idempotency_key="w-first")
            body = {
                "entity_id": acme,
                "entity_type": "company",
                "field": "name" if k % 2 else "domain",
                "value": f"Fixed {k}",
                "idempotency_key": f"fix-{k}-{n}",
            }
            await view.request("correct", body)
        elif kind == "delete":
            await view.store([_COMPANY], idempotency_key="w-first")
            action = "delete_entity" if k % 2 else "restore_entity"
            await view.request(action, {"entity_id": acme})
        elif kind == "relate":  # an edge with metadata between a message and a conversation
            page = await view.query_entities(entity_type="conversation_message", limit=10)
            ends = await view.query_entities(entity_type="conversation", limit=10)
            if page.entities and ends.entities:
                body = {
                    "relationship_type": "PART_OF" if k % 2 else "REFERS_TO",
                    "source_entity_id": page.entities[k % len(page.entities)].entity_id,
                    "target_entity_id": ends.entities[n % len(ends.entities)].entity_id,
                    "metadata": {"via": f"import {k}"},
                }
                await view.request("create_relationship", body)
        elif kind == "forget" and isinstance(view, UserStore):
            if k % 2:
                await store.forget_user(user)
            else:
                await store.restore_user(user)
    except NeotomaError:
        pass  # the same error on both files: their answers are compared after


async def _write(path: Path, steps: list[Step], start_ms: int) -> None:
    """``steps`` on the file at ``path``, every clock a write reads fixed from ``start_ms``
    (the store's and the turn's), so that two files written alike hold the same rows."""
    clocks = [closing.now_ms, tools.now_ms]
    for module in (closing, tools):
        module.now_ms = lambda: 1_900_000_000_000 + start_ms  # type: ignore[attr-defined]
    try:
        with clock(start_ms):
            async with EmbeddedStore.open(path) as store:
                for n, step in enumerate(steps):
                    await _step(store, step, n)
    finally:
        closing.now_ms, tools.now_ms = clocks  # type: ignore[attr-defined]


async def _answers(path: Path) -> dict[str, str]:
    """Every read each user has, on every entity of the file (another user's included)."""
    ids = entity_ids(path)
    out: dict[str, str] = {}
    with clock(10_000_000):  # the audit's repairs are writes: stamped alike on both files
        async with EmbeddedStore.open(path) as store:
            for user in _USERS:
                out[user] = _TIMED.sub("", await everything_visible(_view(store, user), ids))
            with suppress(NeotomaError):
                out["lookups"] = repr(
                    [
                        await store.request("retrieve_entity_by_identifier", {"identifier": i})
                        for i in (*ids[:3], ids[0].upper() if ids else "", "ent_nothing")
                    ]
                )
    return out


async def test_an_entity_row_and_its_indexes_hold_its_id_as_12_bytes(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        for user in _USERS:
            await seed_user(_view(store, user), "Xmark")
    assert id_types(path) == {("blob", 12)}
    unpacked = unpacked_copy(path, tmp_path / "text.db")
    assert id_types(unpacked) == {("text", 28)}
    async with EmbeddedStore.open(unpacked):
        pass
    assert id_types(unpacked) == {("blob", 12)}
    assert entity_rows(unpacked) == entity_rows(path)


async def test_a_version_11_file_is_packed_and_answers_as_recorded(tmp_path: Path) -> None:
    """The file the release before wrote (``tests/data/v11_store``): after the upgrade its
    rows hold packed ids, and it is written on as a file this release wrote."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v11_store" / "store.db", path)
    assert id_types(path) == {("text", 28)}
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-v2")
        async with memory.turn("What about Acme Corp?", turn_id="v2-turn-3") as t:
            t.reply = "Acme again."
        page = await memory.history(limit=None)
    assert id_types(path) == {("blob", 12)}
    assert [(t.turn_id, t.user, t.reply) for t in page][-1] == (
        "v2-turn-3",
        "What about Acme Corp?",
        "Acme again.",
    )
    assert len(page) == 3


steps = st.lists(
    st.tuples(
        st.sampled_from(["turn", "store", "correct", "delete", "relate", "forget"]),
        st.integers(0, 1),
        st.integers(0, 5),
    ),
    max_size=6,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_version_11_file(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included) answers the same on the file and on its copy as
    version 11 held it, upgraded; then the same writes on both write the same rows and
    answer the same."""
    tmp = tmp_path_factory.mktemp("packed")
    path = tmp / "packed.db"
    await _write(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    unpacked = unpacked_copy(path, tmp / "text.db")
    assert await _answers(unpacked) == await _answers(path)
    assert entity_rows(unpacked) == entity_rows(path)
    await _write(path, after, 5_000_000)
    await _write(unpacked, after, 5_000_000)
    assert entity_rows(unpacked) == entity_rows(path)
    assert await _answers(unpacked) == await _answers(path)
