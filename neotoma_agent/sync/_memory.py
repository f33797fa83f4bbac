"""``SyncMemory``: :class:`~neotoma_agent.NeotomaMemory` for synchronous code."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from neotoma_agent import NeotomaMemory, Turn

from ._forward import forward
from ._store import GRACE_S, SyncStore
from ._turn import SyncTurn

__all__ = ["SyncMemory"]

P = ParamSpec("P")
T = TypeVar("T")


def _blocking(
    method: Callable[Concatenate[NeotomaMemory, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SyncMemory, P], T]:
    """A blocking method with the signature of the async ``method``, run on the store's loop.

    Ctrl-C while it runs cancels the call (as ``Task.cancel()`` would: a closing phase
    still finishes its store, an open_turn that may have written the user message records
    the turn as abandoned), waits for it to end within ``close_timeout``, then propagates.
    """
    name = method.__name__

    @functools.wraps(method)
    def call(self: SyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        memory = self._memory

        async def run() -> T:
            return await method(memory, *args, **kwargs)

        return self._store._run(run, grace=memory.close_timeout + GRACE_S)

    call.__doc__ = (
        f"Blocking :meth:`neotoma_agent.NeotomaMemory.{name}` (same arguments, same result, "
        f"run on the store's loop; call it without ``await``).\n\n{method.__doc__ or ''}"
    )
    return call


def _driven(
    method: Callable[Concatenate[NeotomaMemory, P], Turn],
) -> Callable[Concatenate[SyncMemory, P], SyncTurn]:
    """A method with the signature of ``method`` (``NeotomaMemory.turn``): its turn, as a
    :class:`SyncTurn` the calling thread drives."""

    @functools.wraps(method)
    def call(self: SyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> SyncTurn:
        memory = self._memory
        return SyncTurn._create(self._store, method(memory, *args, **kwargs), memory.close_timeout)

    call.__doc__ = (
        f"As :meth:`neotoma_agent.NeotomaMemory.{method.__name__}` (same arguments), as a "
        f":class:`SyncTurn`: ``with memory.turn(...) as t:``.\n\n{method.__doc__ or ''}"
    )
    return call


class SyncMemory:
    """Turn-protocol memory for one conversation, for synchronous code.

    The blocking twin of :class:`~neotoma_agent.NeotomaMemory`: the same settings (passed on
    as keyword arguments: ``history_turns``, ``close_timeout``, ``retrieval_limit``, ...),
    the same methods without ``await``, and ``with memory.turn(msg) as t:`` in place of
    ``async with``::

        with SyncStore.open("memory.db") as store:
            memory = SyncMemory(store, conversation_id="chat-42", platform="my-script")
            acme = memory.remember("company", name="Acme Corp", website="acme.com")
            with memory.turn("What do we know about Acme Corp?") as t:
                for chunk in t.stream(llm(f"{t.context()}\\n\\nUser: {t.user_message}")):
                    print(chunk, end="", flush=True)
            for h in memory.history(limit=10):
                print(h.status, h.user, h.reply)

    The explicit API, for a turn spread over calls (a web request that opens it, another
    that closes it): ``open_turn``, ``close_turn``, ``abandon_turn``, ``record_turn``. One
    memory may be used from many threads at once, each turn in its own thread.
    """

    __slots__ = ("_memory", "_store")

    def __init__(self, store: SyncStore, *, conversation_id: str, **settings: Any) -> None:
        """A memory for ``conversation_id`` on ``store``; ``settings`` are
        :class:`~neotoma_agent.NeotomaMemory`'s (checked here, before any I/O)."""
        if not isinstance(store, SyncStore):
            raise TypeError(f"SyncMemory takes a SyncStore, not {type(store).__name__}")
        self._store = store
        self._memory = NeotomaMemory(store.transport, conversation_id=conversation_id, **settings)

    def __repr__(self) -> str:
        return f"<SyncMemory conversation_id={self._memory.conversation_id!r}>"

    @property
    def store(self) -> SyncStore:
        """The store this memory runs on."""
        return self._store

    @property
    def memory(self) -> NeotomaMemory:
        """The async memory underneath (for ``store.call(memory.memory.X, ...)``)."""
        return self._memory

    conversation_id: str = forward("_memory", NeotomaMemory)
    """The conversation this memory stores turns in."""

    turn = _driven(NeotomaMemory.turn)
    """A new turn for ``user_message``; use it as ``with memory.turn(...) as t:``.

    Arguments as :meth:`neotoma_agent.NeotomaMemory.turn` (bad ids raise ``ValueError``
    here, before any I/O); see :class:`SyncTurn` for the body and the guarantee.
    """

    remember = _blocking(NeotomaMemory.remember)
    history = _blocking(NeotomaMemory.history)
    retrieve = _blocking(NeotomaMemory.retrieve)
    search = _blocking(NeotomaMemory.search)
    open_turn = _blocking(NeotomaMemory.open_turn)
    close_turn = _blocking(NeotomaMemory.close_turn)
    abandon_turn = _blocking(NeotomaMemory.abandon_turn)
    record_turn = _blocking(NeotomaMemory.record_turn)
