"""A script using the sync API, for the tests that interrupt or end a real process.

    python tests/sync/sync_child.py DB SCENARIO

Conversation ``child``, turn ``t1``. It prints one line when it reaches the point the test
acts on, then:

- ``body``: the reply so far is "Half a reply"; the body blocks (a model call) until the
  test's SIGINT;
- ``closing``: once a line arrives on stdin, the reply is whole and the closing store takes
  a second (the test sends SIGINT while it runs, twice);
- ``unclosed``: one turn, then the script ends without closing its store;
- ``exit``: the process exits with ``os._exit`` in the body (no cleanup of any kind).
"""

from __future__ import annotations

import logging
import os
import sys
import time

from neotoma_agent import EmbeddedStore
from neotoma_agent.sync import SyncMemory, SyncStore
from neotoma_agent.testing import FaultyTransport, key_phase


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    path, scenario = sys.argv[1], sys.argv[2]
    # An application that configured logging as most scripts do (WARNING and up).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    transport = FaultyTransport(EmbeddedStore.open(path))
    if scenario == "closing":
        transport.delay(
            "store", 1.0, when=lambda m, a, kw: key_phase(kw["idempotency_key"]) == "assistant"
        )
    store = SyncStore(transport)
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
