"""Run one scenario on the embedded store and on a Neotoma server, and diff what each reports.

A developer's tool for local checks against a real Neotoma server (not a test, never run in
CI). Build and start the server as described in CONTRIBUTING.md ("Checks against a real
Neotoma server"), then, from a checkout with the package installed (``pip install -e .``)::

    python scripts/real_server_check.py --url http://127.0.0.1:PORT --token dev-local

The same scenario runs twice, through the public API only: once on a fresh embedded store (a
temporary file), once on the server at ``--url``. In conversation ``--conversation``
(default ``peer-check``) it seeds an entity (``memory.remember``) and two that a server
names from their snapshot (an event stored by an undeclared ``name``, a company with a
``canonical_name`` field: their names and snapshots read back), then runs turns that
complete (one reply cites the seeded entity), one whose body raises, one cancelled with a
partial reply, a replay (same turn id and text again), a mismatch and a revision (same turn
id, new reply: refused, then ``revision=2``), turns with tool calls (ok, error, cancelled
inside ``t.tool``, a replayed turn with recorded calls, one with calls ``t.tool`` timed;
then ``memory.tools`` and the history read them back), lookups of the conversation's,
its messages' and its turn records' names by substrings, and a turn left open, which
``neotoma-agent audit --repair --min-age 0`` (a subprocess) then closes. Then it runs
``neotoma-agent show CONVERSATION --json``, ``stats --json`` and ``audit --json``
(subprocesses, ``--db PATH`` on one side, ``--url URL --token T`` on the other).

It prints every field where the two sides differ, as ``path: embedded=... real=...``, with
entity ids mapped to labels (``E1``, ``E2``, ... by order of first appearance on each side),
timestamps, durations and the store's name normalised. Exit status 0 when both sides report
the same, 1 with the diff otherwise, 2 on a usage or connection error.

Use a fresh server (``start-peer.sh`` starts each instance on a new data directory):
``stats`` counts the whole store, and a second run on the same server replays every turn.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio

from neotoma_agent import (
    EmbeddedStore,
    HttpTransport,
    NeotomaError,
    NeotomaMemory,
    Transport,
    TurnResult,
)

EMBEDDED = "embedded"
REAL = "real"

_ENTITY_ID = re.compile(r"\bent_[0-9a-f]{24}\b")
_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
# Values that differ on every run or between the two sides by construction.
_VOLATILE_KEYS = {"duration_ms": "<ms>", "store": "<store>"}


class ScenarioError(RuntimeError):
    """The failure the raising turn's body throws."""


# ---------------------------------------------------------------------------- the scenario


def _turn_outcome(step: str, result: TurnResult | None) -> dict[str, Any]:
    if result is None:
        return {"step": step, "result": None}
    return {
        "step": step,
        "status": result.status.value,
        "stored_status": result.stored_status,
        "turn_key": result.turn_key,
        "conversation_entity_id": result.conversation_entity_id,
        "user_message_id": result.user_message_id,
        "assistant_message_id": result.assistant_message_id,
        "turn_record_id": result.turn_record_id,
        "retrieved_ids": list(result.retrieved_ids),
        "cited_ids": list(result.cited_ids),
        "produced_ids": list(result.produced_ids),
        "reply_chars": result.reply_chars,
        "error_class": result.error_class,
        "replayed": result.replayed,
        "queued": result.queued,
        "tools": [
            {
                "name": c.name,
                "status": c.status,
                "invoked_at": c.invoked_at,
                "error_class": c.error_class,
                "call_id": c.call_id,
            }
            for c in result.tools
        ],
        "tool_ids": list(result.tool_ids),
        "retrieval": {
            "identifiers": result.retrieval.identifiers,
            "lookups": result.retrieval.lookups,
            "misses": result.retrieval.misses,
            "failures": result.retrieval.failures,
            "timeouts": result.retrieval.timeouts,
            "retrieved": result.retrieval.retrieved,
        },
    }


