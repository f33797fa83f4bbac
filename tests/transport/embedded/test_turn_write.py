"""A turn's records stored directly (``EmbeddedStore._store_records``): what the store
writes and answers is what ``store`` writes and answers for a body of the same records.

Real turns run on one store file through the records path; every store they made is then
run again, from the same records, through ``store`` (a request body, its answer parsed) on
a second file. Both files must hold the same rows, byte for byte, and both paths must give
the same answers and the same typed refusals. The store's clock is fixed, so that the two
files can be compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from observation_rows_support import every_table

from neotoma_agent import IdempotencyMismatchError, NeotomaMemory, ValidationError
from neotoma_agent.transport._forward import Forwarding
from neotoma_agent.transport._records import Entered, enter_job, records_store
from neotoma_agent.transport._results import StoreResult
from neotoma_agent.transport.embedded import EmbeddedStore, _write
from neotoma_agent.transport.embedded._store import _Actions

pytestmark = pytest.mark.anyio

Records = tuple[tuple[Mapping[str, Any], ...], str, tuple[Mapping[str, Any], ...]]


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_write, "now_iso", lambda: "2026-01-02T03:04:05.678Z")


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Records]:
    """Every set of records a turn hands a store or a user's view (still stored), and its
    answer (``None``: refused), in :data:`ANSWERED`."""
    into: list[Records] = []
    ANSWERED.clear()
    inner = _Actions._store_records

    async def kept(
        self: _Actions,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]] = (),
    ) -> StoreResult:
        into.append((tuple(entities), idempotency_key, tuple(relationships)))
        ANSWERED.append(None)
        answer = await inner(
            self, entities, idempotency_key=idempotency_key, relationships=relationships
        )
        ANSWERED[len(into) - 1] = answer
        return answer

    inner_enter = _Actions._enter_records

    async def kept_enter(
        self: _Actions,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]],
        **reads: Any,
    ) -> Entered:
        # An enter's job: its store is kept as a lone one's (its reads are the enter's).
        into.append((tuple(entities), idempotency_key, tuple(relationships)))
        at = len(into) - 1
        ANSWERED.append(None)
        entered = await inner_enter(
            self, entities, idempotency_key=idempotency_key, relationships=relationships, **reads
        )
        ANSWERED[at] = entered.stored
        return entered

    monkeypatch.setattr(_Actions, "_store_records", kept)
    monkeypatch.setattr(_Actions, "_enter_records", kept_enter)
    return into


#: the answers to the records of ``recorded``, in its order
ANSWERED: list[StoreResult | None] = []


def _answer(result: StoreResult, *, snapshots: bool = True) -> tuple[Any, ...]:
    """Everything a store's typed answer says (its entries whole: ids, action, name and,
    unless not ``snapshots``, snapshot), and the id it gives each request index."""
    ids = []
    for index in range(len(result.entities)):
        try:
            ids.append(result.entity_id(index))
        except IndexError:
            ids.append(None)
    return (
        result.replayed,
        result.source_id,
        result.entities_created,
        result.observations_created,
        result.entities if snapshots else [attrs.evolve(e, snapshot=None) for e in result.entities],
        ids,
    )


async def _turns(memory: NeotomaMemory) -> None:
    async with memory.turn("What do we know about Acme Corp?", turn_id="t1") as t:
        t.remember("task", title="Call Acme Corp", status="open")
        async with t.tool("lookup", {"name": "Acme"}) as call:
            call.result = {"found": 1}
        t.reply = "Acme Corp makes anvils."
    async with memory.turn("And Globex?", turn_id="t2") as t:
        t.reply = "Nothing on Globex yet."
    # A re-run of a finished turn replays each of its stores.
    async with memory.turn("And Globex?", turn_id="t2") as t:
        t.reply = "Nothing on Globex yet."
    t = memory.turn("This one fails", turn_id="t3")
    with pytest.raises(RuntimeError):
        await _failing(t)


async def _failing(turn: Any) -> None:
    # An abandoned turn with a partial reply.
    async with turn as t:
        t.append("Half a rep")
        raise RuntimeError("the model failed")


@pytest.mark.parametrize("user", [None, "ada@example.test"])
async def test_turns_stored_as_records_leave_what_their_bodies_leave(
    tmp_path: Path, user: str | None, recorded: list[Records]
) -> None:
    direct_answers: list[tuple[Any, ...]] = []
    async with EmbeddedStore.open(tmp_path / "records.db") as direct:
        transport = direct if user is None else direct.for_user(user)
        await _turns(NeotomaMemory(transport, conversation_id="c1"))
    records, answers = list(recorded), list(ANSWERED)
    assert len(records) >= 7  # two stores a turn (the replayed ones included)

    async with (
        EmbeddedStore.open(tmp_path / "records.db") as direct_again,
        EmbeddedStore.open(tmp_path / "bodies.db") as bodies,
    ):
        again = direct_again if user is None else direct_again.for_user(user)
        via_body = bodies if user is None else bodies.for_user(user)
        refused = 0
        for (entities, key, relationships), answered in zip(records, answers, strict=True):
            try:
                body_answer = await via_body.store(
                    entities, idempotency_key=key, relationships=relationships
                )
                # What the turn's records were answered: what their body is answered.
                assert answered is not None
                assert _answer(answered) == _answer(body_answer)
            except IdempotencyMismatchError:
                # A re-run's first try (new run fields): refused the same way as records.
                refused += 1
                with pytest.raises(IdempotencyMismatchError):
                    await again._store_records(
                        entities, idempotency_key=key, relationships=relationships
                    )
                continue
            # Stored again as records: a replay, answered as the body's replay is.
            # (A replay's snapshots are the entities' latest: the records file holds more.)
            direct_answers.append(
                _answer(
                    await again._store_records(
                        entities, idempotency_key=key, relationships=relationships
                    ),
                    snapshots=False,
                )
            )
            replay = await via_body.store(
                entities, idempotency_key=key, relationships=relationships
            )
            assert direct_answers[-1] == _answer(replay, snapshots=False)
            assert body_answer.source_id == replay.source_id
    assert refused >= 1
    assert every_table(tmp_path / "records.db") == every_table(tmp_path / "bodies.db")


async def test_a_fresh_store_answers_as_its_body_does(tmp_path: Path) -> None:
    entities = (
        {"entity_type": "conversation", "conversation_id": "c9"},
        {
            "entity_type": "conversation_message",
            "role": "user",
            "sender_kind": "user",
            "content": "hello",
            "turn_key": "c9:t1",
        },
    )
    edges = ({"relationship_type": "PART_OF", "source_index": 1, "target_index": 0},)
    async with (
        EmbeddedStore.open(tmp_path / "a.db") as a,
        EmbeddedStore.open(tmp_path / "b.db") as b,
    ):
        direct = await a._store_records(entities, idempotency_key="k1", relationships=edges)
        body = await b.store(entities, idempotency_key="k1", relationships=edges)
        assert _answer(direct) == _answer(body)
        assert direct.entities == body.entities  # snapshots and names too
        # The records path answers the counts in ``raw``, not the entries.
        assert direct.raw.items() <= body.raw.items()
        assert {"source_id", "entities_created", "observations_created"} <= direct.raw.keys()
    assert every_table(tmp_path / "a.db") == every_table(tmp_path / "b.db")


async def test_records_are_refused_as_bodies_are_and_nothing_is_written(tmp_path: Path) -> None:
    one = ({"entity_type": "task", "title": "Call Acme"},)
    async with EmbeddedStore.open(tmp_path / "a.db") as store:
        await store._store_records(one, idempotency_key="k1")
        before = every_table(tmp_path / "a.db")
        with pytest.raises(IdempotencyMismatchError):
            await store._store_records(
                ({"entity_type": "task", "title": "Call Globex"},), idempotency_key="k1"
            )
        with pytest.raises(ValidationError):
            await store._store_records(({"title": "no type"},), idempotency_key="k2")
        with pytest.raises(ValidationError):
            await store._store_records(one, idempotency_key="")
        with pytest.raises(ValidationError):
            await store._store_records((), idempotency_key="k3")
        with pytest.raises(ValidationError):  # a lone surrogate, as a typed 400
            await store._store_records(
                ({"entity_type": "task", "title": "bad \ud800"},), idempotency_key="k4"
            )
        assert every_table(tmp_path / "a.db") == before
    with pytest.raises(RuntimeError, match="closed"):
        await store._store_records(one, idempotency_key="k5")
    async with EmbeddedStore.open(tmp_path / "a.db", read_only=True) as read_only:
        with pytest.raises(PermissionError):
            await read_only._store_records(one, idempotency_key="k6")


async def test_a_turn_hands_the_embedded_store_its_records_and_a_wrapper_its_bodies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    store_body = EmbeddedStore.store
    store_records = EmbeddedStore._store_records
    enter_records = EmbeddedStore._enter_records

    async def body(self: EmbeddedStore, *args: Any, **kw: Any) -> StoreResult:
        calls.append("store")
        return await store_body(self, *args, **kw)

    async def records(self: EmbeddedStore, *args: Any, **kw: Any) -> StoreResult:
        calls.append("records")
        return await store_records(self, *args, **kw)

    async def enter(self: EmbeddedStore, *args: Any, **kw: Any) -> Entered:
        calls.append("enter")
        return await enter_records(self, *args, **kw)

    monkeypatch.setattr(EmbeddedStore, "store", body)
    monkeypatch.setattr(EmbeddedStore, "_store_records", records)
    monkeypatch.setattr(EmbeddedStore, "_enter_records", enter)
    async with EmbeddedStore.open(tmp_path / "a.db") as store:
        async with NeotomaMemory(store, conversation_id="c1").turn("hi", turn_id="t1") as t:
            t.reply = "hello"
        # The enter's store as one job with its reads, the closing store on its own.
        assert calls == ["enter", "records"]
        # A wrapper sees every store it wraps: a body, whatever it wraps.
        wrapped = Forwarding(store)
        assert records_store(wrapped) is None
        assert enter_job(wrapped) is None
        calls.clear()
        async with NeotomaMemory(wrapped, conversation_id="c1").turn("hi", turn_id="t2") as t:
            t.reply = "hello"
        assert calls == ["store", "store"]
