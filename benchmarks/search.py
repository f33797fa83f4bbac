"""Benchmark: full-text search over what was said, at 100,000 messages.

    python benchmarks/search.py [--messages 100000] [--facts 200] [--json PATH]

Writes ``--messages`` messages (half questions, half replies, 50 turns per conversation)
into a fresh embedded store through the store's own write action (``_synth``: the index is
kept by the same code a turn runs), with filler text drawn from a 4,000-word vocabulary
(Zipf-like, so common words are common). ``--facts`` planted facts ("the door code for the
Lisbon office is 4471.") are replies of random turns, each with distractors that hold every
word of its query too: someone asking for it ("What is the Lisbon door code again?"), a
longer message about the same things, and other offices' codes that share some words.

Then, on the embedded store: the median and 95th percentile time of ``memory.search`` for
each fact's query (``lisbon door code``), of a phrase query, of one conversation only, and
of a query of common words (the worst case: many matches to rank); the share of facts found
in the top 3 (and first) hits. The same planted-fact queries over HTTP to the dev server on
127.0.0.1 (the same file). Targets: p50 <= 50 ms per search on the embedded store; top-3
recall >= 0.9.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import run_and_report
from _synth import _write_all

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._records.keys import conversation_entity_id, message_entity_id, turn_keys
from neotoma_agent._records.payloads import ConversationSettings, closing_payload, user_payload
from neotoma_agent._version import __version__
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport._rest import store_body
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.http import HttpTransport

#: the dev server always requires a token
TOKEN = "bench-token"

TURNS_PER_CONVERSATION = 50
CITIES = (
    "Lisbon Porto Madrid Seville Valencia Bilbao Lyon Marseille Nantes Lille Bordeaux Geneva "
    "Zurich Basel Munich Hamburg Cologne Leipzig Dresden Vienna Graz Prague Brno Krakow Gdansk "
    "Warsaw Vilnius Riga Tallinn Helsinki Oslo Bergen Aarhus Malmo Gothenburg Uppsala Dublin "
    "Cork Galway Leeds Bristol Glasgow Edinburgh Cardiff Turin Milan Bologna Naples Palermo"
).split()
THINGS = ("door", "alarm", "wifi", "locker", "garage", "safe", "printer", "gate")
COMMON = "the budget for project and team".split()


def _vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))))
    return sorted(words)


class Corpus:
    """The messages' text: filler, planted facts and their distractors, and the queries."""

    def __init__(self, messages: int, facts: int, seed: int = 38) -> None:
        self.rng = random.Random(seed)
        vocabulary = COMMON + _vocabulary(self.rng)  # the common words first: most drawn
        weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
        self._words = vocabulary
        self._cum = list(_accumulate(weights))
        self.turns = messages // 2
        self.special: dict[tuple[int, str], str] = {}
        #: (query, the fact's exact text, the conversation it was said in)
        self.facts: list[tuple[str, str, str]] = []
        slots = self.rng.sample(range(self.turns), min(self.turns, facts * 6))
        pairs = [(c, t) for c in CITIES for t in THINGS]
        self.rng.shuffle(pairs)
        for n in range(min(facts, len(pairs), len(slots) // 6)):
            city, thing = pairs[n]
            code = self.rng.randint(1000, 9999)
            fact = f"The {thing} code for the {city} office is {code}."
            other = CITIES[(CITIES.index(city) + 1) % len(CITIES)]
            texts = [
                (fact, "assistant"),
                (f"What is the {city} {thing} code again?", "user"),
                (
                    f"Someone in {city} said the {thing} code changed last week, and the team "
                    f"there could not get in until the office manager came. "
                    f"{self.filler(12)}",
                    "user",
                ),
                (f"The {thing} code for the {other} office is {code + 1}.", "assistant"),
                (f"The {city} office has a new {THINGS[(n + 1) % len(THINGS)]}.", "assistant"),
                (f"{self.filler(8)} {city} {self.filler(8)} {thing} {self.filler(4)}", "user"),
            ]
            for (text, role), slot in zip(texts, slots[n * 6 : n * 6 + 6], strict=True):
                self.special[(slot, role)] = text
            said = slots[n * 6] // TURNS_PER_CONVERSATION
            self.facts.append((f"{city} {thing} code", fact, conversation(said)))

    def filler(self, n: int) -> str:
        return " ".join(self.rng.choices(self._words, cum_weights=self._cum, k=n))

    def text(self, turn: int, role: str) -> str:
        special = self.special.get((turn, role))
        if special is not None:
            return special
        return self.filler(self.rng.randint(6, 30)).capitalize() + "."


def conversation(index: int) -> str:
    return f"conv-{index:05d}"


def _accumulate(values: list[float]) -> Iterator[float]:
    total = 0.0
    for v in values:
        total += v
        yield total


def _bodies(corpus: Corpus) -> Iterator[dict[str, Any]]:
    for turn in range(corpus.turns):
        c, t = divmod(turn, TURNS_PER_CONVERSATION)
        cid = conversation(c)
        conv = ConversationSettings(platform="benchmark")
        keys = turn_keys(cid, f"t{t}")
        for p in (
            user_payload(conv, keys, corpus.text(turn, "user"), turn_number=t),
            closing_payload(
                conv,
                keys,
                corpus.text(turn, "assistant"),
                conversation_entity_id=conversation_entity_id(cid),
                user_message_id=message_entity_id(cid, f"t{t}", "user"),
                turn_number=t,
            ),
        ):
            yield store_body(
                p.entities, idempotency_key=p.idempotency_key, relationships=p.relationships
            )


def _index_bytes(path: Path) -> int:
    """The bytes of the search index's tables (SQLite's dbstat, where it is built in)."""
    with sqlite3.connect(path) as conn:
        try:
            row = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'search_%'"
            ).fetchone()
        except sqlite3.OperationalError:
            return 0
    return int(row[0] or 0)


def _percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000,
    }


