"""The guarantee under cancellation: every turn ends as its user message plus the exact reply
or an abandoned record, exactly once, however and wherever the caller is cancelled.

The sweep cancels at every await point of a turn: each transport call (just as it is issued,
and after it returned, so the answer is lost), and each checkpoint of the body, with anyio
cancel scopes and the asyncio-native ways (``Task.cancel()`` once and repeatedly,
``asyncio.timeout``), on asyncio and trio, on the embedded store and over HTTP to the dev
server. After each run the store is read back and checked; the caller must have seen the
cancellation. A fast subset runs by default; ``-m slow`` (``nox -s slow``) runs all of it
plus random deadlines.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from turn_support import db_path, memory, messages, seed, store, turn_record

from neotoma_agent import NeotomaMemory, TurnState
from neotoma_agent.reads import identify
from neotoma_agent.testing import FaultyTransport
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport._forward import Forwarding
from neotoma_agent.transport._records import records_store

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio

CHUNKS = ("Acme ", "Corp ", "is ", "fine.")
BODY_CHECKPOINTS = len(CHUNKS) + 1
# Transport calls of one turn naming one entity, in the order they start: the user store, the
# history read and the lookup (started beside it, in either order), the closing store.
CALLS = 4
#: of which the enter's (the user store and its two reads: one job on the embedded store)
ENTER_CALLS = 3


class Trigger:
    """Cancels the turn the way a test asks, when asked."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.fired = False
        self.scope: anyio.CancelScope | None = None
        self.task: asyncio.Task[Any] | None = None
        self.timeout: Any = None

    def fire(self) -> None:
        if self.fired:
            return
        self.fired = True
        if self.how == "anyio-scope":
            assert self.scope is not None
            self.scope.cancel()
        elif self.how == "task-cancel":
            assert self.task is not None
            self.task.cancel()
        elif self.how == "task-cancel-repeated":
            assert self.task is not None
            task = self.task
            loop = asyncio.get_running_loop()
            task.cancel()
            # Again while the turn is closing: a second stop press, a framework's retry.
            for delay in (0.0, 0.001, 0.005, 0.02):
                loop.call_later(delay, task.cancel)
        elif self.how == "asyncio-timeout":
            self.timeout.reschedule(asyncio.get_running_loop().time())
        else:  # pragma: no cover
            raise AssertionError(self.how)


class CancelAtCall(Forwarding):
    """Fires the trigger at the n-th transport call: as it is issued, or once it returned."""

    def __init__(self, inner: Transport, trigger: Trigger, index: int, when: str) -> None:
        super().__init__(inner)
        self.trigger = trigger
        self.index = index
        self.when = when
        self.calls = 0

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        n = self.calls
        self.calls += 1
        if n != self.index:
            return await super()._call(method, *args, **kwargs)
        if self.when == "issued":
            # The cancellation lands at the call's first await: the embedded job is queued,
            # the HTTP request is on its way.
            self.trigger.fire()
            return await super()._call(method, *args, **kwargs)
        with anyio.CancelScope(shield=True):
            result = await super()._call(method, *args, **kwargs)
        # The write happened; its answer is lost to the cancellation.
        self.trigger.fire()
        await anyio.lowlevel.checkpoint()
        return result


class CancelAtRecords(CancelAtCall):
    """``CancelAtCall`` on a store that takes a turn's records directly (the embedded
    store's ``_store_records``, and its enter as one job, ``_enter_records``): its stores are
    counted and cancelled on that path."""

    async def _store_records(self, entities: Any, **kwargs: Any) -> Any:
        return await self._call("_store_records", entities, **kwargs)

    async def _enter_records(self, entities: Any, **kwargs: Any) -> Any:
        # The enter's user store, history read and lookup as one job (calls 0 to 2): a
        # cancellation at any of them lands on it, issued or answered.
        start = self.calls
        hit = start <= self.index < start + ENTER_CALLS
        self.calls = self.index if hit else start
        try:
            return await self._call("_enter_records", entities, **kwargs)
        finally:
            self.calls = start + ENTER_CALLS


async def body(t: Any, trigger: Trigger, at: int | None) -> None:
    for i in range(BODY_CHECKPOINTS):
        if i == at:
            trigger.fire()
        await anyio.lowlevel.checkpoint()
        if i < len(CHUNKS):
            t.append(CHUNKS[i])


async def run_turn(
    transport: Transport, how: str, *, call: int | None, when: str, body_at: int | None
) -> tuple[Any, bool]:
    """Run one turn under ``how``; return it and whether the caller saw the cancellation."""
    trigger = Trigger(how)
    wrapper = CancelAtRecords if records_store(transport) is not None else CancelAtCall
    wrapped: Transport = wrapper(transport, trigger, call, when) if call is not None else transport
    m = memory(wrapped, "c-cancel", close_timeout=5.0)
    t = m.turn("Tell me about Acme Corp", turn_id="t1")

    async def use_turn() -> None:
        async with t:
            await body(t, trigger, body_at)

    if how == "anyio-scope":
        with anyio.CancelScope() as scope:
            trigger.scope = scope
            await use_turn()
        return t, scope.cancelled_caught or not trigger.fired
    if how == "asyncio-timeout":
        try:
            async with asyncio.timeout(None) as cm:
                trigger.timeout = cm
                await use_turn()
        except TimeoutError:
            return t, True
        return t, not trigger.fired
    task = asyncio.ensure_future(use_turn())
    trigger.task = task
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
        return t, True
    return t, not trigger.fired


