"""docs/performance.md's figures, rendered from the benchmarks' JSON in benchmarks/results/.

    python scripts/performance_doc.py           # rewrite the page's generated parts
    python scripts/performance_doc.py --check   # exit 1 (and say where) if they are stale

A generated part of the page sits between two HTML comments, a block (a table and the line
saying where its figures came from) or a figure inside a sentence:

    <!-- fig peers-table -->
    ...
    <!-- /fig -->
    ... we cost <!-- fig peers-cpu-vs-sdk -->1.99-2.52x<!-- /fig --> its CPU ...

``NAME`` is a function below registered with ``@figure("NAME")``: it gets the results
(``results["peers"]`` is benchmarks/results/peers.json) and returns the text. A block's
function takes ``source="peers"``, which adds the line saying where the figures came from
(the JSON's ``meta``: date, command, commit, Python, CPUs, load average and niceness at
start). Whatever sits between the markers is replaced on every render, so a figure edited
by hand, or a benchmark re-run without rendering again, fails ``--check``
(``tests/test_performance_doc.py``, in the default run). The prose around the markers is
the page's own: when a figure moves, read the sentence it sits in again.

Add a table: run the benchmark with ``--json benchmarks/results/NAME.json`` (its JSON
carries ``meta`` when it uses ``benchmarks/_report.py`` or ``benchmarks/_meta.py``), add a
``@figure`` function here, put its markers in the page, render, commit the three.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "performance.md"

MARKER = re.compile(r"<!-- fig (?P<name>[\w-]+) -->(?P<body>.*?)<!-- /fig -->", re.DOTALL)


class FigureError(Exception):
    """A marker names no figure, or a figure's results are missing or lack a field."""


class Results:
    """The benchmarks' JSON files of one directory, each read once, by name."""

    def __init__(self, directory: Path = RESULTS) -> None:
        self.directory = directory
        self._read: dict[str, dict[str, Any]] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in self._read:
            path = self.directory / f"{name}.json"
            if not path.exists():
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                raise FigureError(f"{shown} is missing: run its benchmark")
            self._read[name] = json.loads(path.read_text("utf-8"))
        return self._read[name]


Render = Callable[[Results], str]
FIGURES: dict[str, tuple[Render, str | None]] = {}


def figure(name: str, source: str | None = None) -> Callable[[Render], Render]:
    """Register ``render`` as the figure ``name``; ``source``: the results a block comes
    from, whose metadata is printed under it."""

    def register(render: Render) -> Render:
        if name in FIGURES:
            raise ValueError(f"two figures named {name}")
        FIGURES[name] = (render, source)
        return render

    return register


def provenance(meta: dict[str, Any] | None, stale: bool = False) -> str:
    """The line under a table: where its figures came from."""
    if not meta:
        return "*Where these figures came from was not recorded (no `meta` in the JSON).*"
    load = meta["load_average"][0]
    nice = f", `nice {meta['nice']}`" if meta.get("nice") else ""
    line = (
        f"*Measured {meta['date']} at commit `{meta['commit']}`: `{meta['command']}`; "
        f"{meta['implementation']} {meta['python']} on {meta['platform']}, "
        f"{meta['cpu_count']} CPUs, load average {load:.2f} at start{nice}.*"
    )
    return line + (" **Stale:** not re-run since the code changed." if stale else "")


def render_figure(name: str, results: Results) -> str:
    if name not in FIGURES:
        raise FigureError(f"docs/performance.md names a figure {name!r} that no function renders")
    render, source = FIGURES[name]
    try:
        text = render(results)
    except KeyError as exc:
        raise FigureError(f"figure {name!r}: its results have no {exc}") from None
    if source is None:
        return text
    # Blank lines around a block: a table right after an HTML comment would be read as
    # part of the comment's HTML block.
    return f"\n\n{text}\n\n{provenance(results[source].get('meta'))}\n\n"


def _check_placement(page: str) -> None:
    """A figure inside a sentence must not begin a line: Markdown reads a line that begins
    with an HTML comment as an HTML block, which ends the paragraph (or list item) there."""
    for m in MARKER.finditer(page):
        inline = "\n" not in m["body"]
        if inline and not page[page.rfind("\n", 0, m.start()) + 1 : m.start()].strip():
            line = page.count("\n", 0, m.start()) + 1
            raise FigureError(
                f"line {line}: the figure {m['name']!r} begins a line: "
                "put a word of its sentence before it"
            )