async def _scenario(transport: Transport, conversation_id: str) -> list[dict[str, Any]]:
    """Every step of the scenario on ``transport``; what the library said at each."""
    memory = NeotomaMemory(
        transport,
        conversation_id=conversation_id,
        platform="neotoma-agent-peer-check",
        conversation_title="Real server check",
    )
    steps: list[dict[str, Any]] = []

    acme = await memory.remember("company", name="Acme Corp", website="acme.com")
    steps.append({"step": "seed", "entity_id": acme})
    await _named_by_snapshot(memory, transport, steps)

    async with memory.turn("What do we know about Acme Corp?", turn_id="t1", turn_number=1) as t:
        t.cite(acme)
        t.reply = f"Acme Corp ({acme}) is a client; their website is acme.com."
    steps.append(_turn_outcome("complete, cites the seeded entity", t.result))

    async with memory.turn("Thanks!", turn_id="t2", turn_number=2) as t:
        t.reply = "You're welcome!"
    steps.append(_turn_outcome("complete", t.result))

    raising = memory.turn("Summarize the Lisbon offsite plan.", turn_id="t3", turn_number=3)
    try:
        async with raising as t:
            t.reply = "The Lisbon offsite"
            raise ScenarioError("the model connection dropped")
    except ScenarioError:
        pass
    steps.append(_turn_outcome("body raises", raising.result))

    cancelled = memory.turn("Draft the offsite agenda.", turn_id="t4", turn_number=4)
    with anyio.CancelScope() as scope:
        async with cancelled as t:
            t.reply = "Day one covers the roadmap, "
            scope.cancel()
            await anyio.sleep(30)
    steps.append(_turn_outcome("cancelled with a partial reply", cancelled.result))

    async with memory.turn("Thanks!", turn_id="t2", turn_number=2) as t:
        t.reply = "You're welcome!"
    steps.append(_turn_outcome("replay of t2", t.result))

    mismatch = memory.turn("Thanks!", turn_id="t2", turn_number=2)
    refused: str | None = None
    log = logging.getLogger("neotoma_agent")
    level = log.level
    log.setLevel(logging.CRITICAL)  # the refused close logs an ERROR, by design here
    try:
        async with mismatch as t:
            t.reply = "You're very welcome!"
    except NeotomaError as exc:
        refused = type(exc).__name__
    finally:
        log.setLevel(level)
    steps.append(
        {**_turn_outcome("t2, new reply, no revision", mismatch.result), "raised": refused}
    )

    async with memory.turn("Thanks!", turn_id="t2", turn_number=2, revision=2) as t:
        t.reply = "You're very welcome!"
    steps.append(_turn_outcome("t2 revision 2", t.result))

    left_open = await memory.open_turn("Are you still there?", turn_id="t5", turn_number=5)
    steps.append(
        {
            "step": "left open",
            "turn_key": left_open.turn_key,
            "user_message_id": left_open.user_message_id,
            "conversation_entity_id": left_open.conversation_entity_id,
            "retrieved_ids": list(left_open.retrieved_ids),
            "replayed": left_open.replayed,
        }
    )
    # After t5 in time as in number: a real server's route does not say turn numbers, so
    # both sides order these turns by when they were written.
    await _tool_steps(memory, steps)
    await _bookkeeping_lookups(transport, conversation_id, steps)
    return steps


async def _bookkeeping_lookups(
    transport: Transport, conversation_id: str, steps: list[dict[str, Any]]
) -> None:
    """The names of conversations, messages and turn records, looked up by substrings: a
    server finds them by any part of their names (``conversation_message:<turn key>``,
    ``conversation_turn:<session>|<turn>``), with or without the type."""
    short = conversation_id[2:]
    needles: list[tuple[str, str | None]] = [
        (short, None),
        (f"{conversation_id}:t2", None),
        (f"{short}:t6:assistant", None),
        (f"message:{conversation_id}:t", None),
        (f"{conversation_id}|t1", None),
        (f"conversation:{conversation_id}", "conversation"),
        ("t8", "conversation_turn"),
        (f"{conversation_id}:t1", "conversation_message"),
        ("k-c", None),
    ]
    for needle, entity_type in needles:
        found = await transport.retrieve_entity_by_identifier(needle, entity_type=entity_type)
        steps.append(
            {
                "step": f"lookup of {needle!r}" + (f" ({entity_type})" if entity_type else ""),
                "match_mode": found.match_mode,
                "found": [[e.entity_type, e.canonical_name, e.entity_id] for e in found.entities],
            }
        )