async def check_store(transport: Transport, t: Any) -> str:
    """The protocol's invariant on what one turn left; returns the stored status."""
    convs = await transport.query_entities(entity_type="conversation", limit=10)
    stored_messages: dict[str, dict[str, Any]] = {}
    for conv in convs.entities:
        stored_messages.update(await messages(transport, conv.entity_id))
    records = await transport.query_entities(entity_type="conversation_turn", limit=10)
    if not stored_messages:
        # Cancelled before the user store was issued: neither half, and nothing else.
        assert records.entities == [] or records.entities == ()
        return "nothing"
    user = stored_messages.pop("c-cancel:t1")
    assert user["content"] == t.user_message
    assert len((await transport.list_observations(user["id"])).observations) == 1
    record = await turn_record(transport, "c-cancel", "t1")
    status = record["status"]
    assert status in ("completed", "abandoned"), f"turn left {status!r}"
    assistant = stored_messages.pop("c-cancel:t1:assistant", None)
    assert stored_messages == {}
    if status == "completed":
        assert assistant is not None
        assert assistant["content"] == t.reply == "".join(CHUNKS)
    elif t.reply:
        assert assistant is not None
        assert assistant["content"] == t.reply
    else:
        assert assistant is None
    if assistant is not None:
        assert len((await transport.list_observations(assistant["id"])).observations) == 1
    assert t.result.stored_status == status
    assert t.state in (TurnState.COMPLETED, TurnState.ABANDONED)
    return status


def closing_stores() -> Callable[[str, Any, Any], bool]:
    """A FaultyTransport predicate: every store after the first (the user store)."""
    seen = 0

    def when(method: str, args: Any, kwargs: Any) -> bool:
        nonlocal seen
        seen += 1
        return seen > 1

    return when


def _points(full: bool) -> list[tuple[int | None, str, int | None]]:
    points: list[tuple[int | None, str, int | None]] = [
        (call, when, None) for call in range(CALLS) for when in ("issued", "answered")
    ]
    points += [(None, "", at) for at in range(BODY_CHECKPOINTS)]
    if full:
        return points
    # Default subset: one of each kind (enter call, lost enter answer, a read beside the
    # user store, body, closing store).
    return [
        (0, "issued", None),
        (0, "answered", None),
        (1, "issued", None),
        (1, "answered", None),
        (None, "", 2),
        (CALLS - 1, "issued", None),
        (CALLS - 1, "answered", None),
    ]


NATIVE = ["task-cancel", "task-cancel-repeated", "asyncio-timeout"]


def _cases(hows: list[str], full: bool) -> list[Any]:
    cases = []
    for how in hows:
        for call, when, at in _points(full):
            point = f"call{call}-{when}" if call is not None else f"body{at}"
            cases.append(pytest.param(how, call, when, at, id=f"{how}-{point}"))
    return cases


async def _sweep_one(
    store: Transport, how: str, call: int | None, when: str, at: int | None
) -> str:
    if how == "asyncio-timeout" and sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout is new in Python 3.11")
    await seed(store, "Acme Corp")
    t, saw_cancel = await run_turn(store, how, call=call, when=when, body_at=at)
    assert saw_cancel, "the caller did not see the cancellation"
    return await check_store(store, t)


SWEEP = ("how", "call", "when", "at")


@pytest.mark.parametrize(SWEEP, _cases(["anyio-scope"], full=False))
async def test_cancel_scope_sweep(
    store: Transport, how: str, call: int | None, when: str, at: int | None
) -> None:
    await _sweep_one(store, how, call, when, at)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(SWEEP, _cases(NATIVE, full=False))
async def test_asyncio_native_cancel_sweep(
    store: Transport, how: str, call: int | None, when: str, at: int | None
) -> None:
    await _sweep_one(store, how, call, when, at)


@pytest.mark.slow
@pytest.mark.parametrize(SWEEP, _cases(["anyio-scope"], full=True))
async def test_cancel_scope_sweep_full(
    store: Transport, how: str, call: int | None, when: str, at: int | None
) -> None:
    await _sweep_one(store, how, call, when, at)


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(SWEEP, _cases(NATIVE, full=True))
async def test_asyncio_native_cancel_sweep_full(
    store: Transport, how: str, call: int | None, when: str, at: int | None
) -> None:
    await _sweep_one(store, how, call, when, at)