def render_page(page: str, results: Results) -> str:
    """``page`` with every generated part rendered again from ``results``."""
    _check_placement(page)
    return MARKER.sub(
        lambda m: f"<!-- fig {m['name']} -->{render_figure(m['name'], results)}<!-- /fig -->",
        page,
    )


def stale_parts(page: str, results: Results) -> list[str]:
    """The names of the generated parts ``page`` holds other text in than it renders to."""
    _check_placement(page)
    return [
        m["name"] for m in MARKER.finditer(page) if m["body"] != render_figure(m["name"], results)
    ]


# ---------------------------------------------------------------------------------------
# How figures read.


def ms(value: float) -> str:
    """CPU or wall time given in ms, at the precision it is worth."""
    if value < 0.1:
        return f"{value * 1e3:.0f} µs"
    if value < 10:
        return f"{value:.2f} ms"
    if value < 100:
        return f"{value:.1f} ms"
    return f"{value:,.0f} ms"


def size(value: float) -> str:
    """Bytes, as B up to 100,000, then KB and MB (of 1,000 and 1,000,000 bytes)."""
    if value >= 1e6:
        return f"{value / 1e6:.1f} MB"
    if value >= 1e5:
        return f"{value / 1e3:.0f} KB"
    return f"{value:,.0f} B"


def times(value: float) -> str:
    """A ratio."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def span(values: list[float], fmt: Callable[[float], str] = times, unit: str = "") -> str:
    """``low-high`` (or the one value) of ``values``."""
    low, high = fmt(min(values)), fmt(max(values))
    return (low if low == high else f"{low}-{high}") + unit


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# A turn against its peers (benchmarks/peers.py).

PEER_NAMES = {
    "floor": "bare sqlite3, two INSERTs (the floor)",
    "sdk": "Agents SDK `SQLiteSession`",
    "langgraph": "LangGraph + `AsyncSqliteSaver`",
    "ours": "**neotoma-agent turn**",
    "scoped": "our turn through a user's view (`store.for_user`)",
    "baseline": "our turn, the `--baseline` tree",
}


def _peer_rows(result: dict[str, Any], peer: str) -> dict[str, dict[str, Any]]:
    return {e["row"]: e for e in result["rows"] if e["peer"] == peer}


@figure("peers-table", source="peers")
def peers_table(results: Results) -> str:
    rows = [
        [
            e["row"],
            PEER_NAMES[e["peer"]],
            ms(e["cpu_ms_per_turn"]),
            times(e["cpu_vs_sdk"]),
            size(e["bytes_per_turn"]),
            times(e["bytes_vs_sdk"]),
        ]
        for e in results["peers"]["rows"]
    ]
    head = ["row", "peer", "CPU per turn", "× SDK", "bytes per turn", "× SDK"]
    return table(head, rows)


def _short(result: dict[str, Any], peer: str) -> list[dict[str, Any]]:
    """``peer``'s rows of a fresh file (1 caller and 16 callers)."""
    return [e for e in _peer_rows(result, peer).values() if "caller" in e["row"]]


def _lengths(result: dict[str, Any], peer: str) -> dict[int, dict[str, Any]]:
    return {
        int(e["row"].split()[1].replace(",", "")): e
        for e in _peer_rows(result, peer).values()
        if e["row"].startswith("length")
    }


@figure("peers-cpu-vs-sdk")
def peers_cpu_vs_sdk(results: Results) -> str:
    return span([e["cpu_vs_sdk"] for e in _short(results["peers"], "ours")], unit="x")


@figure("peers-bytes-vs-sdk")
def peers_bytes_vs_sdk(results: Results) -> str:
    return span([e["bytes_vs_sdk"] for e in _short(results["peers"], "ours")], unit="x")


@figure("peers-bytes-one-caller")
def peers_bytes_one_caller(results: Results) -> str:
    return size(_peer_rows(results["peers"], "ours")["1 caller"]["bytes_per_turn"])


