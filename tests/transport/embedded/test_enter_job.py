"""A turn's enter as one job on the embedded store (``_enter_records``): one trip to the
store's thread, the same answers as the store and its reads sent apart, its reads bounded
by the retrieval's deadline and never fatal.

Each turn here runs on a real store file; the "apart" side runs the same turns through a
plain wrapper (``Forwarding``), whose enter is the user store and its two reads as calls
of their own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from neotoma_agent import NeotomaMemory, Turn
from neotoma_agent.transport._forward import Forwarding
from neotoma_agent.transport._records import enter_job
from neotoma_agent.transport.embedded import EmbeddedStore, _turn_write
from neotoma_agent.transport.embedded._db_thread import DBThread

pytestmark = pytest.mark.anyio

#: a read that never ends by itself (SQLite counts for ever): only an interruption stops it
_ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"

PROMPTS = (
    "What do we know about Acme Corp?",
    "Did Lena Fischer call back about Globex?",
    "Send the Acme Corp summary to lena@globex.example",
    "And what about him?",
)


def _memory(transport: Any, **kw: Any) -> NeotomaMemory:
    kw.setdefault("retrieval_timeout", 30.0)
    return NeotomaMemory(transport, conversation_id="c1", platform="tests", **kw)


async def _seed(store: Any) -> None:
    await store.store(
        [
            {"entity_type": "company", "name": "Acme Corp"},
            {"entity_type": "company", "name": "Globex", "website": "globex.example"},
            {"entity_type": "person", "name": "Lena Fischer", "email": "lena@globex.example"},
        ],
        idempotency_key="seed",
    )


def _seen(t: Any) -> tuple[Any, ...]:
    """What a turn's enter gave it: what it retrieved (ids, reasons, scores), the
    retrieval's counts but its time, and the history it read (its tool calls but their
    ids and clock readings, which differ from file to file)."""
    return (
        [(e.id, getattr(e, "reason", None), getattr(e, "score", None)) for e in t.retrieved],
        t.retrieved_ids,
        attrs.evolve(t.retrieval, ms=0.0),
        [attrs.evolve(h, tools=()) for h in t.history],
        [(h.turn_id, [(c.name, c.status) for c in h.tools], h.entities) for h in t.history],
    )


async def _run(transport: Any) -> list[tuple[Any, ...]]:
    seen = []
    memory = _memory(transport)
    for n, prompt in enumerate(PROMPTS):
        async with memory.turn(prompt, turn_id=f"t{n}") as t:
            if n == 0:
                async with t.tool("lookup", {"name": "Acme"}) as call:
                    call.result = {"found": 1}
            t.reply = f"Reply {n} about {t.retrieved_ids}"
        seen.append(_seen(t))
    return seen


@pytest.mark.parametrize("user", [None, "ada@example.test"])
async def test_the_enter_job_answers_what_its_store_and_reads_answer_apart(
    tmp_path: Path, user: str | None
) -> None:
    async with (
        EmbeddedStore.open(tmp_path / "joint.db") as joint,
        EmbeddedStore.open(tmp_path / "apart.db") as apart,
    ):
        one = joint if user is None else joint.for_user(user)
        other = Forwarding(apart if user is None else apart.for_user(user))
        assert enter_job(one) is not None
        assert enter_job(other) is None
        await _seed(one)
        await _seed(other)
        joint_seen = await _run(one)
        apart_seen = await _run(other)
    assert joint_seen == apart_seen
    # The turns named what was seeded, and read what came before them.
    assert all(seen[1] for seen in joint_seen[:3])
    assert [len(seen[3]) for seen in joint_seen] == [0, 1, 2, 3]
    assert joint_seen[1][4][0][1] == [("lookup", "ok")]


@pytest.mark.parametrize("user", [None, "ada@example.test"])
async def test_a_turns_enter_is_one_trip_to_the_store_thread(
    tmp_path: Path, user: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs: list[str] = []
    submit = DBThread.submit

    def counted(self: DBThread, job: Any) -> None:
        jobs.append("job")
        submit(self, job)

    async with EmbeddedStore.open(tmp_path / "a.db") as store:
        transport = store if user is None else store.for_user(user)
        await _seed(transport)
        memory = _memory(transport)
        async with memory.turn(PROMPTS[0], turn_id="t0") as t:
            t.reply = "Acme makes anvils."
        monkeypatch.setattr(DBThread, "submit", counted)
        # A turn that reads its history and looks up what it names: its enter is one job.
        t = memory.turn(PROMPTS[2], turn_id="t1")
        async with t:
            assert len(jobs) == 1
            assert t.history
            assert t.retrieved_ids
            t.reply = "Sent."
        assert len(jobs) == 2  # and its closing store another


async def _turn_past_a_stuck_read(
    store: EmbeddedStore,
    monkeypatch: pytest.MonkeyPatch,
    read: str,
    stuck: Callable[..., Any],
    reply: str,
) -> tuple[NeotomaMemory, Turn]:
    """A seeded store's second turn (retrieval_timeout 0.2 s) while ``read``, a read the
    enter job makes, never ends on its own: the memory, and that turn once closed."""
    await _seed(store)
    memory = _memory(store, retrieval_timeout=0.2)
    async with memory.turn("Hello there", turn_id="t0") as t:
        t.reply = "Hi."
    monkeypatch.setattr(_turn_write, read, stuck)
    # A liveness guard, not a timing assertion: without the deadline the read never ends.
    with anyio.fail_after(60):
        async with memory.turn(PROMPTS[0], turn_id="t1") as t:
            t.reply = reply
    monkeypatch.undo()
    return memory, t


async def test_a_lookup_past_the_deadline_is_cut_short_and_the_turn_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[str] = []

    def endless(
        conn: sqlite3.Connection, body: Mapping[str, Any], memo: Any = None
    ) -> dict[str, Any]:
        looked_up.append(body["identifier"])
        conn.execute(_ENDLESS).fetchone()
        raise AssertionError("an endless read ended")

    async with EmbeddedStore.open(tmp_path / "a.db") as store:
        memory, t = await _turn_past_a_stuck_read(
            store, monkeypatch, "retrieve_entity_by_identifier", endless, "Nothing found in time."
        )
        assert looked_up  # the job got to the lookups, and they were cut short
        assert t.retrieval.timeouts >= 1
        assert t.retrieval.failures == 0
        assert t.retrieved_ids == ()
        assert [h.turn_id for h in t.history] == ["t0"]  # read before the deadline
        assert t.result.completed
        # What the turn stored is there, the job's store committed with it.
        history = await memory.history()
        assert [(h.turn_id, h.status, h.reply) for h in history] == [
            ("t0", "completed", "Hi."),
            ("t1", "completed", "Nothing found in time."),
        ]


async def test_a_history_read_past_the_deadline_leaves_the_turn_without_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def endless(conn: sqlite3.Connection, body: Mapping[str, Any]) -> Any:
        conn.execute(_ENDLESS).fetchone()
        raise AssertionError("an endless read ended")

    async with EmbeddedStore.open(tmp_path / "a.db") as store:
        # typed_page: the enter's history read (a page, made typed from its rows).
        memory, t = await _turn_past_a_stuck_read(
            store, monkeypatch, "typed_page", endless, "No history in time."
        )
        assert t.history == ()
        # The lookups come after the history read: past the deadline, none is made.
        assert t.retrieval.timeouts >= 1
        assert t.retrieval.lookups == 0
        assert t.result.completed
        assert [h.turn_id for h in await memory.history()] == ["t0", "t1"]


async def test_a_failing_read_in_the_job_is_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(conn: sqlite3.Connection, body: Mapping[str, Any], memo: Any = None) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    def broken_history(conn: sqlite3.Connection, body: Mapping[str, Any]) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    async with EmbeddedStore.open(tmp_path / "a.db") as store:
        await _seed(store)
        memory = _memory(store)
        async with memory.turn("Hello there", turn_id="t0") as t:
            t.reply = "Hi."
        monkeypatch.setattr(_turn_write, "retrieve_entity_by_identifier", broken)
        async with memory.turn(PROMPTS[0], turn_id="t1") as t:
            t.reply = "Lookups failed."
        assert t.retrieval.failures >= 1
        assert t.retrieved_ids == ()
        assert [h.turn_id for h in t.history] == ["t0"]
        monkeypatch.setattr(_turn_write, "typed_page", broken_history)
        async with memory.turn(PROMPTS[0], turn_id="t2") as t:
            t.reply = "History failed."
        assert t.history == ()
        assert t.retrieved_ids == ()
        monkeypatch.undo()
        stored = await memory.history()
        assert [(h.turn_id, h.status) for h in stored] == [
            ("t0", "completed"),
            ("t1", "completed"),
            ("t2", "completed"),
        ]


async def test_a_rerun_whose_job_store_replays_still_reads(tmp_path: Path) -> None:
    """A re-run of a stored turn: the job's user store is refused (other run fields), the
    store replays an earlier run's, and the reads the job left undone are made apart."""
    async with EmbeddedStore.open(tmp_path / "a.db") as store:
        await _seed(store)
        memory = _memory(store)
        async with memory.turn("Hello there", turn_id="t0") as t:
            t.reply = "Hi."
        async with memory.turn(PROMPTS[0], turn_id="t1") as t:
            t.reply = "Acme makes anvils."
        first = _seen(t)
        again = memory.turn(PROMPTS[0], turn_id="t1")
        async with again:
            again.reply = "Acme makes anvils."
        assert again.result.replayed
        assert _seen(again) == first
        assert first[1]
        assert first[3]
