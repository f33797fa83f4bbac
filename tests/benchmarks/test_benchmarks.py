"""The benchmarks still run, and what they count (not how fast) is right.

Each runs as its own process with the smallest sizes it takes; timings are never asserted
here (they live in the benchmarks' tables), only the shape of the work they measured.

They take over a minute together, most of it in the benchmarks' own timed waits, so they
carry the ``bench`` mark and stay out of the default run: ``nox -s bench_smoke`` (or
``pytest -m bench``) runs them.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths_support import ROOT

pytestmark = pytest.mark.bench

BENCHMARKS = ROOT / "benchmarks"


def run_benchmark(name: str, *args: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def run_quiet_child(name: str, *args: str, tmp_path: Path) -> None:
    """Run a callgrind benchmark's child plainly (no valgrind): it exits 0 and prints
    nothing (its marks are plain system calls outside it)."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), "--child", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "view",
    [[], ["--scoped"], ["--backend", "trio"], ["--stores", "3", "--store-callers", "2"]],
    ids=["unscoped", "scoped", "trio", "stores"],
)
def test_turn_instructions_child_runs_its_turns_without_valgrind(
    tmp_path: Path, view: list[str]
) -> None:
    # The child counted under callgrind: its marks are plain system calls outside it.
    # ``--scoped``: the same turns, each conversation through its user's view; ``--backend
    # trio``: on trio; ``--stores``: turn-shaped stores instead, from concurrent callers.
    run_quiet_child("turn_instructions", "--turns", "1", *view, tmp_path=tmp_path)


@pytest.mark.parametrize(
    "variant",
    ["default", "queued", "one-commit", "names-automerge-0", "search-detail-none"],
)
def test_fts_instructions_child_writes_a_turns_documents_without_valgrind(
    tmp_path: Path, variant: str
) -> None:
    # The child counted under callgrind, run plain: each variant writes its turns.
    run_quiet_child(
        "fts_instructions", variant, "--warmup", "40", "--turns", "3", tmp_path=tmp_path
    )


@pytest.mark.skipif(sys.platform == "win32", reason="the dev server process uses spawn + fork")
def test_turn_overhead_counts_two_rounds_of_requests_for_ours(tmp_path: Path) -> None:
    report = run_benchmark(
        "turn_overhead", "--turns", "1", "--latency-ms", "2", "--no-pin", tmp_path=tmp_path
    )
    rows = {row["k"]: row for row in report["rows"]}
    assert sorted(rows) == [0, 1, 4, 8, 16]
    for k, row in rows.items():
        # k lookups, the history read and the user store on enter, the closing store on exit.
        assert row["ours_requests"] == k + 3
        # The reference pattern: its first 8 lookups, two stores, an edge per lookup each.
        looked_up = min(k, 8)
        assert row["baseline_requests"] == looked_up + 2 + 2 * looked_up
        # Every answer is held L: two rounds cannot take less than 2 L, nor the reference
        # pattern's one-at-a-time requests less than one L each.
        assert row["ours_L"] >= 2
        assert row["bare_http_L"] >= 2
        assert row["baseline_L"] >= row["baseline_requests"]
    assert report["cores"] is None  # --no-pin
    assert report["mean_hold_error_ms"] >= 0


def test_history_benchmark_reads_the_last_turns_of_each_length(tmp_path: Path) -> None:
    report = run_benchmark(
        "history", "--turns", "40,10", "--last", "5", "--reads", "2", tmp_path=tmp_path
    )
    assert [row["turns"] for row in report["rows"]] == [10, 40]
    assert all(row["embedded_ms"] > 0 and row["http_ms"] > 0 for row in report["rows"])
    assert report["last"] == 5


def test_turn_protocol_runs_every_row(tmp_path: Path) -> None:
    report = run_benchmark("turn_protocol", "--turns", "20", tmp_path=tmp_path)
    rows = report["sections"]["turn"]
    assert {(r["transport"], r["message"], r["conversations"]) for r in rows} >= {
        ("embedded", "no entity named", 100),
        ("embedded", "one entity named", 100),
    }
    assert all(r["turns"] == 20 and r["turns_per_s"] > 0 for r in rows)