async def _timed(transport: Transport, queries: list[tuple[str, str | None]]) -> dict[str, Any]:
    memory = NeotomaMemory(transport, conversation_id="bench")
    await memory.search(queries[0][0])  # warm up
    times, counts = [], []
    for query, scope in queries:
        started = time.perf_counter()
        result = await memory.search(query, conversation_id=scope)
        times.append(time.perf_counter() - started)
        counts.append(len(result.hits))
    return {**_percentiles(times), "searches": len(queries), "mean_hits": statistics.mean(counts)}


async def _recall(transport: Transport, corpus: Corpus) -> dict[str, float]:
    memory = NeotomaMemory(transport, conversation_id="bench")
    top3 = top1 = 0
    for query, fact, _ in corpus.facts:
        texts = [h.text for h in (await memory.search(query, limit=3)).hits]
        top3 += fact in texts
        top1 += bool(texts) and texts[0] == fact
    n = len(corpus.facts) or 1
    return {"top3_recall": top3 / n, "top1_recall": top1 / n, "facts": len(corpus.facts)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    corpus = Corpus(args.messages, args.facts)
    facts: list[tuple[str, str | None]] = [(q, None) for q, _, _ in corpus.facts]
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "search.db"
        async with EmbeddedStore.open(path):
            pass  # the schema, as a first open makes it
        build_s = _write_all(path, _bodies(corpus), None, 4000)
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        index = _index_bytes(path)
        async with EmbeddedStore.open(path) as store:
            rows["facts"] = await _timed(store, facts)
            phrases: list[tuple[str, str | None]] = [
                (f'"{q.split()[0]} office"', None) for q, _ in facts
            ]
            rows["phrase"] = await _timed(store, phrases)
            scoped: list[tuple[str, str | None]] = [(q, c) for q, _, c in corpus.facts]
            rows["one conversation"] = await _timed(store, scoped)
            rows["common words"] = await _timed(store, [("the budget", None)] * 20)
            recall = await _recall(store, corpus)
            async with (
                serving(create_app(store, token=TOKEN)) as url,
                HttpTransport(url, token=TOKEN) as http,
            ):
                rows["facts over HTTP"] = await _timed(http, facts)
                recall_http = await _recall(http, corpus)
    return {
        "version": __version__,
        "messages": corpus.turns * 2,
        "facts": len(corpus.facts),
        "build_s": build_s,
        "file_mb": size / 1e6,
        "index_mb": index / 1e6,
        "rows": rows,
        **recall,
        "top3_recall_http": recall_http["top3_recall"],
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"search over {result['messages']:,} messages ({result['facts']} planted facts), "
        f"built in {result['build_s']:.0f} s, {result['file_mb']:.0f} MB "
        f"(the search index {result['index_mb']:.0f} MB)",
        "",
        f"{'query':<20} {'searches':>8} {'p50 ms':>8} {'p95 ms':>8} {'mean hits':>10}",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"{name:<20} {row['searches']:>8} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} "
            f"{row['mean_hits']:>10.1f}"
        )
    lines += [
        "",
        f"planted facts in the top 3: {result['top3_recall']:.3f} (first: "
        f"{result['top1_recall']:.3f}); over HTTP: {result['top3_recall_http']:.3f}",
        "targets: p50 <= 50 ms (facts, embedded); top-3 recall >= 0.9",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages to write")
    parser.add_argument("--facts", type=int, default=200, help="planted facts (at most 400)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    run_and_report(parser.parse_args(), run, render)


if __name__ == "__main__":
    main()
