"""Benchmark: does retrieval find the entities a message names, and link nothing else?

    python benchmarks/retrieval_quality.py [--url http://127.0.0.1:PORT --token dev-local]
                                           [--corpus main|heldout ...] [--no-embedded]
                                           [--baseline SRC_DIR] [--rounds 5] [--json PATH]
                                           [--check]

Two labelled corpora: ``benchmarks/retrieval_corpus.json`` (``main``) and
``benchmarks/retrieval_heldout.json`` (``heldout``: written before the code it measures and
never tuned against). Each is a store full of distractors (names inside other names,
capitalised common words, shared first names, near-duplicate companies and domains, ticket
ids that prefix each other, emails, accents and particles) and conversations whose every
user message lists the entities it truly names (``names``), the earlier turns' entities it
plainly refers to (``refers``: "him", "both of them", "that reminder"), what its reply
produces (``made``, for later turns) and the kind of mention it tests (``category``). Each
corpus is seeded into a fresh embedded store (and, with ``--url``, into a Neotoma server:
use a fresh instance), every conversation is run turn by turn, and each turn's linked set
(``t.retrieved_ids``), what it shows (``t.retrieved``) and the REFERS_TO edges its user
message got (read back from the store) are compared with the labels, overall and per
category:

- precision: linked entities the message names or refers to / linked entities;
- recall: named entities linked / named entities;
- recency: referred-to entities in ``t.retrieved`` / referred-to entities;
- wrong turns: turns that link (or whose message REFERS_TO) an entity it neither names
  nor refers to / turns.

Goals: precision >= 0.98, recall >= 0.95, recency >= 0.8, wrong turns <= 2% on every
backend and corpus (``--check`` exits 1 when missed). Every miss and every wrong entity is
listed.

``--baseline SRC_DIR`` also measures the CPU a turn's retrieval costs, side by side: this
tree and ``SRC_DIR`` (another checkout of the package, e.g. the main branch) each run the
main corpus's messages through ``memory.retrieve(text)`` and through whole turns (``async
with memory.turn(text)``) on an embedded store, in alternating subprocesses (``--rounds``
each), and the medians of process CPU time per message are printed with their ratio (goal:
at most 1.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parent / "retrieval_corpus.json"
HELDOUT = Path(__file__).resolve().parent / "retrieval_heldout.json"
PRECISION_GOAL = 0.98
RECALL_GOAL = 0.95
RECENCY_GOAL = 0.8
WRONG_TURNS_GOAL = 0.02
CPU_GOAL = 1.5


def load_corpus(path: Path = CORPUS) -> dict[str, Any]:
    corpus: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return corpus


# ------------------------------------------------------------------ quality


def _rates(c: dict[str, int]) -> dict[str, Any]:
    return {
        "turns": c["turns"],
        "named": c["tp"] + c["fn"],
        "linked": c["tp"] + c["fp"],
        "precision": round(c["tp"] / (c["tp"] + c["fp"]), 4) if c["tp"] + c["fp"] else 1.0,
        "recall": round(c["tp"] / (c["tp"] + c["fn"]), 4) if c["tp"] + c["fn"] else 1.0,
        "referred": c["referred"],
        "recency": round(c["seen"] / c["referred"], 4) if c["referred"] else None,
        "wrong_turns": round(c["wrong_turns"] / c["turns"], 4) if c["turns"] else 0.0,
        "wrong_edges_per_turn": round(c["wrong_edges"] / c["turns"], 4) if c["turns"] else 0.0,
    }


async def run_quality(transport: Any, tag: str, corpus: dict[str, Any]) -> dict[str, Any]:
    from neotoma_agent import NeotomaMemory

    seed = NeotomaMemory(transport, conversation_id=f"seed-{tag}")
    ids: dict[str, str] = {}
    for key, spec in corpus["entities"].items():
        fields = {k: v for k, v in spec.items() if k != "entity_type"}
        ids[key] = await seed.remember(spec["entity_type"], **fields)
    names = {v: k for k, v in ids.items()}
    zero = dict.fromkeys(
        ("turns", "tp", "fp", "fn", "referred", "seen", "wrong_turns", "wrong_edges"), 0
    )
    counts: dict[str, dict[str, int]] = {"all": dict(zero)}
    failures: list[dict[str, Any]] = []
    open_ms: list[float] = []
    lookups: list[int] = []
    for conversation in corpus["conversations"]:
        memory = NeotomaMemory(transport, conversation_id=f"{conversation['id']}-{tag}")
        for spec in conversation["turns"]:
            async with memory.turn(spec["text"]) as t:
                linked = set(t.retrieved_ids)
                shown = {e.id for e in t.retrieved}
                made = spec.get("made")
                if made is not None:
                    fields = {k: v for k, v in made.items() if k not in ("key", "entity_type")}
                    ids[made["key"]] = t.remember(made["entity_type"], **fields)
                    names[ids[made["key"]]] = made["key"]
                t.reply = "Noted."
            open_ms.append(t.result.open_ms)
            lookups.append(t.retrieval.lookups + t.retrieval.failures + t.retrieval.timeouts)
            truth = {ids[k] for k in spec["names"]}
            referred = {ids[k] for k in spec.get("refers", ())}
            allowed = truth | referred
            related = await transport.retrieve_related_entities(
                t.user_message_id, relationship_types=["REFERS_TO"], direction="outbound"
            )
            edges = {r.target_entity_id for r in related.relationships}
            wrong = (linked | edges) - allowed
            for key in ("all", spec.get("category", "other")):
                c = counts.setdefault(key, dict(zero))
                c["turns"] += 1
                c["tp"] += len(linked & truth)
                c["fp"] += len(linked - allowed)
                c["fn"] += len(truth - linked)
                c["referred"] += len(referred)
                c["seen"] += len(referred & shown)
                c["wrong_turns"] += bool(wrong)
                c["wrong_edges"] += len(edges - allowed)
            if wrong or truth - linked or referred - shown:
                failures.append(
                    {
                        "conversation": conversation["id"],
                        "category": spec.get("category", "other"),
                        "text": spec["text"],
                        "wrong": sorted(names.get(i, i) for i in linked - allowed),
                        "missed": sorted(names.get(i, i) for i in truth - linked),
                        "unseen": sorted(names.get(i, i) for i in referred - shown),
                        "wrong_edges": sorted(names.get(i, i) for i in edges - allowed),
                    }
                )
    return {
        **_rates(counts.pop("all")),
        "categories": {k: _rates(v) for k, v in counts.items()},
        "failures": failures,
        # What a turn's enter costs here (wall time, a machine shared with other jobs) and
        # the lookups it sends (all in one round, beside the user store).
        "open_ms_p50": round(statistics.median(open_ms), 2),
        "lookups_per_turn": round(sum(lookups) / len(lookups), 2),
    }


async def quality_embedded(corpus: dict[str, Any]) -> dict[str, Any]:
    from neotoma_agent import EmbeddedStore

    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "quality.db") as store:
            return await run_quality(store, "embedded", corpus)


async def quality_http(url: str, token: str | None, corpus: dict[str, Any]) -> dict[str, Any]:
    from neotoma_agent import HttpTransport

    async with HttpTransport(url, token=token) as transport:
        return await run_quality(transport, f"http-{uuid.uuid4().hex[:8]}", corpus)


# ------------------------------------------------------------------ CPU, side by side

_PROBE = r"""
import asyncio, json, logging, sys, tempfile, time
from pathlib import Path
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
from neotoma_agent import EmbeddedStore, NeotomaMemory
corpus = json.loads(Path(sys.argv[1]).read_text("utf-8"))
repeats = int(sys.argv[2])
texts = [t["text"] for c in corpus["conversations"] for t in c["turns"]]