def test_embedded_store_quick_run_reports_every_metric(tmp_path: Path) -> None:
    report = run_benchmark("embedded_store", "--quick", tmp_path=tmp_path)
    for metric in (
        "stores_per_s_1_caller",
        "stores_per_s_64_callers",
        "store_cost_ratio_10k_vs_10",
    ):
        assert report[metric] > 0
    assert any(key.startswith("lookup_p50_ms_") for key in report)


def test_audit_finds_every_seeded_orphan_and_repair_leaves_none(tmp_path: Path) -> None:
    report = run_benchmark("audit", "--quick", "--turns", "2", tmp_path=tmp_path)
    orphans = report["shape"]["orphans"]
    rows = {row["name"]: row for row in report["rows"]}
    assert orphans > 0
    assert rows["audit (whole store)"]["orphans"] == orphans
    assert rows["audit --repair"]["remaining"] == 0
    assert rows["audit after repair"]["orphans"] == 0


def test_outbox_quick_run_queues_and_delivers_every_entry(tmp_path: Path) -> None:
    report = run_benchmark("outbox", "--quick", tmp_path=tmp_path)
    assert report["entries"] == 100
    assert report["queued_per_s"] > 0
    assert report["delivered_per_s"] > 0


# --- import throughput and idle gaps (issue 15, sections 2 and 5) ------------------------


def test_import_throughput_runs_every_row_and_the_reimport_writes_nothing(
    tmp_path: Path,
) -> None:
    report = run_benchmark("import_throughput", "--turns", "40", tmp_path=tmp_path)
    rows = {row["row"]: row for row in report["rows"]}
    assert set(rows) == {"ceiling", "no-retrieve", "re-import", "retrieve", "http"}
    for name in ("no-retrieve", "retrieve", "http"):
        assert "40 turns in 4 conversations" in rows[name]["summary"]
    assert "nothing new to write: all 40 turns" in rows["re-import"]["summary"]
    for name in ("no-retrieve", "re-import", "retrieve", "http"):
        assert rows[name]["per_cpu_s"] > 0
        assert rows[name]["peak_rss_mb"] > 10  # the import's own peak, read from /proc
    assert rows["ceiling"]["store_many_per_cpu_s"] > 0


@pytest.mark.skipif(sys.platform != "linux", reason="the dev server process uses spawn")
def test_idle_gaps_counts_the_handshakes_each_strategy_leaves(tmp_path: Path) -> None:
    # A server dropping connections idle for 3 s, turns 5 s apart, bodies of 3.5 s; warming
    # 0.5 s before a turn and every 0.5 s of a body, so a busy machine has 2.5 s to spare
    # (load only lengthens the gaps and bodies, which must outlast the idle deadline).
    report = run_benchmark(
        "idle_gaps",
        *("--gaps", "5", "--server-idle", "3", "--body-s", "3.5"),
        *("--typing-s", "0.5", "--keep-every", "0.5", "--k", "2", "--turns", "1"),
        tmp_path=tmp_path,
    )
    rows = {row["strategy"]: row for row in report["rows"]}
    new = {s: (r["enter_new_connections"], r["exit_new_connections"]) for s, r in rows.items()}
    # k lookups, the user store and the history read on enter, each on its own connection.
    assert new == {"back-to-back": (0, 0), "none": (4, 1), "warm": (0, 1), "warm+keep": (0, 0)}
    # Four requests on enter and one on exit, plus any retry the transport logged: under
    # load a reused connection can reach the server's idle deadline mid-request and is retried.
    for r in rows.values():
        assert r["enter_requests"] >= 4
        assert r["exit_requests"] >= 1
        assert r["enter_requests"] + r["exit_requests"] == 5 + r["retries"]
    assert [rows[s]["turn_rt_tcp"] for s in ("back-to-back", "none", "warm", "warm+keep")] == [
        2,
        4,
        3,
        2,
    ]
    assert rows["none"]["warming_requests"] == 0
    assert rows["warm"]["warming_requests"] == 4
    assert rows["warm+keep"]["warming_requests"] > 4


def test_disk_per_turn_reports_each_size_and_where_the_bytes_are(tmp_path: Path) -> None:
    report = run_benchmark("disk_per_turn", "--turns", "20", "40", tmp_path=tmp_path)
    assert [row["turns"] for row in report["rows"]] == [20, 40]
    biggest = report["rows"][-1]
    assert biggest["bytes_per_turn"] == round(biggest["file_bytes"] / 40, 1)
    # The per-table figures add up to the file: dbstat counts every page but the free ones.
    assert sum(biggest["tables"].values()) <= biggest["bytes_per_turn"]
    assert {"entities", "observations", "idempotency_keys"} <= biggest["tables"].keys()