@figure("peers-cpu-by-caller")
def peers_cpu_by_caller(results: Results) -> str:
    rows = _peer_rows(results["peers"], "ours")
    many, one = rows["16 callers"]["cpu_vs_sdk"], rows["1 caller"]["cpu_vs_sdk"]
    return f"{times(many)}x with 16 callers, {times(one)}x with one"


@figure("peers-ours-vs-baseline")
def peers_ours_vs_baseline(results: Results) -> str:
    """Our turn against the ``--baseline`` tree's, in the same run, by caller count."""
    ours, base = _peer_rows(results["peers"], "ours"), _peer_rows(results["peers"], "baseline")
    return ", ".join(
        f"{ms(ours[row]['cpu_ms_per_turn'])} against {ms(base[row]['cpu_ms_per_turn'])} {label}"
        for row, label in (("1 caller", "with one caller"), ("16 callers", "with 16"))
    )


@figure("peers-sdk-growth")
def peers_sdk_growth(results: Results) -> str:
    result = results["peers"]
    short = _peer_rows(result, "sdk")["1 caller"]["cpu_ms_per_turn"]
    by_length = _lengths(result, "sdk")
    return f"{ms(short)} on a short conversation, " + ", ".join(
        f"{ms(e['cpu_ms_per_turn'])} at {n:,} turns" for n, e in sorted(by_length.items())
    )


@figure("peers-ours-growth")
def peers_ours_growth(results: Results) -> str:
    by_length = _lengths(results["peers"], "ours")
    return ", ".join(
        f"{ms(e['cpu_ms_per_turn'])} and {size(e['bytes_per_turn'])} at {n:,} turns"
        for n, e in sorted(by_length.items())
    )


@figure("peers-langgraph-growth")
def peers_langgraph_growth(results: Results) -> str:
    result = results["peers"]
    short = _peer_rows(result, "langgraph")["1 caller"]["bytes_per_turn"]
    by_length = _lengths(result, "langgraph")
    return f"{size(short)} per turn on a short conversation, " + ", ".join(
        f"{size(e['bytes_per_turn'])} at {n:,} turns" for n, e in sorted(by_length.items())
    )


@figure("peers-text-chars")
def peers_text_chars(results: Results) -> str:
    result = results["peers"]
    return f"{result['prompt_chars'] + result['reply_chars']:,} characters"


@figure("peers-full-table", source="peers_full")
def peers_full_table(results: Results) -> str:
    result = results["peers_full"]
    rows = []
    for row in dict.fromkeys(e["row"] for e in result["rows"]):
        cells = {e["peer"]: e for e in result["rows"] if e["row"] == row}
        line = [row]
        for peer in ("floor", "sdk", "langgraph"):
            e = cells[peer]
            line.append(f"{ms(e['cpu_ms_per_turn'])}, {size(e['bytes_per_turn'])}")
        e = cells["ours"]
        line.append(
            f"{ms(e['cpu_ms_per_turn'])} ({times(e['cpu_vs_sdk'])}x), "
            f"{size(e['bytes_per_turn'])} ({times(e['bytes_vs_sdk'])}x)"
        )
        rows.append(line)
    head = ["row", "floor", "`SQLiteSession`", "LangGraph", "ours (× `SQLiteSession`)"]
    return table(head, rows)


# ---------------------------------------------------------------------------------------
# Instructions per turn (benchmarks/turn_instructions.py --loop --baseline CHECKOUT).


def _instructions(results: Results, field: str, name: str = "turn_instructions") -> str:
    # An instruction count (``field`` of result set ``name``'s rows: a turn's, or a store's
    # in ``store_instructions``), against the ``--baseline`` tree's when it was run.
    unit = "a store" if name == "store_instructions" else "a turn"
    rows = {r["tree"]: r for r in results[name]["rows"]}
    ours = rows["this tree"][field]
    base = rows.get("baseline", {}).get(field)
    if base is None:
        return f"{ours:,} instructions {unit}"
    return f"{ours:,} instructions {unit} against {base:,} before ({(ours / base - 1) * 100:+.1f}%)"


@figure("instructions-loop")
def instructions_loop(results: Results) -> str:
    """The event loop's thread alone, this tree against the ``--baseline`` one."""
    return _instructions(results, "event_loop_instructions_per_turn")


