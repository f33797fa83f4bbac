"""Benchmark: what the full-text indexes cost a turn, alone, counted by callgrind.

    python benchmarks/fts_instructions.py [--warmup 1500] [--turns 1000] [--short-ids]
        [--variants default,automerge-0,...] [--json PATH]

A child process (one per variant, under ``valgrind --tool=callgrind``) makes a fresh file
with the store's two full-text indexes as the store declares them (``search_text``, its
words; ``bookkeeping_names``, trigrams of the names; leaves of
``TURN_INDEX_LEAF_BYTES``), and writes into them what a short turn of ``peers.py`` writes,
shaped as the store shapes it: the enter's transaction indexes the user's message (64
characters) and the turn's names document (its turn record's name and its two messages'
names: ``_turn_names``), the close's transaction the reply (210 characters), 16
conversations in rotation. ``--warmup`` turns, then ``--turns`` counted ones (the
``_callgrind`` marks); printed: instructions a counted turn, FTS5 and the two commits
(a one-row table written in each transaction, so that each commits as the store's do).

Turn ids are UUIDs as the library makes them (``--short-ids``: ``t1``, ``t2``, ... as the
other benchmarks' turns). Variants:

- ``default``: each document into its index in its own transaction (as before schema 22);
- ``queued``: the names documents queued and moved into the index 32 at a time, by the
  store's own statements (``_name_queue.put``, schema version 22);
- ``automerge-N``, ``crisismerge-N``: that FTS5 setting on both indexes (``search-`` or
  ``names-`` before it: on that index alone);
- ``search-detail-column``, ``search-detail-none``, ``search-columnsize-0``: the search
  index declared with that option (fewer bytes a turn, and answers that differ:
  docs/performance.md, "The search index's FTS5 options");
- ``no-names``, ``no-search``, ``none``: without that index's inserts (what each costs);
- ``one-commit``: the enter's and the close's inserts in one transaction (a bound on what
  fewer flushes could save: not a design, a search between them would answer otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import uuid
from pathlib import Path

from _callgrind import instructions
from _meta import environment
from peers import conversation, prompt, reply

from neotoma_agent.transport.embedded._connect import TURN_INDEX_LEAF_BYTES
from neotoma_agent.transport.embedded._name_queue import NAME_QUEUE, put
from neotoma_agent.transport.embedded._turn_names import document_text

HERE = Path(__file__).resolve().parent

DEFAULT_VARIANTS = ("default", "queued", "automerge-0", "no-names", "none", "one-commit")
INDEXES = {
    "search": "search_text USING fts5 (text, content = '', "
    "tokenize = 'unicode61 remove_diacritics 2')",
    "names": "bookkeeping_names USING fts5 (text, content = '', tokenize = 'trigram', "
    "detail = none)",
}


def _settings(variant: str) -> dict[str, list[tuple[str, int]]]:
    """The FTS5 settings of a variant, by index."""
    out: dict[str, list[tuple[str, int]]] = {"search": [], "names": []}
    for key in ("automerge", "crisismerge"):
        for scope in ("", "search-", "names-"):
            prefix = f"{scope}{key}-"
            if variant.startswith(prefix):
                value = int(variant[len(prefix) :])
                for index in [scope[:-1]] if scope else list(out):
                    out[index].append((key, value))
    return out


def _declared(index: str, variant: str) -> str:
    """The index's declaration, with the FTS5 option a ``search-...`` variant names."""
    declared = INDEXES[index]
    options = {
        "search-detail-column": "detail = column",
        "search-detail-none": "detail = none",
        "search-columnsize-0": "columnsize = 0",
    }
    if index == "search" and variant in options:
        declared = f"{declared[:-1]}, {options[variant]})"
    return declared


def _child(variant: str, warmup: int, turns: int, short_ids: bool) -> None:
    import _callgrind

    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(os.path.join(tmp, "fts.db"), isolation_level=None)
        for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "cache_size = -65536"):
            conn.execute(f"PRAGMA {pragma}")
        conn.execute("PRAGMA wal_autocheckpoint = 10000")
        conn.execute("CREATE TABLE commits (n)")
        conn.executescript(NAME_QUEUE)
        for index in INDEXES:
            declared = _declared(index, variant)
            table = declared.split()[0]
            conn.execute(f"CREATE VIRTUAL TABLE {declared}")
            settings = [("pgsz", TURN_INDEX_LEAF_BYTES), *_settings(variant)[index]]
            for key, value in settings:
                conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES (?, ?)", (key, value))
        search = variant not in ("no-search", "none")
        names = variant not in ("no-names", "none")
        row = 0

        def names_document(rowid: int, text: str) -> None:
            if variant == "queued":
                put(conn, rowid, text)  # the store's own statements
            else:
                conn.execute(
                    "INSERT INTO bookkeeping_names (rowid, text) VALUES (?, ?)", (rowid, text)
                )

        def turn(i: int) -> None:
            nonlocal row
            cid = conversation(i % 16)
            tid = f"t{i}" if short_ids else str(uuid.UUID(int=(2**122 + i * 7919 * 2**64)))
            conn.execute("BEGIN IMMEDIATE")
            if search:
                conn.execute(
                    "INSERT INTO search_text (rowid, text) VALUES (?, ?)", (row + 1, prompt(i))
                )
            if names:
                names_document(
                    row + 2,
                    document_text("conversation_turn", f"conversation_turn:{cid}|{tid}", ()),
                )
            if variant != "one-commit":
                conn.execute("INSERT INTO commits VALUES (1)")
                conn.execute("COMMIT")
                conn.execute("BEGIN IMMEDIATE")
            if search:
                conn.execute(
                    "INSERT INTO search_text (rowid, text) VALUES (?, ?)", (row + 3, reply(i))
                )
            conn.execute("INSERT INTO commits VALUES (1)")
            conn.execute("COMMIT")
            row += 3

        for i in range(warmup):
            turn(i)
        _callgrind.start()
        for i in range(warmup, warmup + turns):
            turn(i)
        _callgrind.stop()
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--warmup", type=int, default=1500)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--short-ids", action="store_true", help="turn ids t1, t2, ...")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.warmup, args.turns, args.short_ids)
        return
    rows: list[dict[str, object]] = []
    print(f"FTS5 alone, {args.turns} turns after {args.warmup} (callgrind, user space)")
    for variant in args.variants.split(","):
        child = [sys.executable, str(HERE / "fts_instructions.py"), "--child", variant]
        child += ["--warmup", str(args.warmup), "--turns", str(args.turns)]
        if args.short_ids:
            child.append("--short-ids")
        per_turn = sum(instructions(child, marked=True)) // args.turns
        rows.append({"variant": variant, "instructions_per_turn": per_turn})
        print(f"  {variant:<20} {per_turn:>12,} instructions per turn", flush=True)
    if args.json:
        meta = environment()
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