def test_sqlite_floor_reports_both_ratios_from_one_run(tmp_path: Path) -> None:
    report = run_benchmark("sqlite_floor", "--stores", "128", "--turns", "100", tmp_path=tmp_path)
    assert report["ratio_1_caller"] == pytest.approx(
        report["embedded_stores_per_s_1_caller"] / report["floor_stores_per_s_one_by_one"],
        rel=0.01,
    )
    assert report["ratio_64_callers"] == pytest.approx(
        report["embedded_stores_per_s_64_callers"] / report["floor_stores_per_s_groups_of_64"],
        rel=0.01,
    )
    assert report["turns_per_s_100_conversations"] > 0
    # What it counts: a turn-shaped store runs more statements than the bare floor's eight.
    assert report["sql_statements_per_store"] > report["floor_sql_statements_per_store"] >= 8
    assert report["embedded_cpu_ms_per_store_64_callers"] > 0


def test_scale_finds_every_company_and_every_seeded_orphan(tmp_path: Path) -> None:
    # The benchmark exits non-zero if a lookup misses or the audit misses an orphan.
    report = run_benchmark(
        "scale", "--entities", "600", "--turns", "200", "--samples", "50", tmp_path=tmp_path
    )
    assert report["entities"] == 600
    assert 0 < report["lookup_p50_ms"] <= report["lookup_p99_ms"]
    assert [row["turns"] for row in report["audits"]] == [20, 200]


def test_search_index_options_replays_the_stores_index_and_compares_every_answer(
    tmp_path: Path,
) -> None:
    report = run_benchmark(
        "search_index_options",
        *("--write-turns", "40", "--messages", "400", "--facts", "5"),
        tmp_path=tmp_path,
    )
    # One document a transaction, declared as the store declares it: the store's own bytes.
    replayed = report["bytes_per_turn"]["today"]["live"]
    assert replayed == report["written_per_turn"]
    assert report["documents"] == 80  # a prompt and a reply a turn
    positions = report["bytes_per_turn"]["version 28 (detail=full)"]["live"]
    assert replayed["search_text_data"] < positions["search_text_data"]
    answers = report["answers"]
    assert answers["today (rebuilt)"]["same"] == answers["today (rebuilt)"]["searches"] > 20
    # the AND of a query's words, a phrase checked on the texts: no declaration fails one,
    # but those without the texts' lengths (no size table to rank by)
    for name, row in answers.items():
        assert (row["failed"] > 0) == ("columnsize=0" in name), name
    # ranked by the texts' lengths alone: positions change no order
    full = answers["version 28 (detail=full)"]
    assert full["same_order"] == full["searches"]


