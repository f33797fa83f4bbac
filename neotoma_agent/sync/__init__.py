"""The synchronous API: the turn protocol for scripts, notebooks and WSGI apps.

The blocking twin of the async API, over the same core (one protocol implementation): a
:class:`SyncStore` owns a transport and an asyncio event loop in a thread of its own; a
:class:`SyncMemory` and its turns hand their work to that loop and wait::

    from neotoma_agent.sync import SyncMemory, SyncStore

    with SyncStore.open("memory.db") as store:        # or SyncStore.connect(base_url)
        memory = SyncMemory(store, conversation_id="chat-42")
        with memory.turn("What do we know about Acme Corp?") as t:
            for chunk in t.stream(llm(t.context())):   # any iterable of str
                print(chunk, end="", flush=True)
        print(t.result.stored_status)

The guarantee is the async one: the user message is stored before the body runs, the
exact reply after it; a body that raises (``KeyboardInterrupt`` and ``SystemExit``
included) is recorded as abandoned with the partial reply, and the exception propagates
unchanged; the closing store is bounded by ``close_timeout``. It works from many threads at
once (each turn in its own thread) and from a thread whose own event loop is running (a
notebook cell, an async app calling sync code). Closing the store stops its loop; a store
never closed is closed at interpreter exit, with a WARNING.
"""

from __future__ import annotations

from ._memory import SyncMemory
from ._store import SyncStore
from ._turn import SyncTurn, current_turn

__all__ = ["SyncMemory", "SyncStore", "SyncTurn", "current_turn"]

for _name in __all__:
    globals()[_name].__module__ = "neotoma_agent.sync"
del _name