async def main():
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedStore.open(Path(tmp) / "cpu.db") as store:
            seed = NeotomaMemory(store, conversation_id="seed")
            for spec in corpus["entities"].values():
                fields = {k: v for k, v in spec.items() if k != "entity_type"}
                await seed.remember(spec["entity_type"], **fields)
            memory = NeotomaMemory(store, conversation_id="cpu")
            for text in texts:  # warm caches and the store
                await memory.retrieve(text)
            started = time.process_time()
            for _ in range(repeats):
                for text in texts:
                    await memory.retrieve(text)
            retrieve_ms = (time.process_time() - started) * 1000 / (repeats * len(texts))
            started = time.process_time()
            for _ in range(repeats):
                for text in texts:
                    async with memory.turn(text) as t:
                        t.reply = "Noted."
            turn_ms = (time.process_time() - started) * 1000 / (repeats * len(texts))
    print(json.dumps({"retrieve_ms": retrieve_ms, "turn_ms": turn_ms}))

asyncio.run(main())
"""


def _probe(src: Path, repeats: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(CORPUS), str(repeats)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=600,
        cwd=src,  # `-c` puts the working directory first on sys.path: make it the tree's
    )
    figures: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


def cpu_side_by_side(baseline: Path, rounds: int, repeats: int) -> dict[str, Any]:
    ours_src = Path(__file__).resolve().parents[1]
    ours: list[dict[str, float]] = []
    base: list[dict[str, float]] = []
    for _ in range(rounds):  # interleaved, so both see the same machine
        ours.append(_probe(ours_src, repeats))
        base.append(_probe(baseline, repeats))
    out: dict[str, Any] = {"rounds": rounds, "repeats": repeats, "baseline_src": str(baseline)}
    for key in ("retrieve_ms", "turn_ms"):
        o = statistics.median(r[key] for r in ours)
        b = statistics.median(r[key] for r in base)
        out[key] = {"ours": round(o, 4), "baseline": round(b, 4), "ratio": round(o / b, 3)}
    return out


# ------------------------------------------------------------------ report


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def render(report: dict[str, Any]) -> str:
    lines = [
        "| backend | corpus | category | turns | named | linked | precision | recall "
        "| referred | recency | wrong turns |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in report["backends"].items():
        backend, corpus = key.split(" / ")
        for category, r in [("all", row), *sorted(row["categories"].items())]:
            lines.append(
                f"| {backend} | {corpus} | {category} | {r['turns']} | {r['named']} | "
                f"{r['linked']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['referred']} | "
                f"{_fmt(r['recency'])} | {r['wrong_turns']:.3f} |"
            )
    lines += ["", "| backend / corpus | lookups per turn | enter p50 |", "|---|---|---|"]
    for key, row in report["backends"].items():
        lines.append(f"| {key} | {row['lookups_per_turn']:.2f} | {row['open_ms_p50']:.1f} ms |")
    for key, row in report["backends"].items():
        for f in row["failures"]:
            lines.append(
                f"  {key}: [{f['category']}] {f['text']!r}: wrong {f['wrong']} missed "
                f"{f['missed']} unseen {f['unseen']} wrong edges {f['wrong_edges']}"
            )
    cpu = report.get("cpu")
    if cpu:
        lines += [
            "",
            f"CPU per message, embedded store, medians of {cpu['rounds']} interleaved runs "
            f"(baseline: {cpu['baseline_src']}):",
            "| measured | this tree | baseline | ratio |",
            "|---|---|---|---|",
        ]
        for key, label in (("retrieve_ms", "memory.retrieve(text)"), ("turn_ms", "whole turn")):
            c = cpu[key]
            lines.append(
                f"| {label} | {c['ours']:.3f} ms | {c['baseline']:.3f} ms | {c['ratio']:.2f}x |"
            )
    return "\n".join(lines)


def _missed(row: dict[str, Any]) -> bool:
    return (
        row["precision"] < PRECISION_GOAL
        or row["recall"] < RECALL_GOAL
        or (row["recency"] is not None and row["recency"] < RECENCY_GOAL)
        or row["wrong_turns"] > WRONG_TURNS_GOAL
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="also run on this Neotoma server (a fresh instance)")
    parser.add_argument("--token", default=None)
    parser.add_argument(
        "--label", default="real server", help="what to call the --url backend in the table"
    )
    parser.add_argument(
        "--corpus",
        action="append",
        choices=("main", "heldout"),
        help="the corpora to run (repeatable; default: both)",
    )
    parser.add_argument("--no-embedded", action="store_true", help="only the --url server")
    parser.add_argument("--baseline", type=Path, help="another source tree, for CPU")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)

    import structlog

    # The application (this script) decides logging: per-turn INFO events would dominate.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    started = time.perf_counter()
    corpora = {"main": CORPUS, "heldout": HELDOUT}
    report: dict[str, Any] = {"backends": {}}
    for name in args.corpus or ("main", "heldout"):
        corpus = load_corpus(corpora[name])
        if not args.no_embedded:
            report["backends"][f"embedded / {name}"] = asyncio.run(quality_embedded(corpus))
        if args.url:
            report["backends"][f"{args.label} / {name}"] = asyncio.run(
                quality_http(args.url, args.token, corpus)
            )
    if args.baseline:
        report["cpu"] = cpu_side_by_side(args.baseline, args.rounds, args.repeats)
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    missed = any(_missed(row) for row in report["backends"].values())
    if args.baseline:
        missed = missed or report["cpu"]["retrieve_ms"]["ratio"] > CPU_GOAL
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
