"""A child process for the crash tests: run scripted turns, SIGKILL itself at one exact point.

    python tests/crash_child.py DB KILL_AT [asyncio|trio]

The script (conversation ``crash-conv``) makes these stores, numbered from 1::

    turn t1  completed, one reply             1 user    2 closing
    turn t2  completed, streamed reply        3 user    4 closing
    turn t3  body raises after a partial      5 user    6 abandoned (partial reply kept)
    turn t4  body raises at once              7 user    8 abandoned (no reply)
    turn t5  record_turn (whole turn)         9 recorded
    turn t6  open_turn ... close_turn        10 user   11 closing

``KILL_AT`` is ``none`` or ``MODE:N``:

- ``before:N``: just before store N is handed to the store (nothing of it is written);
- ``during:N``: inside store N, after its writes, as the COMMIT that would make them
  durable starts (so SQLite must roll them back on the next open);
- ``after:N``: right after store N returned (it is durable);
- ``body:N``: in the body of turn tN, after its user store (mid-stream for t2).

The kill is ``os.kill(os.getpid(), SIGKILL)``: no exit handler, no finally block, no
closing store runs, exactly like ``kill -9`` or an OOM kill.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import structlog

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore

CONVERSATION = "crash-conv"

#: store number -> (turn id, phase); the tests derive what a kill leaves behind from it
STORES: Mapping[int, tuple[str, str]] = {
    1: ("t1", "user"),
    2: ("t1", "closing"),
    3: ("t2", "user"),
    4: ("t2", "closing"),
    5: ("t3", "user"),
    6: ("t3", "closing"),
    7: ("t4", "user"),
    8: ("t4", "closing"),
    9: ("t5", "recorded"),
    10: ("t6", "user"),
    11: ("t6", "closing"),
}


def die(where: str) -> None:
    """SIGKILL this process now (after saying where, for the test's failure message)."""
    sys.stdout.write(f"killing at {where}\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class KillAt(RecordingTransport):
    """Counts stores and kills the process before, during or after store ``n``."""

    def __init__(self, inner: EmbeddedStore, mode: str, n: int) -> None:
        super().__init__(inner)
        self.mode, self.n, self.stores = mode, n, 0

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method != "store":
            return await super()._call(method, *args, **kwargs)
        self.stores += 1
        here = self.stores == self.n
        if here and self.mode == "before":
            die(f"before store {self.n}")
        if here and self.mode == "during":
            _arm_kill_inside_next_store()
        result = await super()._call(method, *args, **kwargs)
        if here and self.mode == "after":
            die(f"after store {self.n}")
        return result


# "during": SQLite's statement trace sees the store's writes go by, then the COMMIT that
# would make them durable; the process dies as that COMMIT starts. Hooking the connection
# (not the store's internals) keeps the kill point exact whatever the store's code looks like.
_real_connect = sqlite3.connect
_armed = False
_wrote = False


def _arm_kill_inside_next_store() -> None:
    global _armed, _wrote
    _armed, _wrote = True, False


def _trace(sql: str) -> None:
    global _wrote
    if not _armed:
        return
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    if head in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
        _wrote = True
    elif head in ("COMMIT", "END") and _wrote:
        die("inside a store, before its commit")


def _connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    conn: sqlite3.Connection = _real_connect(*args, **kwargs)
    conn.set_trace_callback(_trace)
    return conn


async def script(path: str, kill_at: str) -> None:
    mode, _, number = kill_at.partition(":")
    n = int(number) if number else 0
    sqlite3.connect = _connect  # type: ignore[assignment]  # the store's connection traces

    async with EmbeddedStore.open(path) as store:
        transport = KillAt(store, mode, n)
        memory = NeotomaMemory(transport, conversation_id=CONVERSATION, platform="crash-test")

        def body(turn: int) -> None:
            if mode == "body" and n == turn:
                die(f"in the body of turn t{turn}")

        async with memory.turn("Hello, can you help me plan the Lisbon trip?", turn_id="t1") as t:
            body(1)
            t.reply = "Of course. When do you want to go?"

        async def chunks() -> AsyncIterator[str]:
            for i, chunk in enumerate(["Acme Corp ", "is a ", "client."]):
                if i == 1:
                    body(2)  # the user has seen the first chunk
                yield chunk

        async with memory.turn("What do we know about Acme Corp?", turn_id="t2") as t:
            async for _ in t.stream(chunks()):
                pass

        try:
            async with memory.turn("Summarise the Lisbon plan.", turn_id="t3") as t:
                body(3)
                t.reply = "Let me"
                raise RuntimeError("model crashed mid-reply")
        except RuntimeError:
            pass

        try:
            async with memory.turn("And the budget?", turn_id="t4"):
                body(4)
                raise TimeoutError("model timed out")
        except TimeoutError:
            pass

        await memory.record_turn("Imported question", "Imported answer", turn_id="t5")

        opened = await memory.open_turn("Book the hotel", turn_id="t6")
        body(6)
        await memory.close_turn(opened, "Booked.")


def main() -> None:
    path, kill_at = sys.argv[1], sys.argv[2]
    backend = sys.argv[3] if len(sys.argv) > 3 else "asyncio"
    # This process is an application: keep the library's log events off stdout.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    anyio.run(script, path, kill_at, backend=backend)
    sys.stdout.write("finished\n")


if __name__ == "__main__":
    main()
