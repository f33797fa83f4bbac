"""A workload two users write on a store file with every clock fixed, and every read they
have of it: the comparison tests of a format step (a file against its copy in the
format before the step) write the same steps on both and compare the rows and answers."""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from packed_ids_support import entity_ids, entity_rows
from part_of_support import clock
from users_support import everything_visible

from neotoma_agent import LOCAL_USER_ID, EmbeddedStore, NeotomaMemory, UserStore
from neotoma_agent._engine import closing
from neotoma_agent._neotoma.identity import entity_id_for
from neotoma_agent._records import tools
from neotoma_agent.exceptions import NeotomaError

__all__ = [
    "USERS",
    "Step",
    "answers",
    "compared",
    "fixed_clocks",
    "same_on_both",
    "steps",
    "turn_on_recorded",
    "view_of",
    "write_steps",
]

USERS = (LOCAL_USER_ID, "alice")
COMPANY = {"entity_type": "company", "name": "Acme Corp", "domain": "acme.example"}

Step = tuple[str, int, int]
#: what a read measures of itself (its time), not of the file
TIMED = re.compile(r'"duration_ms": [0-9.]+|\bms=[0-9.]+')


def view_of(store: EmbeddedStore, user: str) -> EmbeddedStore | UserStore:
    return store if user == LOCAL_USER_ID else store.for_user(user)


async def _step(store: EmbeddedStore, step: Step, n: int) -> None:
    kind, who, k = step
    user = USERS[who % len(USERS)]
    view = view_of(store, user)
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
            fields = COMPANY if k % 3 == 0 else {**COMPANY, "domain": f"acme{k}.example"}
            await view.store([fields], idempotency_key=f"w-{k}-{n}")
        elif kind == "correct":
            await view.store([COMPANY], idempotency_key="w-first")
            body = {
                "entity_id": acme,
                "entity_type": "company",
                "field": "name" if k % 2 else "domain",
                "value": f"Fixed {k}",
                "idempotency_key": f"fix-{k}-{n}",
            }
            await view.request("correct", body)
        elif kind == "delete":
            await view.store([COMPANY], idempotency_key="w-first")
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


@contextmanager
def fixed_clocks(start_ms: int) -> Iterator[None]:
    """Every clock a write reads (the store's and the turn's) fixed from ``start_ms``, so
    that two files written alike hold the same rows."""
    clocks = [closing.now_ms, tools.now_ms]
    for module in (closing, tools):
        module.now_ms = lambda: 1_900_000_000_000 + start_ms  # type: ignore[attr-defined]
    try:
        with clock(start_ms):
            yield
    finally:
        closing.now_ms, tools.now_ms = clocks  # type: ignore[attr-defined]


async def write_steps(path: Path, steps: list[Step], start_ms: int) -> None:
    """``steps`` on the file at ``path``, every clock fixed from ``start_ms``."""
    with fixed_clocks(start_ms):
        async with EmbeddedStore.open(path) as store:
            for n, step in enumerate(steps):
                await _step(store, step, n)


async def answers(path: Path) -> dict[str, str]:
    """Every read each user has, on every entity of the file (another user's included)."""
    ids = entity_ids(path)
    out: dict[str, str] = {}
    with clock(10_000_000):  # the audit's repairs are writes: stamped alike on both files
        async with EmbeddedStore.open(path) as store:
            for user in USERS:
                out[user] = TIMED.sub("", await everything_visible(view_of(store, user), ids))
            with suppress(NeotomaError):
                out["lookups"] = repr(
                    [
                        await store.request("retrieve_entity_by_identifier", {"identifier": i})
                        for i in (*ids[:3], ids[0].upper() if ids else "", "ent_nothing")
                    ]
                )
    return out


#: any mix of the workload's steps, for a hypothesis comparison
steps = st.lists(
    st.tuples(
        st.sampled_from(["turn", "store", "correct", "delete", "relate", "forget"]),
        st.integers(0, 1),
        st.integers(0, 5),
    ),
    max_size=6,
)

#: examples a comparison runs: a few in the default run (one a format step, and each
#: example writes and reads several files), more in ``nox -s slow``, which selects the
#: comparisons by their mark and sets the count
COMPARED_EXAMPLES = int(os.environ.get("NEOTOMA_COMPARED_EXAMPLES", "3"))

_compared_settings = settings(
    max_examples=COMPARED_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

TestFunction = TypeVar("TestFunction", bound=Callable[..., Any])


def compared(test: TestFunction) -> TestFunction:
    """The hypothesis settings of a format step's comparison, and its mark
    (``format_comparison``) by which the slow session runs it again at length."""
    marked: TestFunction = pytest.mark.format_comparison(_compared_settings(test))
    return marked


async def same_on_both(
    path: Path,
    old: Path,
    after: list[Step],
    *,
    reads: Callable[[Path], Awaitable[dict[str, Any]]] | None = None,
    rows: Sequence[Callable[[Path], object]] = (),
) -> None:
    """The comparison of a format step: every read (:func:`answers`, and ``reads``) and
    every entity row (and ``rows``) the same on ``path`` and on ``old``, its copy in the
    format before the step (upgraded when opened); then ``after`` written on both, and the
    same comparison again."""

    async def every_read(at: Path) -> dict[str, Any]:
        return {**await answers(at), **(await reads(at) if reads else {})}

    def every_row(at: Path) -> list[object]:
        return [entity_rows(at), *(row(at) for row in rows)]

    assert await every_read(old) == await every_read(path)
    assert every_row(old) == every_row(path)
    for copy in (path, old):
        await write_steps(copy, after, 5_000_000)
    assert every_row(old) == every_row(path)
    assert await every_read(old) == await every_read(path)


async def turn_on_recorded(path: Path) -> None:
    """A turn on a file an earlier release recorded (``tests/data/vN_store``, whose
    conversation ``chat-v2`` holds two turns): it is written on as a file this release
    wrote, and its history reads the three turns."""
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-v2")
        async with memory.turn("What about Acme Corp?", turn_id="v2-turn-3") as t:
            t.reply = "Acme again."
        page = await memory.history(limit=None)
    assert len(page) == 3
    assert (page[-1].turn_id, page[-1].user, page[-1].reply) == (
        "v2-turn-3",
        "What about Acme Corp?",
        "Acme again.",
    )
