"""Probe: the search index's bytes a turn, and its answers, under other FTS5 options.

    python benchmarks/search_index_options.py [--write-turns 1000] [--messages 20000]
        [--facts 200] [--json PATH]

``search_text`` is a contentless FTS5 table with FTS5's defaults but for its leaves and its
detail (since schema version 29, ``_search_detail``: ``detail = none``, no positions;
``columnsize = 1``: each row's length in words, in ``search_text_docsize``; leaves of
``TURN_INDEX_LEAF_BYTES``); ``version 28`` is the declaration before it (``detail = full``:
every word's positions). Each option probed is measured twice:

- **bytes**: ``--write-turns`` short turns of ``peers.py`` (16 conversations, one caller,
  as ``disk_layout_probe.py --write-turns`` writes them), the documents the store indexes
  taken from that file (its own rebuild's statements, in rowid order) and written into a
  fresh table declared with the option: one document a transaction, as a turn's enter and
  close commit them (``live``, what a user's file holds), then that file ``VACUUM``-ed,
  then after FTS5's ``optimize`` and ``VACUUM``, and all the documents in one transaction
  and ``VACUUM`` (``bulk``, what a migration's rebuild gives). Bytes a turn are SQLite's
  ``dbstat`` pages of the ``search_text_*`` tables over the turns (the replay of today's
  declaration gives the live file's own figure);
- **answers**: the search benchmark's corpus (``search.py``: ``--messages`` messages,
  ``--facts`` planted facts) written through the store's own write action, and a copy per
  option whose index is built again with it (``_search.rebuild``); each copy runs the
  same searches through the store's ``text_search`` (each fact's query with limits 10
  and 3 and within its conversation, its phrase ``"CITY office"``, common words and
  phrases) and counts the answers equal to today's file's (hits, order and scores), those
  whose hits come in the same order, and the searches that fail. Since schema version 29
  ``text_search`` asks the index for the AND of a query's words and checks a phrase on
  each match's text (the limit after), so no declaration fails a phrase; it ranks by each
  text's length (``columnsize``, its size table): without it (``columnsize = 0``) every
  search fails.
  (Before version 29, a phrase of two words or more failed where ``detail`` was not
  ``full``, and ``bm25()`` scored every hit 0 in a contentless table without positions:
  docs/performance.md.)
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report
from _synth import _write_all
from disk_layout_probe import _write_turns
from search import Corpus, _bodies

from neotoma_agent.transport.embedded import _search
from neotoma_agent.transport.embedded._connect import TURN_INDEX_LEAF_BYTES
from neotoma_agent.transport.embedded._store import _connect

#: the options probed: the declaration's, and the FTS5 settings (``pgsz``: None, FTS5's own)
_TODAY = "detail = none"
OPTIONS: dict[str, tuple[str, dict[str, int | None]]] = {
    "today": (_TODAY, {}),
    "version 28 (detail=full)": ("", {}),
    "columnsize=0 (detail=full)": ("columnsize = 0", {}),
    "detail=column": ("detail = column", {}),
    "detail=column columnsize=0": ("detail = column, columnsize = 0", {}),
    "detail=none columnsize=0": ("detail = none, columnsize = 0", {}),
    "pgsz=4050 (FTS5's)": (_TODAY, {"pgsz": None}),
    "pgsz=1000": (_TODAY, {"pgsz": 1000}),
    "automerge=2": (_TODAY, {"automerge": 2}),
    "automerge=8": (_TODAY, {"automerge": 8}),
    "crisismerge=4": (_TODAY, {"crisismerge": 4}),
    "crisismerge=32": (_TODAY, {"crisismerge": 32}),
}
#: the options that change what a search answers (the settings only move bytes and merges)
DECLARED = [name for name, (_, settings) in OPTIONS.items() if not settings]

_DECLARATION = (
    "CREATE VIRTUAL TABLE search_text USING fts5 (text, content = '', "
    "tokenize = 'unicode61 remove_diacritics 2'{})"
)
_INSERT = "INSERT INTO search_text (rowid, text) VALUES (?, ?)"


def _declare(conn: sqlite3.Connection, options: str, settings: dict[str, int | None]) -> None:
    conn.execute(_DECLARATION.format(f", {options}" if options else ""))
    for key, value in {"pgsz": TURN_INDEX_LEAF_BYTES, **settings}.items():
        if value is not None:
            conn.execute("INSERT INTO search_text (search_text, rank) VALUES (?, ?)", (key, value))


def _documents(store: Path, tmp: Path) -> list[tuple[int, str]]:
    """What the store's rebuild would index (rowid, text), in rowid order."""
    copy = tmp / "documents.db"
    shutil.copy(store, copy)
    conn = _connect(str(copy), "OFF")()
    found: list[tuple[int, str]] = []

    class Recorder:  # the store's own backfill, its inserts recorded instead of run
        def execute(self, sql: str, params: Any = ()) -> Any:
            if sql.startswith("INSERT INTO search_text"):
                found.append(params)
                return None
            return conn.execute(sql, params)

    try:
        _search._backfill(Recorder())  # type: ignore[arg-type]
    finally:
        conn.close()
    return found