@pytest.mark.slow
@pytest.mark.parametrize("seed_value", range(12))
async def test_random_deadlines(store: Transport, anyio_backend: str, seed_value: int) -> None:
    """A deadline anywhere in a turn whose every store takes a few milliseconds."""
    rng = random.Random(seed_value)
    faulty = FaultyTransport(store).delay("*", 0.004)
    await seed(store, "Acme Corp")
    m = memory(faulty, "c-cancel")
    t = m.turn("Tell me about Acme Corp", turn_id="t1")
    with anyio.move_on_after(rng.uniform(0.0, 0.05)):
        async with t:
            for chunk in CHUNKS:
                await anyio.sleep(0.003)
                t.append(chunk)
    await check_store(store, t)


# ---------------------------------------------------------------- the repros


async def test_cancel_while_user_store_in_flight_abandons(store: Transport) -> None:
    """``move_on_after(0)`` around a turn: the user store was issued, so it is abandoned."""
    # A token-only HttpTransport asks its server whose the token is before its first turn
    # derives an id: asked here, the turn's first await is the user store.
    await identify(store)
    m = memory(store, "c-cancel")
    t = m.turn("hello", turn_id="t1")
    with anyio.move_on_after(0) as scope:
        async with t:
            t.reply = "hi"
    assert scope.cancelled_caught
    assert await check_store(store, t) == "abandoned"
    assert t.state is TurnState.ABANDONED
    assert t.result.status is TurnState.ABANDONED


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_timeout_during_closing_store_completes_it(store: Transport) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout is new in Python 3.11")
    faulty = FaultyTransport(store).delay("store", 0.2, when=closing_stores())
    m = memory(faulty, "c-cancel")
    t = m.turn("hello", turn_id="t1")

    async def use() -> None:
        async with asyncio.timeout(None) as deadline, t:
            # Armed once the turn is open (an enter on a loaded machine may take longer):
            # it fires during the closing store.
            deadline.reschedule(asyncio.get_running_loop().time() + 0.1)
            t.reply = "hi"

    with pytest.raises(TimeoutError):
        await use()
    assert t.result.status is TurnState.COMPLETED
    assert t.result.completed
    record = await turn_record(store, "c-cancel", "t1")
    assert record["status"] == "completed"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_wait_for_during_closing_store_completes_it(store: Transport) -> None:
    # wait_for's clock starts before the enter, which a loaded machine may take a few
    # hundred ms over: the timeout leaves it 0.5 s, and the closing store outlasts that.
    faulty = FaultyTransport(store).delay("store", 1.0, when=closing_stores())
    m = memory(faulty, "c-cancel")
    t = m.turn("hello", turn_id="t1")
    closing = False

    async def use() -> None:
        nonlocal closing
        async with t:
            t.reply = "hi"
            closing = True

    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(use(), 0.5)
    assert closing  # the timeout fired during the closing store, not the enter
    assert t.result.status is TurnState.COMPLETED
    assert (await turn_record(store, "c-cancel", "t1"))["status"] == "completed"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_failing_task_group_sibling_abandons_turn(store: Transport) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.TaskGroup is new in Python 3.11")
    m = memory(store, "c-cancel")
    t = m.turn("hello", turn_id="t1")
    opened = asyncio.Event()

    async def agent() -> None:
        async with t:
            t.reply = "partial"
            opened.set()
            await asyncio.sleep(10)

    async def failing() -> None:
        await opened.wait()
        raise ValueError("sibling failed")

    async def group() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(agent())
            tg.create_task(failing())

    with pytest.raises(Exception, match="unhandled errors in a TaskGroup") as caught:
        await group()
    assert [type(e) for e in caught.value.exceptions] == [ValueError]  # type: ignore[attr-defined]
    assert t.result.status is TurnState.ABANDONED
    assert await check_store(store, t) == "abandoned"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_repeated_task_cancel_cannot_skip_closing_store(store: Transport) -> None:
    faulty = FaultyTransport(store).delay("store", 0.1, when=closing_stores())
    m = memory(faulty, "c-cancel")
    t = m.turn("hello", turn_id="t1")
    closing = asyncio.Event()

    async def use() -> None:
        async with t:
            t.reply = "done"
            closing.set()

    task = asyncio.ensure_future(use())
    await closing.wait()
    for _ in range(20):
        task.cancel()
        await asyncio.sleep(0.005)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert t.result.status is TurnState.COMPLETED
    assert (await turn_record(store, "c-cancel", "t1"))["status"] == "completed"


async def test_closing_store_is_still_bounded_by_close_timeout(store: Transport) -> None:
    """Shielded, but never forever: a hung closing store ends at close_timeout."""
    faulty = FaultyTransport(store).hang("store", when=closing_stores())
    m = NeotomaMemory(faulty, conversation_id="c-cancel", close_timeout=0.2)
    t = m.turn("hello", turn_id="t1")
    # Cancelled in the body (not at a wall-clock deadline a loaded machine can reach while
    # the turn is still opening); without the bound the closing store would hang forever.
    with anyio.fail_after(30), anyio.CancelScope() as body:
        async with t:
            t.reply = "hi"
            body.cancel()
            await anyio.sleep(1)
    assert t.result.status is TurnState.FAILED
    assert isinstance(t.result.close_error, TimeoutError)