def test_disk_layout_probe_copies_every_row_into_each_layout(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    code = (
        "import sys, anyio; sys.path.insert(0, sys.argv[2]); import disk_per_turn as d; "
        "anyio.run(d.write_turns, __import__('pathlib').Path(sys.argv[1]), 60)"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(store), str(BENCHMARKS)], check=True, timeout=120
    )
    report = run_benchmark("disk_layout_probe", str(store), tmp_path=tmp_path)
    # (60 turns: at 30, every table of every layout fills the same pages)
    assert report["turns"] == 60
    tables = report["tables"]
    # The live file's type index holds the type's code (schema version 14); keyed by number
    # instead of the id it is no larger (60 turns' entries fill the same pages either way).
    assert tables["entities_by_type"]["+type"] <= tables["entities_by_type"]["numbers"]
    assert set(report["totals"]) >= {"live", "copy", "est +meta", f"est {report['compact']}"}
    rows = report["rows_per_turn"]
    # The live file keeps an entity's first observation in its entity row (schema 11), and
    # a turn record's close (schema 32), so every layout does: a short turn writes 1
    # observation row (the conversation's), its messages and its turn record none.
    assert rows["copy"]["observations"] == rows["+keys"]["observations"] == 1
    # A message's PART_OF edge is the conversation index's pair in the live file (schema
    # 10), so in every layout: a short turn writes no edge row.
    assert rows["copy"]["relationships"] == 0 < rows["copy"]["conversation_messages"]
    assert rows["+keys"]["conversation_messages"] == rows["copy"]["conversation_messages"]
    # The keys are numbered and found by a digest: an index of its own, counted.
    assert tables["idempotency_keys_by_digest"]["est +keys"] > 0
    assert report["totals"][f"est {report['compact']}"] < report["totals"]["live"]
    # The live file holds the protocol records' fields coded (schema 16); what ``+codec``
    # models of the rest (a turn record's ids derived from its name) changes no row count
    # and no other table, and no larger entity rows (60 turns' fill the same pages).
    assert tables["entities"]["est +codec"] <= tables["entities"]["est +keys"]
    assert rows["+codec"] == rows["+keys"]
    with sqlite3.connect(store) as conn:
        docs = [r[0] for r in conn.execute("SELECT snapshot FROM entities WHERE type_code = 1")]
    assert docs
    assert all(d.startswith('{"f":[1,') for d in docs)
    # The live file is this release's: no copy of the texts in its search index, nor of
    # the bookkeeping names in theirs (which every layout keeps).
    assert "search_text_content" not in tables
    assert "bookkeeping_names_content" not in tables
    assert tables["bookkeeping_names_data"]["est +keys"] == tables["bookkeeping_names_data"]["live"]
    # An entity row holds its id packed (schema 12), so every layout does: the ids' index
    # is the live file's in every layout.
    assert "+ids" not in report["layouts"]
    assert report["meta"]["command"].startswith("python benchmarks/disk_layout_probe.py")


def test_retrieval_quality_scores_every_labelled_turn(tmp_path: Path) -> None:
    report = run_benchmark("retrieval_quality", tmp_path=tmp_path)
    assert sorted(report["backends"]) == ["embedded / heldout", "embedded / main"]
    for name, path in (("main", "retrieval_corpus.json"), ("heldout", "retrieval_heldout.json")):
        row = report["backends"][f"embedded / {name}"]
        corpus = json.loads((BENCHMARKS / path).read_text("utf-8"))
        turns = [t for c in corpus["conversations"] for t in c["turns"]]
        assert row["turns"] == len(turns)
        assert row["named"] == sum(len(t["names"]) for t in turns)
        assert row["referred"] == sum(len(t.get("refers", ())) for t in turns)
        # Every turn is counted in its category, once.
        assert sum(c["turns"] for c in row["categories"].values()) == len(turns)
        assert set(row["categories"]) == {t["category"] for t in turns}
        for key in ("precision", "recall", "recency", "wrong_turns"):
            assert row[key] is None or 0 <= row[key] <= 1
        # Every failure names the turn and what went wrong.
        assert all(
            f["wrong"] or f["missed"] or f["unseen"] or f["wrong_edges"] for f in row["failures"]
        )


def test_tool_calls_keep_a_turn_at_two_stores_and_two_rounds(tmp_path: Path) -> None:
    report = run_benchmark("tool_calls", "--quick", tmp_path=tmp_path)
    for backend in ("embedded", "dev server"):
        rows = {row["calls"]: row for row in report[backend]}
        assert sorted(rows) == [0, 5, 50]
        for row in rows.values():
            assert row["stores_per_turn"] == 2
            assert row["requests_per_turn"] == 3  # the history read brings the calls along
            assert row["rounds_per_turn"] == 2
        assert rows[50]["bytes_per_call"] > 0
        assert rows[50]["lib_us_per_call"] > 0
        assert rows[50]["total_us_per_call"] >= rows[50]["lib_us_per_call"] * 0.5


def test_tool_calls_compares_a_baseline_tree_side_by_side(tmp_path: Path) -> None:
    root = BENCHMARKS.parent
    report = run_benchmark("tool_calls", "--quick", "--baseline", str(root), tmp_path=tmp_path)
    assert report["baseline"]["tree"] == str(root)
    assert Path(report["baseline"]["package"]).resolve() == root.resolve()
    assert [r["calls"] for r in report["baseline"]["embedded"]] == [0, 5, 50]


@pytest.mark.slow  # about 10 s: some thirty fresh interpreters
def test_startup_quick_run_times_every_row(tmp_path: Path) -> None:
    report = run_benchmark("startup", "--quick", tmp_path=tmp_path)
    assert [row["row"].split(" (")[0] for row in report["rows"]] == [
        "python -c pass",
        "the dependencies alone",
        "import neotoma_agent",
        "neotoma-agent --version",
        "neotoma-agent show demo",
        "neotoma-agent stats",
        "neotoma-agent serve: SIGTERM to exit",
    ]
    assert all(row["median_s"] > 0 for row in report["rows"])


