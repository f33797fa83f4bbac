"""A script using the sync API, for the tests that interrupt or end a real process.

    python tests/sync/sync_child.py DB SCENARIO

Conversation ``child``, turn ``t1``. It prints one line when it reaches the point the test
acts on, then:

- ``body``: the reply so far is "Half a reply"; the body blocks (a model call) until the
  test's SIGINT;
- ``closing``: once a line arrives on stdin, the reply is whole and the turn closes; its
  closing store says ``closing-store`` once the main thread waits for it holding Ctrl-C
  back, and goes on when the next line arrives on stdin (the test sends SIGINT twice
  meanwhile; the child says ``sigint`` as each one reaches it);
- ``unclosed``: one turn, then the script ends without closing its store;
- ``exit``: the process exits with ``os._exit`` in the body (no cleanup of any kind).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import anyio.to_thread

from neotoma_agent import EmbeddedStore
from neotoma_agent.sync import SyncMemory, SyncStore
from neotoma_agent.testing import key_phase
from neotoma_agent.transport._forward import Forwarding


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class GatedClose(Forwarding):
    """The closing store waits for the test's line on stdin (the test acts meanwhile)."""

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "store" and key_phase(kwargs["idempotency_key"]) == "assistant":
            await anyio.to_thread.run_sync(_announce_and_wait)
        return await super()._call(method, *args, **kwargs)


def _announce_and_wait() -> None:
    # The main thread holds Ctrl-C back (its own SIGINT handler in place of Python's) from
    # when it starts waiting for the close: from then on a SIGINT tests what it should.
    deadline = time.monotonic() + 5  # within the close's own 10 s
    while signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        if time.monotonic() > deadline:
            raise RuntimeError("the main thread never waited for the closing store")
        time.sleep(0.001)
    say("closing-store")
    sys.stdin.readline()


def _report_signals() -> None:
    """Say ``sigint`` each time a SIGINT reaches this process (Python's wakeup fd gets a
    byte from the C-level handler), from a thread of its own."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)

    def watch() -> None:
        while os.read(read, 1):
            say("sigint")

    threading.Thread(target=watch, daemon=True).start()


def main() -> None:
    path, scenario = sys.argv[1], sys.argv[2]
    # An application that configured logging as most scripts do (WARNING and up).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    store = EmbeddedStore.open(path)
    if scenario == "closing":
        _report_signals()
    store = SyncStore(GatedClose(store) if scenario == "closing" else store)
    memory = SyncMemory(store, conversation_id="child")
    if scenario == "unclosed":
        with memory.turn("hello", turn_id="t1") as t:
            t.reply = "Goodbye."
        say("done")
        return  # the store is never closed
    with store, memory.turn("hello", turn_id="t1") as t:
        if scenario == "body":
            t.reply += "Half a reply"
            say("in-body")
            time.sleep(60)
            t.reply += " never shown"
        elif scenario == "closing":
            say("ready")
            sys.stdin.readline()
            t.reply = "The whole reply."
            say("closing")
        elif scenario == "exit":
            t.reply = "Cut"
            say("exiting")
            os._exit(0)
    say("finished")


if __name__ == "__main__":
    main()