async def _named_by_snapshot(
    memory: NeotomaMemory, transport: Transport, steps: list[dict[str, Any]]
) -> None:
    """Entities a server names from their snapshot, not from the field they were stored by:
    an identifying field the type does not declare, and a ``canonical_name`` field."""
    cases = {
        "undeclared identifying field": (
            "event",
            {"name": "Globex board meeting", "notes": "Quarterly review with the board"},
        ),
        "canonical_name field": (
            "company",
            {"canonical_name": "INITECH-X", "name": "Initech", "website": "initech.example"},
        ),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # remember() warns of the undeclared field, by design
        for step, (entity_type, fields) in cases.items():
            entity_id = await memory.remember(entity_type, **fields)
            found = await transport.retrieve_entity_by_identifier(entity_id)
            snapshot = await transport.get_entity_snapshot(entity_id)
            steps.append(
                {
                    "step": step,
                    "entity_id": entity_id,
                    "canonical_name": [e.canonical_name for e in found.entities],
                    "snapshot": dict(snapshot.snapshot),
                }
            )


async def _tool_steps(memory: NeotomaMemory, steps: list[dict[str, Any]]) -> None:
    """Turns with tool calls: ok, error, cancelled, and a replay; then read them back."""
    async with memory.turn("Flights to Lisbon?", turn_id="t6", turn_number=6, model="m-1") as t:
        async with t.tool("search_flights", {"to": "LIS", "note": "line\nbreak"}) as call:
            call.result = {"offers": [{"id": "AB1", "price": 182.5}]}
        t.record_tool(
            "book",
            args={"offer": "AB1"},
            result={"error": "sold out"},
            status="error",
            invoked_at="2026-12-01T10:00:00.000Z",
            duration_ms=41.5,
            call_id="toolu_01",
            error_class="app.SoldOut",
        )
        t.context()
        t.reply = "AB1 was sold out while booking."
    steps.append(_turn_outcome("tool calls: ok and error", t.result))

    cancelled = memory.turn("Book the next one.", turn_id="t7", turn_number=7)
    with anyio.CancelScope() as scope:
        async with cancelled as t:
            t.reply = "Booking "
            async with t.tool("book", {"offer": "AB2"}):
                scope.cancel()
                await anyio.sleep(30)
    steps.append(_turn_outcome("tool call cancelled", cancelled.result))

    for attempt in ("tool calls replayed, first run", "tool calls replayed, second run"):
        async with memory.turn("Any seats?", turn_id="t8", turn_number=8) as t:
            for n, to in enumerate(("LIS", "OPO")):
                t.record_tool(
                    "search_flights",
                    args={"to": to},
                    result=[],
                    invoked_at=f"2026-12-01T11:00:00.00{n}Z",
                    call_id=f"toolu_1{n}",
                )
            t.reply = "No seats left."
        steps.append(_turn_outcome(attempt, t.result))

    # calls t.tool timed: the re-run's run later, for longer, and still replay
    for attempt in ("timed calls replayed, first run", "timed calls replayed, second run"):
        async with memory.turn("Seats on the late flight?", turn_id="t9", turn_number=9) as t:
            async with t.tool("search_flights", {"to": "LIS"}) as call:
                await anyio.sleep(0.01)
                call.result = []
            t.reply = "None left."
        steps.append(_turn_outcome(attempt, t.result))

    read = await memory.tools("t6")
    steps.append({"step": "memory.tools(t6)", "calls": [c.to_json() for c in read]})
    history = await memory.history(limit=None)
    steps.append(
        {
            "step": "history tools",
            "turns": [
                {"turn_id": h.turn_id, "tools": [c.to_json() for c in h.tools]} for h in history
            ],
        }
    )


# ---------------------------------------------------------------------------- one side


def _cli(store_args: list[str], *args: str) -> dict[str, Any]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"NEOTOMA_URL", "NEOTOMA_TOKEN", "NEOTOMA_AGENT_DB"}
    }
    proc = subprocess.run(
        [sys.executable, "-m", "neotoma_agent", *args, *store_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    try:
        output: Any = json.loads(proc.stdout)
    except json.JSONDecodeError:
        output = {"stdout": proc.stdout, "stderr": proc.stderr}
    return {"exit_status": proc.returncode, "output": output}


def _run_side(
    connect: Callable[[], Transport], store_args: list[str], conversation_id: str
) -> dict[str, Any]:
    """The scenario over ``connect()``, closed before the CLI reads the same store."""

    async def scenario() -> list[dict[str, Any]]:
        async with connect() as transport:
            return await _scenario(transport, conversation_id)

    report: dict[str, Any] = {"scenario": anyio.run(scenario)}
    report["audit --repair --min-age 0"] = _cli(
        store_args, "audit", "--repair", "--min-age", "0", "--json"
    )
    report["show --json"] = _cli(store_args, "show", conversation_id, "--json")
    report["stats --json"] = _cli(store_args, "stats", "--json")
    report["audit --json"] = _cli(store_args, "audit", "--json")
    return report


# ---------------------------------------------------------------------------- the diff


def _normalise(value: Any, labels: dict[str, str], key: str | None = None) -> Any:
    if key in _VOLATILE_KEYS and value is not None:
        return _VOLATILE_KEYS[key]
    if isinstance(value, dict):
        return {k: _normalise(v, labels, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, labels) for v in value]
    if isinstance(value, str):

        def label(match: re.Match[str]) -> str:
            return labels.setdefault(match.group(0), f"E{len(labels) + 1}")

        return _TIMESTAMP.sub("<time>", _ENTITY_ID.sub(label, value))
    return value


def _flatten(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _flatten(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _flatten(v, f"{path}[{i}]")
    else:
        yield path, value


_MISSING = object()


def diff(embedded: dict[str, Any], real: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(path, embedded value, real value)`` for every leaf where the two reports differ."""
    left = dict(_flatten(embedded))
    right = dict(_flatten(real))
    paths = list(left) + [p for p in right if p not in left]
    return [
        (p, left.get(p, _MISSING), right.get(p, _MISSING))
        for p in paths
        if left.get(p, _MISSING) != right.get(p, _MISSING)
    ]


def _show(value: Any) -> str:
    return "(absent)" if value is _MISSING else json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run one scenario on a fresh embedded store and on the Neotoma server at "
        "--url, and print where their reports differ (exit 1) or nothing (exit 0)."
    )
    parser.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:18622")
    parser.add_argument("--token", default=None, help="its bearer token (e.g. dev-local)")
    parser.add_argument("--conversation", default="peer-check", help="conversation id")
    parser.add_argument("--json", action="store_true", help="also print both normalised reports")
    args = parser.parse_args(argv)
    # The scenario's abandoned turns log WARNINGs by design.
    logging.getLogger("neotoma_agent").setLevel(logging.ERROR)

    url_args = ["--url", args.url] + (["--token", args.token] if args.token else [])
    with tempfile.TemporaryDirectory(prefix="peer-check-") as tmp:
        db = Path(tmp) / "embedded.db"
        try:
            reports = {
                EMBEDDED: _run_side(
                    lambda: EmbeddedStore.open(db), ["--db", str(db)], args.conversation
                ),
                REAL: _run_side(
                    lambda: HttpTransport(args.url, token=args.token), url_args, args.conversation
                ),
            }
        except NeotomaError as exc:
            print(f"real_server_check: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2

    labels: dict[str, dict[str, str]] = {EMBEDDED: {}, REAL: {}}
    normalised = {side: _normalise(r, labels[side]) for side, r in reports.items()}
    same_ids = sum(1 for raw, label in labels[EMBEDDED].items() if labels[REAL].get(raw) == label)
    if args.json:
        print(json.dumps(normalised, indent=2, ensure_ascii=False))
    print(
        f"entity ids: {len(labels[EMBEDDED])} on the embedded side, {len(labels[REAL])} on "
        f"the real side, {same_ids} identical under the same label"
    )
    differences = diff(normalised[EMBEDDED], normalised[REAL])
    for path, left, right in differences:
        print(f"{path}: {EMBEDDED}={_show(left)} {REAL}={_show(right)}")
    if differences:
        print(f"{len(differences)} difference(s)")
        return 1
    print("no differences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