def test_sync_overhead_runs_both_ways_on_both_transports(tmp_path: Path) -> None:
    report = run_benchmark(
        "sync_overhead", "--turns", "2", "--rounds", "2", "--chunks", "3", tmp_path=tmp_path
    )
    rows = {(row["transport"], row["body"]): row for row in report["rows"]}
    assert sorted(rows) == [
        (transport, body)
        for transport in ("embedded", "http")
        for body in ("bridge", "reply", "stream")
    ]
    for row in rows.values():
        assert row["async_ms"] > 0
        assert row["sync_ms"] > 0
        assert row["ratio"] == pytest.approx(row["sync_ms"] / row["async_ms"], rel=0.01)


def test_hook_latency_times_every_event_beside_its_baseline(tmp_path: Path) -> None:
    # This tree as its own baseline: every row there, every ratio read pair by pair.
    root = BENCHMARKS.parent
    report = run_benchmark(
        "hook_latency", "--turns", "1", "--baseline", str(root), tmp_path=tmp_path
    )
    rows = {row["process"]: row for row in report["rows"]}
    for event in ("UserPromptSubmit", "PostToolUse", "Stop", "import neotoma_agent"):
        assert rows[event]["runs"] == 1
        assert rows[event]["cpu_vs_baseline"] > 0
        assert rows[f"{event} (baseline)"]["cpu_vs_baseline"] is None
    assert rows["python -c pass"]["cpu_vs_baseline"] is None


def test_search_benchmark_finds_the_planted_facts(tmp_path: Path) -> None:
    report = run_benchmark("search", "--messages", "2000", "--facts", "20", tmp_path=tmp_path)
    assert (report["messages"], report["facts"]) == (2000, 20)
    rows = report["rows"]
    assert sorted(rows) == sorted(
        ("facts", "phrase", "one conversation", "common words", "facts over HTTP")
    )
    assert rows["facts"]["searches"] == 20
    # Each fact's query matches the fact and the distractors that hold every word.
    assert rows["facts"]["mean_hits"] >= 3
    assert report["top3_recall"] >= 0.9
    assert report["top3_recall_http"] == report["top3_recall"]


def test_user_message_path_reaches_the_insert_through_the_turn_machine(tmp_path: Path) -> None:
    report = run_benchmark("user_message_path", tmp_path=tmp_path)
    assert report["reached_insert"]
    path = list(report["path"])
    # The core's part, in the order the text takes it; then the store's.
    core = [m for m in path if not m.startswith("neotoma_agent.transport")]
    assert core[:3] == [
        "neotoma_agent._memory",
        "neotoma_agent._records.text",
        "neotoma_agent._turn",
    ]
    assert {"neotoma_agent._phases", "neotoma_agent._engine.machine"} <= set(core)
    assert "neotoma_agent.transport.embedded._write" in path
    # A ratchet: the path may get shorter, never longer (lower it when it does).
    assert len(path) <= 13
    # Retrieval reads the text beside the store, not on its way.
    assert "neotoma_agent._recall.extract" in report["beside"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc/self/task (Linux)")
def test_turn_threads_splits_one_callers_turn_into_two_commits(tmp_path: Path) -> None:
    report = run_benchmark(
        "turn_threads", "--turns", "32", "--rounds", "1", "--inline", tmp_path=tmp_path
    )
    rows = {(r["callers"], r["variant"]): r for r in report["rows"]}
    assert set(rows) == {(1, "thread"), (1, "inline"), (16, "thread")}
    # One caller's turn is two trips to the store's thread, each a group of its own: two
    # transactions a turn. Sixteen callers' stores share them.
    assert rows[(1, "thread")]["split"]["groups"] == 2
    assert rows[(16, "thread")]["split"]["groups"] < 2
    for row in rows.values():
        assert row["cpu_ms_per_turn"] > 0
        assert row["threads"]["event loop"]["cpu_ms"] > 0
    assert "store" in rows[(1, "thread")]["threads"]
    assert "store" not in rows[(1, "inline")]["threads"]  # no store thread: no trip
