"""OutboxTransport: closing stores the inner transport cannot take now, kept and sent later.

A transport of its own that wraps any other (:class:`~neotoma_agent.HttpTransport`,
:class:`~neotoma_agent.EmbeddedStore`, a wrapper of either). It reads the two hints the
turn engine passes to every ``store`` (``lane``: the conversation; ``deferrable``: a closing
store, which may wait), and since every wrapper forwards every argument of the protocol,
it works at any depth of a stack of wrappers, above or below them.

A ``deferrable`` store that fails with a transient error (connection refused or lost,
timeout, 5xx, 429; see :func:`~neotoma_agent.transport._retry.is_transient`) is appended
durably to the outbox file (:mod:`neotoma_agent.transport._outbox`), same body and key,
and answered at once with ``queued=True`` and the ids the server will give. Queued stores
are sent again, in order per lane, by a background task while the transport is open (every
``poll`` seconds when idle, backing off up to a minute while the inner transport stays
down), by :meth:`OutboxTransport.flush`, and at the next open of the same file; a lane's
later stores wait behind its queued ones, and so does a read of the lane's conversation
(``recent_conversation``, what a turn's history reads), so that it sees the turns the queue
held. Any other failure raises, as without an outbox.

Runs on asyncio and trio (as far as its inner transport does).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio
import anyio.to_thread

from .._records.user_id import tenant_for
from .._util.log import get_logger
from .._util.otel import record_outbox_depth, wants_outbox_depth
from ..exceptions import NeotomaError, OutboxError, error_label
from ._base import RecentConversation, StoreResult, Transport
from ._bodies import ConversationWindow, StoreOptions
from ._forward import Forwarding
from ._outbox import (
    DEFAULT_MAX_ENTRIES,
    Outbox,
    OutboxEntry,
    OutboxFlush,
    OutboxStatus,
    expected_result,
    owner_of,
)
from ._rest import store_arguments, store_body
from ._retry import is_transient

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = ["OutboxTransport"]

_log = get_logger()


class _State(enum.Enum):
    IDLE = "idle"  # the file is opened at the first store (or at `async with`)
    OPEN = "open"
    CLOSED = "closed"


#: what a layer without a ``user_id`` attribute gives (``None`` is a token's user)
_NO_USER: Final = object()


class OutboxTransport(Forwarding):
    """A :class:`~neotoma_agent.Transport` over ``inner`` that keeps closing stores it
    cannot make now in the SQLite file at ``path``, and makes them later.

    Every method goes to ``inner``; ``store`` reads the hints the turn engine passes. A store
    with a ``lane`` (the turn engine's are the conversation's) first sends that lane's queued
    entries, in order; a ``deferrable`` one that fails with a transient error, or finds its
    lane's queue still stuck, is appended to the file (durably: it survives ``kill -9`` once
    the call returned) and answered with ``queued=True``; a turn then ends normally with
    ``t.result.queued``. A 4xx or a mismatch is never queued, and neither is a store that is
    not ``deferrable`` (a turn's user store: store first). A store without a ``lane`` goes
    straight to ``inner``.

    ``max_entries`` bounds the file (over it, :class:`~neotoma_agent.OutboxFullError`:
    nothing is dropped). ``background=True`` delivers queued entries while the transport is
    open, every ``poll`` seconds when idle (at once when this process queues one), backing
    off up to a minute while ``inner`` stays down; ``background=False`` leaves delivery to
    :meth:`flush` and to each lane's next store (a one-shot flush, a test). An entry is
    removed only once ``inner`` confirmed it, so a crash re-delivers and the idempotency key
    makes that a replay; several processes may share one file. A file is one user's:
    the first transport to open it binds it to ``inner``'s user (its ``user_id``, else
    its ``tenant_id``; the default user when it has neither, or when it acts for its
    token's user, an ``HttpTransport`` with no ``user_id``), and one acting for another
    user raises :class:`~neotoma_agent.OutboxError` on opening it, since its entries
    would be delivered into that user's memory.

    ``async with`` enters ``inner`` and opens the file (which starts delivering what an
    earlier run left); :meth:`aclose` stops delivery, closes the file, then ``inner``.
    """

    def __init__(
        self,
        inner: Transport,
        path: str | os.PathLike[str],
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        poll: float = 5.0,
        background: bool = True,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        if not poll > 0:
            raise ValueError("poll must be > 0")
        super().__init__(inner)
        self._path = os.fspath(path)
        self._max_entries = max_entries
        self._poll = float(poll)
        self._background = background
        self._state = _State.IDLE
        self._outbox: Outbox | None = None
        self._opening: anyio.Lock | None = None
        self._lanes: dict[str, tuple[anyio.Lock, int]] = {}
        self._delivery: tuple[anyio.CancelScope, anyio.Event] | None = None
        self._wake: anyio.Event | None = None

    @property
    def path(self) -> str:
        """The outbox file's path."""
        return self._path

    def __repr__(self) -> str:
        return f"OutboxTransport({self.inner!r}, path={self._path!r}, state={self._state.value!r})"

    async def __aenter__(self) -> OutboxTransport:
        if self._state is _State.CLOSED:
            raise RuntimeError("OutboxTransport is closed; create a new one")
        await self.inner.__aenter__()
        await self._open()
        return self

    async def aclose(self) -> None:
        """Stop delivering, close the file, then close ``inner``; idempotent.

        Entries still queued stay in the file for the next open.
        """
        self._state = _State.CLOSED
        delivery, self._delivery = self._delivery, None
        if delivery is not None:
            scope, done = delivery
            scope.cancel()
            await done.wait()
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            outbox.close()
        await self.inner.aclose()

    async def store(
        self, entities: Sequence[Mapping[str, Any]], **options: Unpack[StoreOptions]
    ) -> StoreResult:
        """``inner.store``, kept in order within ``lane``, queued if it must be (see the class).

        Raises :class:`ValueError` for a ``deferrable`` store without a ``lane`` (a queued
        store needs the order it keeps).
        """
        if self._state is _State.CLOSED:
            raise RuntimeError("OutboxTransport is closed; create a new one")
        lane, deferrable = options.get("lane"), options.get("deferrable", False)
        if lane is None and deferrable:
            raise ValueError("a deferrable store needs a lane: the order its queue keeps")
        body = store_body(entities, **options)
        if lane is None:  # no order to keep, nothing to queue
            return await self.inner.store(**store_arguments(body))
        outbox = await self._open()
        async with self._lane(lane):
            if await anyio.to_thread.run_sync(outbox.has_lane, lane):
                _, stuck = await self._drain(outbox, lane)
                if stuck is not None:
                    if deferrable:
                        return await self._enqueue(outbox, lane, body, stuck)
                    raise stuck
            try:
                # This layer keeps the order and the queue: below it, the store is plain.
                return await self.inner.store(**store_arguments(body), lane=lane)
            except NeotomaError as exc:
                if deferrable and is_transient(exc):
                    return await self._enqueue(outbox, lane, body, exc)
                raise

    async def recent_conversation(
        self, conversation_entity_id: str, **window: Unpack[ConversationWindow]
    ) -> RecentConversation:
        """``inner.recent_conversation``, once the conversation's queued stores are sent.

        A turn's history read runs beside its user store, which sends the lane's queue
        first: read before that, the turn a queued close finished would read ``open``, with
        no reply. With nothing queued for the conversation this costs one read of the
        local file, no request.
        """
        await self.deliver_conversation(conversation_entity_id)
        return await super().recent_conversation(conversation_entity_id, **window)

    async def deliver_conversation(self, conversation_entity_id: str) -> None:
        """Send the queued stores of the conversation whose entity id is given, in order
        (nothing queued: a read of the local file, no request).

        Stops at a transient failure, as a lane's store does (the entries stay queued);
        the caller's read then goes to ``inner`` as it would have.
        """
        outbox = await self._open()
        for lane in await anyio.to_thread.run_sync(outbox.lanes):
            # The turn engine's lanes are conversation ids (folded as its keys are); a
            # lane whose entity id is not the read's is another conversation's.
            if _lane_entity_id(lane) != conversation_entity_id:
                continue
            async with self._lane(lane):
                await self._drain(outbox, lane)

    async def flush(self) -> OutboxFlush:
        """Send every queued entry now, in order per lane; what was done.

        Stops a lane at its first transient failure (its later entries stay behind it); an
        entry ``inner`` refuses for good is kept as ``dead`` and logged at ERROR.
        """
        return await self._deliver_all(await self._open())

    async def status(self) -> OutboxStatus:
        """What the file holds: counts, the oldest entry's age, errors, per lane."""
        return await anyio.to_thread.run_sync((await self._open()).status)

    # --- plumbing -------------------------------------------------------------------------

    async def _open(self) -> Outbox:
        if self._state is _State.CLOSED:
            raise RuntimeError("OutboxTransport is closed; create a new one")
        if self._outbox is None:
            if self._opening is None:
                self._opening = anyio.Lock()
            async with self._opening:
                if self._outbox is None:
                    opened = functools.partial(Outbox, self._path, max_entries=self._max_entries)
                    outbox = await anyio.to_thread.run_sync(opened)
                    try:
                        await anyio.to_thread.run_sync(outbox.claim, owner_of(self._user()))
                    except BaseException:
                        outbox.close()
                        raise
                    self._outbox = outbox
                    self._state = _State.OPEN
        if self._background and self._delivery is None and self._state is _State.OPEN:
            scope, done = anyio.CancelScope(), anyio.Event()
            self._delivery = (scope, done)
            self._wake = anyio.Event()
            _spawn(functools.partial(self._deliver_forever, self._outbox, scope, done))
        return self._outbox

    def _user(self) -> str | None:
        """The user ``inner`` acts for, as far as it says (its ``user_id``, else the user
        its ids are scoped to): whose stores the file queues."""
        layer: object = self.inner
        for _ in range(16):  # down the wrappers (a fault injector, a recorder) to the one
            user = getattr(layer, "user_id", _NO_USER)
            if isinstance(user, str):
                return user
            if user is None:
                # An HttpTransport acting for its token's user, whoever the server says
                # that is (its tenant_id once it asked): the same file whether or not it
                # has asked yet.
                return None
            layer = getattr(layer, "inner", None)
            if layer is None:
                break
        return tenant_for(self.inner)

    @contextlib.asynccontextmanager
    async def _lane(self, lane: str) -> AsyncIterator[None]:
        # One lock per lane while anyone uses it: its stores and its deliveries take turns
        # in this process (other processes are kept in order by the file).
        lock, users = self._lanes.get(lane) or (anyio.Lock(), 0)
        self._lanes[lane] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._lanes[lane]
            if users <= 1:
                del self._lanes[lane]
            else:
                self._lanes[lane] = (lock, users - 1)

    async def _enqueue(
        self, outbox: Outbox, lane: str, body: Mapping[str, Any], cause: NeotomaError
    ) -> StoreResult:
        key = str(body["idempotency_key"])
        entry_id = await anyio.to_thread.run_sync(outbox.append, lane, "store", key, body)
        # Queued is kept safe on disk and delivered later: INFO. The entry going dead (the
        # server refused it for good) is what risks the data, and that is an ERROR.
        _log.info("outbox.queued", entry_id=entry_id, idempotency_key=key, error=error_label(cause))
        if self._wake is not None:
            self._wake.set()
        await self._record_depth(outbox)
        return expected_result(body["entities"])

    async def _record_depth(self, outbox: Outbox) -> None:
        # The outbox depth gauge; the count is read only when a meter provider records it,
        # and a failed read costs the gauge one point, never the store that was queued.
        if wants_outbox_depth():
            try:
                depth = await anyio.to_thread.run_sync(outbox.count)
            except Exception as exc:
                _log.warning("outbox.depth_unread", error=type(exc).__name__)
                return
            record_outbox_depth(self._path, depth)

    async def _send(self, entry: OutboxEntry) -> None:
        if entry.action != "store":
            # Only stores are ever queued; a file written otherwise is kept, not guessed at.
            raise OutboxError(f"outbox entry {entry.id} has an unknown action {entry.action!r}")
        await self.inner.store(**store_arguments(entry.body), lane=entry.lane)

    async def _drain(self, outbox: Outbox, lane: str) -> tuple[OutboxFlush, NeotomaError | None]:
        """Send ``lane``'s entries in order (the caller holds the lane); the error that
        stopped delivery, if a transient one did."""
        delivered = dead = 0
        while True:
            entry = await anyio.to_thread.run_sync(outbox.head, lane)
            if entry is None:
                if delivered:
                    await self._record_depth(outbox)
                return OutboxFlush(delivered=delivered, remaining=0, dead=dead), None
            try:
                await self._send(entry)
            except NeotomaError as exc:
                transient = is_transient(exc)
                what = error_label(exc)
                await anyio.to_thread.run_sync(
                    functools.partial(outbox.failed, entry.id, what, dead=not transient)
                )
                if transient:
                    # Kept and retried later, like a request retry: INFO.
                    _log.info(
                        "outbox.delivery_failed",
                        entry_id=entry.id,
                        idempotency_key=entry.idempotency_key,
                        error=what,
                    )
                    remaining = await anyio.to_thread.run_sync(outbox.count)
                    return OutboxFlush(delivered, remaining, dead, last_error=what), exc
                # Refused for good: kept (never dropped) but no longer holding the lane back.
                _log.error(
                    "outbox.dead",
                    entry_id=entry.id,
                    idempotency_key=entry.idempotency_key,
                    error=what,
                )
                dead += 1
                continue
            # Removed only now that the store confirmed it: a crash before this line
            # re-delivers, and the idempotency key makes that a replay.
            await anyio.to_thread.run_sync(outbox.remove, entry.id)
            delivered += 1
            _log.info(
                "outbox.delivered",
                entry_id=entry.id,
                idempotency_key=entry.idempotency_key,
                age_s=round(time.time() - entry.created_at, 3),
            )

    async def _deliver_all(self, outbox: Outbox) -> OutboxFlush:
        delivered = dead = 0
        last_error: str | None = None
        for lane in await anyio.to_thread.run_sync(outbox.lanes):
            async with self._lane(lane):
                done, _ = await self._drain(outbox, lane)
            delivered += done.delivered
            dead += done.dead
            last_error = done.last_error or last_error
        remaining = await anyio.to_thread.run_sync(outbox.count)
        return OutboxFlush(delivered, remaining, dead, last_error=last_error)

    async def _deliver_forever(
        self, outbox: Outbox, scope: anyio.CancelScope, done: anyio.Event
    ) -> None:
        """The background delivery: poll while idle, back off while ``inner`` is down."""
        try:
            with scope:
                failures = 0
                while self._state is _State.OPEN:
                    self._wake = anyio.Event()
                    try:
                        flushed = await self._deliver_all(outbox)
                    except Exception as exc:  # never let the task die silently
                        _log.warning("outbox.delivery_error", error=type(exc).__name__)
                        flushed = OutboxFlush(0, 1, 0, last_error=type(exc).__name__)
                    if flushed.last_error is None:
                        failures = 0
                        # Idle: wake early when this process queues something.
                        with anyio.move_on_after(self._poll):
                            await self._wake.wait()
                    else:
                        failures += 1
                        # Full jitter over an exponential wait, so clients do not return together.
                        cap = min(60.0, self._poll * 2 ** min(failures - 1, 16))
                        await anyio.sleep(random.uniform(0.5, 1.0) * cap)
        finally:
            done.set()


def _lane_entity_id(lane: str) -> str:
    """The entity id of the conversation a lane of the turn engine keeps in order."""
    from .._records.keys import conversation_entity_id  # the turn engine's naming, used here only

    return conversation_entity_id(lane)


def _spawn(task: Callable[[], Awaitable[None]]) -> None:
    """Start ``task`` beside the caller, for as long as the event loop runs (it is stopped
    through its own cancel scope): an asyncio task, or a trio system task."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
        else:
            trio.lowlevel.spawn_system_task(task, name="neotoma-agent outbox delivery")
            return
    import asyncio

    async def run() -> None:
        await task()

    asyncio.get_running_loop().create_task(run(), name="neotoma-agent outbox delivery")