@figure("instructions-turn")
def instructions_turn(results: Results) -> str:
    """The whole turn (both threads), this tree against the ``--baseline`` one."""
    return _instructions(results, "instructions_per_turn")


# ---------------------------------------------------------------------------------------
# Where our turn goes (benchmarks/peers.py --profile).


@figure("profile-table", source="peers_profile")
def profile_table(results: Results) -> str:
    r = results["peers_profile"]
    inner = ", ".join(
        f"{_INDEX_NAMES.get(k, k)} {v:.0f}" for k, v in r["fts_inner_statements_by_index"].items()
    )
    written = ", ".join(
        f"{v:g} {k}" for k, v in r["rows_by_table"].items() if v >= 0.5 and "_data" not in k
    )
    rows = [
        ["CPU (unprofiled)", ms(r["split_cpu_ms_per_turn"])],
        ["on the event-loop thread", ms(r["split_event_loop_thread_ms_per_turn"])],
        [
            "on the store's thread, Python",
            ms(r["split_store_thread_ms_per_turn"] - r["split_sqlite_execute_ms_per_turn"]),
        ],
        [
            "on the store's thread, inside SQLite (`execute`)",
            ms(r["split_sqlite_execute_ms_per_turn"]),
        ],
        [
            "SQL statements",
            f"{r['sql_statements_per_turn']:.0f}, and {r['fts_inner_statements_per_turn']:.0f} "
            f"run inside FTS5 ({inner})",
        ],
        ["rows written", f"{r['rows_written_per_turn']:.0f} ({written})"],
        ["WAL pages written", f"{r['wal_pages_per_turn']:.0f}"],
        [f"bytes on disk ({r['disk_turns']:,} turns, 16 conversations)", size(r["bytes_per_turn"])],
    ]
    return table(["per turn, our turn", "measured"], rows)


@figure("profile-wal-pages")
def profile_wal_pages(results: Results) -> str:
    return f"{results['peers_profile']['wal_pages_per_turn']:.0f}"


@figure("profile-wal-btrees", source="peers_profile")
def profile_wal_btrees(results: Results) -> str:
    r = results["peers_profile"]
    pages = r["wal_pages_by_btree"]
    names = {
        "sqlite_schema": "page 1 (the file's header: its size, its freelist)",
        "(freelist)": "the freelist (pages freed and taken again)",
    }
    rows = [[names.get(k, f"`{k}`"), f"{v:.2f}"] for k, v in pages.items() if v >= 0.5]
    rows.append(["everything else", f"{sum(v for v in pages.values() if v < 0.5):.2f}"])
    rows.append(
        [
            f"**a turn** ({len(set(pages) - {'(freelist)'})} B-trees, pages of"
            f" {r['page_size']:,} B)",
            f"**{sum(pages.values()):.1f}** ({size(r['wal_bytes_per_turn'])})",
        ]
    )
    return table(["table or index", "WAL pages per turn"], rows)


_INDEX_NAMES = {
    "search_text": "the search index",
    "bookkeeping_names": "the bookkeeping names' trigram index",
    "PRAGMA 'main'.data_version": "`data_version`",
}


@figure("profile-bytes", source="peers_profile")
def profile_bytes(results: Results) -> str:
    r = results["peers_profile"]
    rows = [[f"`{k}`", f"{v:,}"] for k, v in r["file_bytes_by_table_per_turn"].items() if v >= 10]
    rows.append(
        [
            "everything else",
            f"{sum(v for v in r['file_bytes_by_table_per_turn'].values() if v < 10):,}",
        ]
    )
    return table(["table or index", "bytes per turn"], rows)


@figure("profile-shares", source="peers_profile")
def profile_shares(results: Results) -> str:
    r = results["peers_profile"]
    threads = {"store": "the store's", "loop": "the event loop's"}
    rows = []
    for label, share in r["profiled_share_by_area"].items():
        name, thread = label.rsplit(" [", 1)
        # An indented area is a part of the one above it.
        name = f"of which {name.strip()}" if name.startswith(" ") else name
        rows.append([name, threads[thread.rstrip("]")], f"{share:.1%}"])
    return table(["area (cProfile, CPU per thread)", "thread", "share of its thread"], rows)