def _bytes(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat WHERE name LIKE 'search_text%' GROUP BY name"
    )
    return {name: int(size) for name, size in rows}


def _built(
    path: Path, docs: list[tuple[int, str]], options: str, settings: dict[str, int | None]
) -> dict[str, dict[str, int]]:
    """The table's bytes written one document a transaction, then as it is kept (VACUUM,
    optimize); and all in one transaction (bulk)."""
    out: dict[str, dict[str, int]] = {}
    for bulk in (False, True):
        target = path.with_suffix(".bulk.db" if bulk else ".db")
        conn = sqlite3.connect(target, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = OFF")
            _declare(conn, options, settings)
            if bulk:
                conn.execute("BEGIN")
                conn.executemany(_INSERT, docs)
                conn.execute("COMMIT")
                conn.execute("VACUUM")
                out["bulk"] = _bytes(conn)
                continue
            for doc in docs:
                conn.execute("BEGIN")
                conn.execute(_INSERT, doc)
                conn.execute("COMMIT")
            out["live"] = _bytes(conn)
            conn.execute("VACUUM")
            out["vacuum"] = _bytes(conn)
            conn.execute("INSERT INTO search_text (search_text) VALUES ('optimize')")
            conn.execute("VACUUM")
            out["optimize"] = _bytes(conn)
        finally:
            conn.close()
    return out


def _queries(corpus: Corpus) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for query, _, said in corpus.facts:
        out += [
            {"q": query},
            {"q": query, "limit": 3},
            {"q": query, "conversation_id": said},
            {"q": f'"{query.split()[0]} office"'},
        ]
    common = ("the budget", "the", "team project", '"the budget"', "office code", '"code for the"')
    return out + [{"q": q} for q in common]


def _answers(conn: sqlite3.Connection, queries: list[dict[str, Any]]) -> Any:
    answers: list[Any] = []
    started = time.process_time()
    for body in queries:
        try:
            answers.append(_search.text_search(conn, body))
        except sqlite3.Error as error:
            answers.append({"error": type(error).__name__})
    return answers, time.process_time() - started


def _order(answer: dict[str, Any]) -> list[Any]:
    return [h["entity_id"] for h in answer["hits"]] if "hits" in answer else ["error"]


def _compare(store: Path, tmp: Path, corpus: Corpus) -> dict[str, dict[str, Any]]:
    queries = _queries(corpus)
    results: dict[str, dict[str, Any]] = {}
    reference: list[Any] = []
    for name in DECLARED:
        options, _ = OPTIONS[name]
        copy = tmp / "answers.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
        shutil.copy(store, copy)
        conn = _connect(str(copy), "OFF")()
        try:
            conn.execute("BEGIN")
            conn.execute("DROP TABLE search_text")
            _declare(conn, options, {})
            _search.rebuild(conn)
            conn.execute("COMMIT")
            if name == "today":  # the store's own file, its index as written
                source = _connect(str(store), "OFF")()
                try:
                    reference, cpu = _answers(source, queries)
                finally:
                    source.close()
                results["today (as written)"] = _tally(reference, reference, cpu)
            got, cpu = _answers(conn, queries)
            results[f"{name} (rebuilt)" if name == "today" else name] = _tally(reference, got, cpu)
        finally:
            conn.close()
    return results


def _tally(reference: list[Any], got: list[Any], cpu: float) -> dict[str, Any]:
    pairs = list(zip(reference, got, strict=True))
    return {
        "searches": len(pairs),
        "same": sum(a == b for a, b in pairs),
        "same_order": sum(_order(a) == _order(b) for a, b in pairs),
        "same_first": sum(_order(a)[:1] == _order(b)[:1] for a, b in pairs),
        "failed": sum("error" in b for b in got),
        "cpu_s": cpu,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        turns_file = tmp / "turns.db"
        # ``_write_turns`` runs its own event loop: on a thread of its own.
        await anyio.to_thread.run_sync(_write_turns, turns_file, args.write_turns)
        docs = _documents(turns_file, tmp)
        with sqlite3.connect(turns_file) as conn:
            written = _bytes(conn)
        sizes = {
            name: _built(tmp / f"option{i}.db", docs, *OPTIONS[name])
            for i, name in enumerate(OPTIONS)
        }
        corpus = Corpus(args.messages, args.facts)
        corpus_file = tmp / "corpus.db"
        _connect(str(corpus_file), "OFF")().close()
        _write_all(corpus_file, _bodies(corpus), None, 4000)
        answers = _compare(corpus_file, tmp, corpus)
    turns = args.write_turns
    per_turn = {
        name: {
            phase: {table: size / turns for table, size in tables.items()}
            for phase, tables in phases.items()
        }
        for name, phases in sizes.items()
    }
    return {
        "turns": turns,
        "documents": len(docs),
        "written_per_turn": {table: size / turns for table, size in written.items()},
        "bytes_per_turn": per_turn,
        "messages": args.messages,
        "answers": answers,
    }


def render(result: dict[str, Any]) -> str:
    turns = result["turns"]
    written = sum(result["written_per_turn"].values())
    lines = [
        f"the search index, bytes a turn ({turns:,} short turns; the store's own file: "
        f"{written:,.0f} B)",
        f"{'option':<28}{'data':>7}{'docsize':>8}{'live':>7}{'VACUUM':>8}{'optimize':>9}"
        f"{'bulk':>6}{'saves':>7}",
    ]
    today = sum(result["bytes_per_turn"]["today"]["live"].values())
    for name, phases in result["bytes_per_turn"].items():
        live = phases["live"]
        total = {phase: sum(tables.values()) for phase, tables in phases.items()}
        lines.append(
            f"{name:<28}{live.get('search_text_data', 0):>7.0f}"
            f"{live.get('search_text_docsize', 0):>8.0f}{total['live']:>7.0f}"
            f"{total['vacuum']:>8.0f}{total['optimize']:>9.0f}{total['bulk']:>6.0f}"
            f"{total['live'] - today:>+7.0f}"
        )
    lines += [
        "",
        f"answers against today's file ({result['messages']:,} messages; text_search: hits, "
        "order and scores)",
        f"{'option':<38}{'searches':>9}{'same':>6}{'order':>7}{'first':>7}{'failed':>7}"
        f"{'CPU s':>7}",
    ]
    for name, row in result["answers"].items():
        lines.append(
            f"{name:<38}{row['searches']:>9}{row['same']:>6}{row['same_order']:>7}"
            f"{row['same_first']:>7}{row['failed']:>7}{row['cpu_s']:>7.2f}"
        )
    return "\n".join(lines)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write-turns", type=_positive, default=1000)
    parser.add_argument("--messages", type=_positive, default=20_000)
    parser.add_argument("--facts", type=_positive, default=200)
    parser.add_argument("--json", type=Path)
    run_and_report(parser.parse_args(), run, render)


if __name__ == "__main__":
    main()