# ---------------------------------------------------------------------------------------
# The compact format, step by step (benchmarks/disk_layout_probe.py, and the profile).

#: each layout step of the probe: what it is, and the profile's area it takes work from
STEPS: dict[str, tuple[str, str | None]] = {
    "numbers": (
        "row numbers in edges (the conversation index's and the observations': built, "
        "versions 18 and 21)",
        None,
    ),
    "+type": ("the type index by number: (user, type code, number), not the id", None),
    "+name": ("no stored canonical name where the identity rules derive it", None),
    "+meta": ("snapshot metas as the winning observation's number", None),
    "+keys": (
        "idempotency keys numbered (version 8 finds them by a 16-byte digest already, "
        "version 19 packs their text)",
        "  idempotency keys",
    ),
    "+codec": (
        "(beyond the compact format and the field codec, built) a turn record's session and "
        "turn ids derived from its name",
        None,
    ),
}


def _rows_moved(probe: dict[str, Any], before: str, layout: str) -> str:
    rows = probe["rows_per_turn"]
    moved = [
        f"{rows[before][t] - rows[layout][t]:.0f} {t}"
        for t in rows[layout]
        if round(rows[before][t] - rows[layout][t])
    ]
    return ", ".join(moved)


@figure("compact-steps", source="disk_layout_probe")
def compact_steps(results: Results) -> str:
    probe, profile = results["disk_layout_probe"], results["peers_profile"]
    totals = probe["totals"]
    shares = {k.rsplit(" [", 1)[0]: v for k, v in profile["profiled_share_by_area"].items()}
    store_ms = profile["profiled_db_thread_ms_per_turn"]
    rows = [["today's file (est. as written: live)", "", size(totals["live"]), "", "", ""]]
    before, layouts = "copy", probe["layouts"][1:]
    for layout in layouts:
        what, area = STEPS[layout]
        est = totals[f"est {layout}"]
        moved = _rows_moved(probe, before, layout)
        cpu = f"{shares[area] * store_ms:.2f} ms" if area in shares else ""
        mark = " (**the compact format**)" if layout == probe["compact"] else ""
        rows.append(
            [
                f"`{layout}`",
                what + mark,
                size(est),
                f"{est - totals[f'est {before}' if before != 'copy' else 'live']:+,.0f} B",
                moved,
                cpu,
            ]
        )
        before = layout
    head = [
        "step",
        "what changes",
        "bytes per turn",
        "saves",
        "rows a turn no longer writes",
        "store-thread CPU on it (cProfile)",
    ]
    return table(head, rows)


#: the roadmap's items, and the profile's areas each takes its CPU from (each area once)
ROADMAP: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "1. the compact format's statements",
        ("  edges", "  idempotency keys"),
    ),
    (
        "2. the enter as one job, ids answered (done: what is left)",
        ("JSON encode and decode (store thread)", "answers parsed (_results from_json)"),
    ),
    ("3. the history read (two statements: what is left)", ("the history read",)),
    (
        "4. one job per phase on the event loop (the enter done: the close left)",
        ("anyio (scopes, tasks)", "asyncio (the loop, futures)"),
    ),
)
_THREAD_CPU = {
    "store": "split_store_thread_ms_per_turn",
    "loop": "split_event_loop_thread_ms_per_turn",
}


def _area_ms(profile: dict[str, Any]) -> dict[str, float]:
    """Each profiled area's share of its thread times that thread's unprofiled CPU."""
    out = {}
    for label, share in profile["profiled_share_by_area"].items():
        name, thread = label.rsplit(" [", 1)
        out[name] = share * profile[_THREAD_CPU[thread.rstrip("]")]]
    return out


def _roadmap(profile: dict[str, Any]) -> list[tuple[str, list[str], float]]:
    spent = _area_ms(profile)
    items = []
    claimed: set[str] = set()
    for label, areas in ROADMAP:
        own = [a for a in areas if a not in claimed]
        claimed.update(own)
        items.append((label, own, sum(spent[a] for a in own)))
    return items


@figure("roadmap-table", source="peers_profile")
def roadmap_table(results: Results) -> str:
    profile, peers = results["peers_profile"], results["peers"]
    rows = []
    total = 0.0
    for label, areas, ms_ in _roadmap(profile):
        total += ms_
        rows.append([label, ", ".join(a.strip() for a in areas), f"≤ {ms(ms_)}"])
    rows.append(["together", "", f"≤ {ms(total)}"])
    for row in ("16 callers", "1 caller"):
        ours = _peer_rows(peers, "ours")[row]["cpu_ms_per_turn"]
        sdk = _peer_rows(peers, "sdk")[row]["cpu_ms_per_turn"]
        for goal in (1.5, 1.0):
            need = ours - goal * sdk
            label = f"needed for ≤ {goal:g}x `SQLiteSession`, {row} (the peers table)"
            rows.append([label, "", ms(max(need, 0))])
    head = ["roadmap item", "the profile's areas it removes work from", "CPU per turn"]
    return table(head, rows)


@figure("roadmap-verdict")
def roadmap_verdict(results: Results) -> str:
    profile, peers = results["peers_profile"], results["peers"]
    total = sum(spent for _, _, spent in _roadmap(profile))
    parts = []
    for row in ("16 callers", "1 caller"):
        ours = _peer_rows(peers, "ours")[row]["cpu_ms_per_turn"]
        sdk = _peer_rows(peers, "sdk")[row]["cpu_ms_per_turn"]
        for goal in (1.5, 1.0):
            need = ours - goal * sdk
            where = f"≤ {goal:g}x with {row.replace('1 caller', 'one caller')}"
            if need <= 0:
                parts.append(f"{where} is met already")
            elif need <= total:
                parts.append(f"{where} needs {need / total:.0%} of their bound")
            else:
                parts.append(f"{where} needs {ms(need - total)} more than their bound")
    return "; ".join(parts)


@figure("compact-live")
def compact_live(results: Results) -> str:
    return size(results["disk_layout_probe"]["totals"]["live"])


@figure("compact-bytes")
def compact_bytes(results: Results) -> str:
    probe = results["disk_layout_probe"]
    return size(probe["totals"][f"est {probe['compact']}"])


@figure("beyond-bytes")
def beyond_bytes(results: Results) -> str:
    probe = results["disk_layout_probe"]
    return size(probe["totals"]["est " + probe["layouts"][-1]])


@figure("compact-saving")
def compact_saving(results: Results) -> str:
    probe = results["disk_layout_probe"]
    totals = probe["totals"]
    compact = totals["est " + probe["compact"]]
    return f"{1 - compact / totals['live']:.0%}"


# ---------------------------------------------------------------------------------------
# The store: bytes on disk, the embedded store, the SQLite floor.


@figure("disk-per-turn", source="disk_per_turn")
def disk_per_turn(results: Results) -> str:
    result = results["disk_per_turn"]
    target = result["target_bytes_per_turn"]
    rows = [
        [f"{r['turns']:,}", size(r["bytes_per_turn"]), f"≤ {size(target)}"] for r in result["rows"]
    ]
    return table(["turns", "embedded store", "target"], rows)


@figure("embedded-store", source="embedded_store")
def embedded_store(results: Results) -> str:
    r = results["embedded_store"]
    rows = [
        ["turn-shaped stores/s, 1 caller", f"{r['stores_per_s_1_caller']:,.0f}"],
        ["turn-shaped stores/s, 64 concurrent callers", f"{r['stores_per_s_64_callers']:,.0f}"],
        ["store on a conversation with 10 observations", ms(r["store_ms_at_10_obs"])],
        [
            "store on a conversation with 10,000 observations",
            f"{ms(r['store_ms_at_10k_obs'])} ({times(r['store_cost_ratio_10k_vs_10'])}x)",
        ],
        [
            "identifier lookup p50 / p99, 100,000 entities",
            f"{ms(r['lookup_p50_ms_100000'])} / {ms(r['lookup_p99_ms_100000'])}",
        ],
    ]
    return table(["metric", "value"], rows)


@figure("sqlite-floor", source="sqlite_floor")
def sqlite_floor(results: Results) -> str:
    r = results["sqlite_floor"]
    table_rows = _sqlite_floor_rows(r)
    if "ratio_1_caller_before" not in r:
        return table(["figure", "measured", "target"], table_rows)
    # Measured with --before: the other tree's figure beside each of ours.
    before = _sqlite_floor_rows(
        {k[: -len("_before")]: v for k, v in r.items() if k.endswith("_before")}
        | {k: v for k, v in r.items() if k.startswith("floor_")}
    )
    rows = [[row[0], was[1], row[1], row[2]] for row, was in zip(table_rows, before, strict=True)]
    return table(["figure", "`--before` tree", "this tree", "target"], rows)


def _sqlite_floor_rows(r: dict[str, Any]) -> list[list[str]]:
    return [
        ["embedded / bare SQLite, 1 caller", f"{r['ratio_1_caller']:.3f}", "≥ 0.6"],
        [
            "embedded / bare SQLite, 64 callers vs groups of 64",
            f"{r['ratio_64_callers']:.3f}",
            "≥ 0.75",
        ],
        [
            f"CPU ms per store, 1 caller (floor: {r['floor_cpu_ms_per_store_one_by_one']:.3f})",
            f"{r['embedded_cpu_ms_per_store_1_caller']:.3f}",
            "",
        ],
        [
            f"CPU ms per store, 64 callers (floor: {r['floor_cpu_ms_per_store_groups_of_64']:.3f})",
            f"{r['embedded_cpu_ms_per_store_64_callers']:.3f}",
            "",
        ],
        [
            f"SQL statements per store (floor: {r['floor_sql_statements_per_store']:.0f})",
            f"{r['sql_statements_per_store']:.0f}",
            "",
        ],
        [
            "full turns/s, 100 conversations",
            f"{r['turns_per_s_100_conversations']:,.0f}",
            "≥ 1,500",
        ],
        ["CPU ms per full turn", f"{r['cpu_ms_per_turn']:.2f}", ""],
    ]


@figure("instructions-store")
def instructions_store(results: Results) -> str:
    """A turn-shaped ``store`` (both threads), this tree against the ``--baseline`` one."""
    return _instructions(results, "instructions_per_store", "store_instructions")


@figure("instructions-store-concurrent")
def instructions_store_concurrent(results: Results) -> str:
    """A turn-shaped ``store`` from concurrent callers (``--store-callers``), both threads."""
    return _instructions(results, "instructions_per_store_concurrent", "store_instructions")


@figure("floor-needed-1")
def floor_needed_1(results: Results) -> str:
    """The CPU a store may cost with one caller for 0.6x the floor (its CPU over 0.6)."""
    r = results["sqlite_floor"]
    return f"{r['floor_cpu_ms_per_store_one_by_one'] / 0.6:.3f} ms"


@figure("floor-ours")
def floor_ours(results: Results) -> str:
    """Our store's CPU, one caller and 64, in the ``sqlite_floor.py`` run."""
    r = results["sqlite_floor"]
    one, many = r["embedded_cpu_ms_per_store_1_caller"], r["embedded_cpu_ms_per_store_64_callers"]
    return f"{one:.3f} ms and {many:.3f} ms"


@figure("floor-needed-64")
def floor_needed_64(results: Results) -> str:
    """The CPU a store may cost with 64 callers for 0.75x the floor (its CPU over 0.75)."""
    r = results["sqlite_floor"]
    return f"{r['floor_cpu_ms_per_store_groups_of_64'] / 0.75:.3f} ms"


@figure("instructions-store-loop")
def instructions_store_loop(results: Results) -> str:
    """A turn-shaped ``store`` on the event loop's thread alone, against ``--baseline``."""
    return _instructions(results, "event_loop_instructions_per_store", "store_instructions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    page = args.doc.read_text("utf-8")
    results = Results(args.results)
    try:
        if args.check:
            stale = stale_parts(page, results)
            if stale:
                print(
                    f"{args.doc.name}: stale figures {', '.join(stale)}: "
                    "run python scripts/performance_doc.py",
                    file=sys.stderr,
                )
                return 1
            return 0
        rendered = render_page(page, results)
    except FigureError as exc:
        print(f"{args.doc.name}: {exc}", file=sys.stderr)
        return 2
    if rendered != page:
        args.doc.write_text(rendered, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
