"""The command line as a user runs it, on a real store file: in-process through `cli`, in a
real process where only one shows the behaviour (signals, a server)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from cli_support import (
    assert_one_line_error,
    clean_env,
    cli,
    default_sigint,
    free_port,
    ok,
    serving,
    show_json,
)

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._util.terminal import printable
from neotoma_agent.cli._common import Progress
from neotoma_agent.cli._import import ImportLine, ImportStats, LineError, parse_line
from neotoma_agent.qa import ReportEntity, ReportRepair, TurnReportInput, render_turn_report
from neotoma_agent.transport.embedded import EmbeddedStore


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private home directory (the default store would live under it)."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def demo_db(home: Path) -> Path:
    """A store file the demo wrote (once for this module)."""
    db = home / "demo.db"
    out = ok(cli("demo", "--db", str(db), home=home))
    assert "-- turn 6 (t6)" in out
    assert f"neotoma-agent show demo --db {db}" in out
    return db


def write_jsonl(path: Path, *lines: object) -> Path:
    """A transcript file; str items are written as they are (malformed lines)."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


# --- demo, show, stats ---------------------------------------------------------------------


def test_demo_then_show_reads_the_conversation_back(demo_db: Path, home: Path) -> None:
    out = ok(cli("show", "demo", "--db", str(demo_db), home=home))
    assert out.startswith("conversation demo (Onboarding Acme Corp): 6 turns\n")
    assert "turn 1 [t1] completed" in out
    assert "turn 4 [t4] ABANDONED (DemoModelError)" in out
    assert "  assistant (partial reply): The Lisbon offsite for Acme Corp: day \n" in out
    assert "  user: What do we know about Acme Corp?\n        refers to: Acme Corp (company)" in out
    assert "refers to: Acme Corp (company), Ana Lopez (person)" in out


def test_show_json_has_every_turn_with_exact_content_and_references(
    demo_db: Path, home: Path
) -> None:
    transcript = show_json(demo_db, "demo", home)
    turns = transcript["turns"]
    assert [t["turn_id"] for t in turns] == ["t1", "t2", "t3", "t4", "t5", "t6"]
    assert [t["status"] for t in turns] == ["completed"] * 3 + ["abandoned"] + ["completed"] * 2
    abandoned = turns[3]
    assert abandoned["abandoned"] is True
    assert abandoned["repaired"] is False
    assert abandoned["error_class"] == "neotoma_agent.cli._demo_script.DemoModelError"
    user, partial = abandoned["messages"]
    assert (user["role"], partial["role"]) == ("user", "assistant")
    assert partial["content"] == "The Lisbon offsite for Acme Corp: day "
    assert [r["name"] for r in turns[1]["messages"][0]["refers_to"]] == ["Acme Corp"]
    assert {r["entity_type"] for r in turns[0]["messages"][1]["refers_to"]} == {
        "company",
        "person",
    }


#: what a hostile transcript holds: a title change, a screen clear, C1 CSI, DEL, a bare CR,
#: bidi override and isolate characters, and the newline and tab that must stay
HOSTILE = (
    "title \x1b]0;PWNED\x07 clear \x1b[2J csi \x9b31m del \x7f cr \rspoof "
    "bidi \u202eevil\u202c iso \u2066x\u2069\n\tnext line"
)
#: the characters no human-readable output may print raw
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


async def _seed_hostile(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        memory = NeotomaMemory(store, conversation_id="evil", conversation_title=HOSTILE)
        await memory.record_turn(HOSTILE, "reply: " + HOSTILE, turn_id="t1")
        await memory.open_turn(HOSTILE, turn_id="t2")
        # What another client of a shared store could write: a hostile turn id, status and
        # entity type, which `stats` and `audit` print.
        turn_key = "evil:t\x1b[2J"
        await store.store(
            [
                {
                    "entity_type": "conversation_turn",
                    "session_id": "evil",
                    "turn_key": turn_key,
                    "turn_id": "t\x1b[2J",
                    "status": "\x1b]0;PWNED\x07",
                },
                {
                    "entity_type": "conversation_message",
                    "role": "user",
                    "sender_kind": "user",
                    "content": HOSTILE,
                    "turn_key": turn_key,
                },
                {"entity_type": "note\x9b2J", "name": HOSTILE},
            ],
            idempotency_key="raw-hostile",
        )


def raw_cli(*args: str, home: Path) -> str:
    """The stdout of a run, with its CRs (``cli`` does no newline translation)."""
    result = cli(*args, home=home)
    assert UNSAFE.search(result.stderr) is None, result.stderr
    return result.stdout


def test_show_escapes_control_sequences_and_json_keeps_the_exact_text(tmp_path: Path) -> None:
    # Issue 10 §8: stored text was printed raw, so a transcript could retitle or clear the
    # terminal of whoever ran `show`.
    db = tmp_path / "memory.db"
    anyio.run(_seed_hostile, db)
    out = raw_cli("show", "evil", "--db", str(db), home=tmp_path)
    assert UNSAFE.search(out) is None, repr(out)
    assert "\x1b" not in out
    assert "\x07" not in out
    assert (
        "  user: title \\x1b]0;PWNED\\x07 clear \\x1b[2J csi \\x9b31m del \\x7f cr \\x0dspoof "
        "bidi \\u202eevil\\u202c iso \\u2066x\\u2069\n        \tnext line\n"
    ) in out
    listed = raw_cli("show", "--db", str(db), home=tmp_path)
    assert UNSAFE.search(listed) is None, repr(listed)

    turns = show_json(db, "evil", tmp_path)["turns"]
    assert [m["content"] for m in turns[0]["messages"]] == [HOSTILE, "reply: " + HOSTILE]
    assert [m["content"] for m in turns[1]["messages"]] == [HOSTILE]
    raw = raw_cli("show", "evil", "--json", "--db", str(db), home=tmp_path)
    assert json.loads(raw)["turns"][0]["messages"][0]["content"] == HOSTILE


def test_stats_and_audit_print_no_control_sequences(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    anyio.run(_seed_hostile, db)
    stats = raw_cli("stats", "--db", str(db), home=tmp_path)
    assert "note\\x9b2J" in stats
    assert "(1 \\x1b]0;PWNED\\x07, 1 completed, 1 open)" in stats
    audit = raw_cli("audit", "--min-age", "0", "--db", str(db), home=tmp_path)
    assert "orphan_turn  evil / t\\x1b[2J: " in audit
    for out in (stats, audit):
        assert UNSAFE.search(out) is None, out


def test_show_without_a_conversation_lists_them(demo_db: Path, home: Path) -> None:
    out = ok(cli("--db", str(demo_db), "show", home=home))
    assert "1 conversation(s)" in out
    assert "demo" in out
    listed = json.loads(ok(cli("show", "--json", "--db", str(demo_db), home=home)))
    assert [c["conversation_id"] for c in listed] == ["demo"]


def test_show_an_unknown_conversation_is_a_one_line_error(demo_db: Path, home: Path) -> None:
    result = cli("show", "no-such-chat", "--db", str(demo_db), home=home)
    assert_one_line_error(result, "no conversation 'no-such-chat'")


def test_stats_counts_entities_conversations_and_abandoned_turns(demo_db: Path, home: Path) -> None:
    stats = json.loads(ok(cli("stats", "--json", "--db", str(demo_db), home=home)))
    assert stats["conversations"] == 1
    assert stats["turns"] == 6
    assert stats["abandoned_turns"] == 1
    assert stats["turns_by_status"] == {"abandoned": 1, "completed": 5}
    assert stats["entities_by_type"]["company"] == 1
    assert stats["entities_by_type"]["conversation_message"] == 12
    assert stats["entities"] == sum(stats["entities_by_type"].values())
    text = ok(cli("stats", "--db", str(demo_db), home=home))
    assert "abandoned turns: 1" in text
    assert "turns: 6 (1 abandoned, 5 completed)" in text


def test_the_demo_without_db_leaves_nothing_behind(tmp_path: Path) -> None:
    out = ok(cli("demo", home=tmp_path))
    assert "a temporary store" in out
    assert "neotoma-agent demo --db demo.db" in out
    assert not (tmp_path / "data").exists()


# --- import --------------------------------------------------------------------------------


def test_import_twice_writes_nothing_the_second_time(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    transcript = write_jsonl(
        tmp_path / "t.jsonl",
        {"conversation_id": "support-1", "user": "Hi, I'm Ana from Acme Corp", "assistant": "Hi!"},
        {"conversation_id": "support-1", "user": "Acme Corp wants a refund", "assistant": "Ok."},
        {"conversation_id": "support-2", "turn_id": "m-9", "user": "hello", "assistant": "hey"},
    )
    first = ok(cli("import", str(transcript), "--db", str(db), home=tmp_path))
    assert "3 turns in 2 conversations" in first
    assert "stored 3 new turns" in first
    before = json.loads(ok(cli("stats", "--json", "--db", str(db), home=tmp_path)))
    size = db.stat().st_size

    second = ok(cli("import", str(transcript), "--db", str(db), home=tmp_path))
    assert "nothing new to write: all 3 turns were already stored" in second
    after = json.loads(ok(cli("stats", "--json", "--db", str(db), home=tmp_path)))
    assert after == before
    assert db.stat().st_size == size

    turns = show_json(db, "support-1", tmp_path)["turns"]
    assert [t["turn_id"] for t in turns] == ["import-1", "import-2"]
    assert [m["content"] for m in turns[1]["messages"]] == ["Acme Corp wants a refund", "Ok."]
    assert [t["turn_id"] for t in show_json(db, "support-2", tmp_path)["turns"]] == ["m-9"]


def test_import_keeps_exact_content(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    text = '  tabs\tand\nnewlines\r\n, emoji 🧠, quotes " and trailing spaces  '
    transcript = write_jsonl(
        tmp_path / "t.jsonl", {"conversation_id": "c", "user": text, "assistant": ""}
    )
    ok(cli("import", str(transcript), "--db", str(db), home=tmp_path))
    (turn,) = show_json(db, "c", tmp_path)["turns"]
    assert [m["content"] for m in turn["messages"]] == [text, ""]


def test_import_reports_a_malformed_line_by_number_and_stores_the_others(
    tmp_path: Path,
) -> None:
    db = tmp_path / "memory.db"
    transcript = write_jsonl(
        tmp_path / "t.jsonl",
        {"conversation_id": "c", "user": "one", "assistant": "1"},
        '{"conversation_id": "c", "user": "broken"',
        {"conversation_id": "c", "user": "two", "assistant": 2},
        "",
        {"conversation_id": "c", "user": "three", "assistant": "3", "refers_to": ["acme"]},
        {"conversation_id": "c", "user": "four", "assistant": "4"},
    )
    result = cli("import", str(transcript), "--db", str(db), home=tmp_path)
    assert result.returncode == 1
    assert "line 2: skipped: not valid JSON" in result.stderr
    assert "line 3: skipped: 'assistant' must be a string, not a number" in result.stderr
    assert "line 5: skipped: 'refers_to': not a Neotoma entity id" in result.stderr
    assert "Traceback" not in result.stderr
    assert "skipped 3 malformed lines: 2, 3, 5" in result.stdout
    turns = show_json(db, "c", tmp_path)["turns"]
    assert [t["messages"][0]["content"] for t in turns] == ["one", "four"]


def test_fixing_a_skipped_line_and_importing_again_stores_exactly_that_line(
    tmp_path: Path,
) -> None:
    # Issue 10 §6: ids counted only the lines that parsed, so the fixed line was refused
    # (its id was taken by the next line) and the next line was stored a second time.
    db = tmp_path / "memory.db"
    good = [
        {"conversation_id": "c", "user": "one", "assistant": "1"},
        {"conversation_id": "c", "user": "two", "assistant": "2"},
        {"conversation_id": "c", "user": "three", "assistant": "3"},
        {"conversation_id": "d", "user": "four", "assistant": "4"},
    ]
    broken = '{"conversation_id": "c", "user": "two", "assistant" "2"}'
    transcript = write_jsonl(tmp_path / "t.jsonl", good[0], broken, "", good[2], good[3])
    assert cli("import", str(transcript), "--db", str(db), home=tmp_path).returncode == 1
    before = {c: show_json(db, c, tmp_path)["turns"] for c in ("c", "d")}

    write_jsonl(transcript, good[0], good[1], "", good[2], good[3])
    second = ok(cli("import", str(transcript), "--db", str(db), home=tmp_path))
    assert "stored 1 new turn; 3 were already stored" in second
    turns = show_json(db, "c", tmp_path)["turns"]
    assert [[m["content"] for m in t["messages"]] for t in turns] == [
        ["one", "1"],
        ["two", "2"],
        ["three", "3"],
    ]

    # Only the fixed line is new: every turn stored before is unchanged (same entities,
    # no new observation); "turn" is the position in the listing, which the fix shifts.
    def stored(turns: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{k: v for k, v in t.items() if k != "turn"} for t in turns]

    assert stored([t for t in turns if t["turn_id"] != "import-2"]) == stored(before["c"])
    assert show_json(db, "d", tmp_path)["turns"] == before["d"]
    assert [t["turn_id"] for t in turns] == ["import-1", "import-2", "import-4"]
    assert [t["turn_id"] for t in before["d"]] == ["import-5"]
    third = ok(cli("import", str(transcript), "--db", str(db), home=tmp_path))
    assert "nothing new to write: all 4 turns were already stored" in third


def test_import_strict_stops_before_writing_anything_from_the_malformed_line(
    tmp_path: Path,
) -> None:
    db = tmp_path / "memory.db"
    transcript = write_jsonl(
        tmp_path / "t.jsonl",
        {"conversation_id": "c", "user": "one", "assistant": "1"},
        {"conversation_id": "c", "user": "two", "assistant": "2"},
        {"conversation_id": "c", "user": "three"},
        {"conversation_id": "c", "user": "four", "assistant": "4"},
    )
    result = cli("import", str(transcript), "--strict", "--db", str(db), home=tmp_path)
    assert result.returncode == 1
    assert "line 3: missing 'assistant'" in result.stderr
    assert "stopped at line 3 (--strict)" in result.stdout
    turns = show_json(db, "c", tmp_path)["turns"]
    assert [t["messages"][0]["content"] for t in turns] == ["one", "two"]


def test_import_refused_turn_is_reported_and_the_rest_stored(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    first = write_jsonl(
        tmp_path / "a.jsonl",
        {"conversation_id": "c", "turn_id": "x", "user": "u", "assistant": "a"},
    )
    ok(cli("import", str(first), "--db", str(db), home=tmp_path))
    edited = write_jsonl(
        tmp_path / "b.jsonl",
        {"conversation_id": "c", "turn_id": "x", "user": "u", "assistant": "a, edited"},
        {"conversation_id": "c", "turn_id": "y", "user": "v", "assistant": "b"},
    )
    result = cli("import", str(edited), "--db", str(db), home=tmp_path)
    assert result.returncode == 1
    assert "line 1: not stored: turn 'x' of conversation 'c' is already stored" in result.stderr
    assert "stored 1 new turn" in result.stdout
    turns = show_json(db, "c", tmp_path)["turns"]
    assert [t["turn_id"] for t in turns] == ["x", "y"]
    assert turns[0]["messages"][1]["content"] == "a"


def test_import_reads_stdin(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    line = json.dumps({"conversation_id": "c", "user": "from a pipe", "assistant": "ok"})
    out = ok(cli("import", "-", "--db", str(db), home=tmp_path, stdin=line + "\n"))
    assert "stdin: 1 turn in 1 conversation" in out


# --- errors --------------------------------------------------------------------------------


def test_a_bad_db_path_is_a_one_line_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "memory.db"
    assert_one_line_error(cli("import", "-", "--db", str(missing), home=tmp_path), "does not exist")
    assert_one_line_error(cli("show", "demo", "--db", str(missing), home=tmp_path), "no store")
    assert_one_line_error(cli("stats", "--db", str(tmp_path), home=tmp_path), "is a directory")
    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("hello\n" * 100)
    assert_one_line_error(
        cli("stats", "--db", str(not_a_store), home=tmp_path),
        f"{not_a_store} is not a neotoma-agent store (not a SQLite database)",
    )
    assert not_a_store.read_text() == "hello\n" * 100


def test_an_unreachable_url_is_a_one_line_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = cli("stats", "--url", url, home=tmp_path)
    assert_one_line_error(result, f"cannot reach the Neotoma server at {url}", "serve")
    result = cli("show", "demo", home=tmp_path, env={"NEOTOMA_URL": url})
    assert_one_line_error(result, "cannot reach")


def test_conflicting_and_malformed_options_are_one_line_errors(tmp_path: Path) -> None:
    assert_one_line_error(
        cli("stats", "--db", "x.db", "--url", "http://127.0.0.1:9", home=tmp_path), "either"
    )
    assert_one_line_error(cli("stats", "--url", "ftp://host", home=tmp_path), "bad --url")
    assert_one_line_error(cli("import", "missing.jsonl", home=tmp_path), "not found")
    assert_one_line_error(
        cli("stats", "--url", "http://127.0.0.1:9", "--token-file", "nope", home=tmp_path),
        "no token file at nope",
    )
    assert_one_line_error(
        cli("serve", "--url", "http://127.0.0.1:9", home=tmp_path), "not a server"
    )
    # A host that does not resolve says so (not "is another server running there?"), and
    # leaves no store file behind.
    unknown = cli(
        "serve", "--host", "nosuchhost.invalid", "--token", "t", "--db", "x.db", home=tmp_path
    )
    assert_one_line_error(unknown, "no such host")
    assert "another server" not in unknown.stderr
    assert not (tmp_path / "x.db").exists()


def test_help_lists_every_command(tmp_path: Path) -> None:
    out = ok(cli("--help", home=tmp_path))
    for command in ("demo", "chat", "show", "import", "stats", "serve"):
        assert command in out
    result = cli(home=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: neotoma-agent")
    assert "export" in result.stderr
    assert "neotoma-agent demo" in result.stderr
    assert len(result.stderr.splitlines()) < 12  # a short usage, not the whole --help


def test_a_command_lists_only_the_global_options_that_mean_something_to_it(
    tmp_path: Path,
) -> None:
    serve = ok(cli("serve", "--help", home=tmp_path))
    assert "--url URL" not in serve  # it serves a store file; --url is refused with a reason
    assert "the bearer token clients must send" in serve
    show = ok(cli("show", "--help", home=tmp_path))
    assert "--url URL" in show
    assert "bearer token for --url" in show
    assert "clients must send" not in show


def test_the_default_store_lives_in_the_per_user_data_directory(tmp_path: Path) -> None:
    line = json.dumps({"conversation_id": "c", "user": "u", "assistant": "a"})
    ok(cli("import", "-", home=tmp_path, stdin=line + "\n"))
    (default,) = tmp_path.rglob("memory.db")  # under $XDG_DATA_HOME, or the macOS equivalent
    assert default.parent.name == "neotoma-agent"
    assert "1 turn" in ok(cli("show", "c", home=tmp_path))
    elsewhere = tmp_path / "env.db"
    ok(
        cli(
            "import",
            "-",
            home=tmp_path,
            stdin=line + "\n",
            env={"NEOTOMA_AGENT_DB": str(elsewhere)},
        )
    )
    assert elsewhere.is_file()


# --- over HTTP -----------------------------------------------------------------------------


def test_every_command_runs_against_a_server_with_url(tmp_path: Path) -> None:
    served = tmp_path / "served.db"
    transcript = write_jsonl(
        tmp_path / "t.jsonl",
        {"conversation_id": "web", "user": "Tell me about Acme Corp", "assistant": "A company."},
        {"conversation_id": "web", "user": "And its CEO?", "assistant": "Unknown."},
    )
    token = "s3cret-token-for-tests"
    with serving(served, tmp_path, token=token) as url:
        auth = ["--url", url, "--token", token]
        assert "stored 2 new turns" in ok(cli("import", str(transcript), *auth, home=tmp_path))
        again = ok(
            cli(
                "import",
                str(transcript),
                home=tmp_path,
                env={"NEOTOMA_URL": url, "NEOTOMA_TOKEN": token},
            )
        )
        assert "nothing new to write" in again
        chat = ok(
            cli("chat", "--conversation", "web", *auth, home=tmp_path, stdin="more on Acme\n")
        )
        assert "[stored turn" in chat
        over_http = json.loads(ok(cli("show", "web", "--json", *auth, home=tmp_path)))
        stats = json.loads(ok(cli("stats", "--json", *auth, home=tmp_path)))

        # Another account (another data directory) has no token file to find it in.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        refused = cli("stats", "--url", url, home=elsewhere)
        assert_one_line_error(refused, "refused the credentials", "--token-file")
        wrong = cli("stats", "--url", url, "--token", "not-the-token", home=tmp_path)
        assert_one_line_error(wrong, "refused the credentials")
        assert "not-the-token" not in wrong.stderr + wrong.stdout

    # The server wrote to its file: the same transcript, read without a server.
    assert show_json(served, "web", tmp_path) == over_http
    assert [len(t["messages"]) for t in over_http["turns"]] == [2, 2, 2]
    assert stats["turns"] == 3
    assert token not in json.dumps(stats)


# --- turns a crash left open, and the audit's repair -------------------------------------


def test_show_and_stats_mark_open_and_repaired_turns(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"

    async def crash_between_the_two_stores() -> None:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id="crash")
            await memory.record_turn("before the crash", "fine", turn_id="a")
            await memory.open_turn("Tell me about Acme Corp", turn_id="b")  # never closed

    anyio.run(crash_between_the_two_stores)
    out = ok(cli("show", "crash", "--db", str(db), home=tmp_path))
    assert "turn 2 [b] OPEN (in flight, or left open by a crash" in out
    assert "  user: Tell me about Acme Corp\n  assistant: (no reply stored)\n" in out
    stats = json.loads(ok(cli("stats", "--json", "--db", str(db), home=tmp_path)))
    assert stats["turns_by_status"] == {"completed": 1, "open": 1}

    if importlib.util.find_spec("neotoma_agent.cli._audit") is None:
        pytest.skip("the audit command is not available")
    cli("audit", "--repair", "--min-age", "0", "--db", str(db), home=tmp_path)
    out = ok(cli("show", "crash", "--db", str(db), home=tmp_path))
    assert "turn 2 [b] ABANDONED (repaired by audit: the reply was never stored)" in out
    turns = show_json(db, "crash", tmp_path)["turns"]
    assert [(t["status"], t["repaired"]) for t in turns] == [
        ("completed", False),
        ("abandoned", True),
    ]
    stats = json.loads(ok(cli("stats", "--json", "--db", str(db), home=tmp_path)))
    assert (stats["abandoned_turns"], stats["repaired_turns"], stats["open_turns"]) == (1, 1, 0)


# --- pieces, in process --------------------------------------------------------------------


def _parse(line: str, line_number: int = 1) -> ImportLine | None:
    return parse_line(line.encode(), line_number, ImportStats())


def test_a_line_without_turn_id_is_numbered_by_its_line_in_the_file() -> None:
    lines = [
        _parse('{"conversation_id": "a", "user": "1", "assistant": "1"}', 1),
        _parse('{"conversation_id": "b", "user": "1", "assistant": "1"}', 2),
        _parse('{"conversation_id": "a", "user": "2", "assistant": "2", "turn_id": "x"}', 3),
        _parse('{"conversation_id": "a", "user": "3", "assistant": "3", "turn_number": 7}', 5),
    ]
    assert [(x.turn_id, x.turn_number) for x in lines if x is not None] == [
        ("import-1", 1),
        ("import-2", 2),
        ("x", 3),
        ("import-5", 7),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "expected a JSON object, got an array"),
        ('{"user": "u", "assistant": "a"}', "missing 'conversation_id'"),
        ('{"conversation_id": " c", "user": "u", "assistant": "a"}', "whitespace"),
        ('{"conversation_id": "c", "assistant": "a"}', "missing 'user'"),
        ('{"conversation_id": "c", "user": "u", "assistant": null}', "missing 'assistant'"),
        ('{"conversation_id": "c", "user": "u", "assistant": "a", "turn_id": "a:b"}', "':'"),
        ('{"conversation_id": "c", "user": "u", "assistant": "a", "turn_number": -1}', ">= 0"),
        ('{"conversation_id": "c", "user": "u", "assistant": "a", "refers_to": "x"}', "array"),
        ('{"conversation_id": "c", "user": "u\\udfff", "assistant": "a"}', "'user' is not st"),
        ('{"conversation_id": "c", "user": "u", "assistant": "\\ud83d"}', "lone UTF-16"),
    ],
)
def test_a_malformed_line_says_what_is_wrong(line: str, message: str) -> None:
    with pytest.raises(LineError, match=re.escape(message)):
        _parse(line)


def test_blank_lines_and_a_bom_are_not_turns() -> None:
    assert _parse("   ") is None
    parsed = parse_line(
        '\ufeff{"conversation_id": "c", "user": "u", "assistant": "a"}'.encode(), 1, ImportStats()
    )
    assert parsed is not None
    with pytest.raises(LineError, match="not UTF-8"):
        parse_line(b'{"conversation_id": "\xff"}', 2, ImportStats())


def test_printable_escapes_controls_and_bidi_overrides_and_keeps_the_rest() -> None:
    assert printable("plain text, émoji 🧠") == "plain text, émoji 🧠"
    assert printable("a\nb\tc") == "a\nb\tc"
    assert printable("\x00\x07\x08\r\x1b[2J\x7f\x85\x9b\x9f\xa0") == (
        "\\x00\\x07\\x08\\x0d\\x1b[2J\\x7f\\x85\\x9b\\x9f\xa0"
    )
    assert printable("\u202a\u202e\u2066\u2069\u2029") == "\\u202a\\u202e\\u2066\\u2069\u2029"
    assert UNSAFE.search(printable("".join(map(chr, range(0x3000))))) is None


def test_the_turn_report_prints_no_control_sequences() -> None:
    report = TurnReportInput(
        conversation=ReportEntity("conversation", "chat \x1b]0;PWNED\x07"),
        retrieved=[ReportEntity("company", "Acme\u202e Corp", "ent_af939bedafbd1838b259772a")],
        repairs=[ReportRepair("closed \x9b2J")],
    )
    text = render_turn_report(report)
    assert UNSAFE.search(text) is None, text
    assert "chat \\x1b\\]0;PWNED\\x07" in text  # "]" is escaped for markdown
    assert "Acme\\u202e Corp" in text


class Clock:
    """A monotonic clock that moves only when told: a progress line's rate and ETA are
    then the same on a loaded machine as on an idle one."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_shows_rate_and_eta_on_a_terminal_and_plain_lines_elsewhere() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    clock = Clock()
    tty = Tty()
    progress = Progress(1000, label="importing", unit="lines", stream=tty, interval=0, clock=clock)
    clock.now += 2.0  # two seconds in
    progress.update(250)
    drawn = tty.getvalue()
    assert drawn.startswith("\r\x1b[2Kimporting ")
    assert "250/1,000 lines  25%  125/s  ETA 0:06" in drawn
    progress.finish(250)
    assert tty.getvalue().endswith("\r\x1b[2K")

    log = io.StringIO()
    progress = Progress(1000, label="importing", unit="lines", stream=log, interval=0)
    progress.update(10)
    assert log.getvalue().startswith("importing  10/1,000 lines  1%")
    assert log.getvalue().endswith("\n")
    assert "\r" not in log.getvalue()


@pytest.mark.parametrize("columns", [20, 35, 50, 80, 200])
def test_a_progress_line_fits_the_terminal_width(columns: int) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    clock = Clock()
    progress = Progress(
        100_000, label="importing", unit="lines", stream=Tty(), interval=0, clock=clock
    )
    clock.now += 3.0
    for done in (0, 1, 4_321, 99_999):
        line = progress.line(done, columns=columns)
        # One column short of the edge: a line that fills it would wrap on some terminals.
        assert len(line) <= columns - 1, line
        assert line.startswith("importing"[: columns - 1])
    wide = progress.line(4_321, columns=200)
    assert "ETA" in wide
    assert "█" in wide or "#" in wide


def test_serve_refuses_a_port_out_of_range_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    result = cli("serve", "--port", "99999", "--db", str(db), home=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "--port 99999 is out of range" in result.stderr
    assert not db.exists()


def test_serve_on_a_port_in_use_fails_before_creating_the_store(tmp_path: Path) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        db = tmp_path / "new.db"
        result = cli("serve", "--port", str(port), "--db", str(db), home=tmp_path)
    finally:
        taken.close()
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "hint: is another server running there?" in result.stderr
    assert not db.exists()


def test_both_store_variables_set_is_refused_not_guessed(tmp_path: Path) -> None:
    env = {"NEOTOMA_AGENT_DB": str(tmp_path / "x.db"), "NEOTOMA_URL": "http://127.0.0.1:9"}
    result = cli("stats", home=tmp_path, env=env)
    assert result.returncode != 0
    assert "both NEOTOMA_AGENT_DB and NEOTOMA_URL are set" in result.stderr
    # An explicit option settles it.
    chosen = cli("stats", "--db", str(tmp_path / "x.db"), home=tmp_path, env=env)
    assert "both NEOTOMA_AGENT_DB" not in chosen.stderr


def _turns_written(db: Path) -> int:
    """Turn records committed to ``db`` so far (0 while it does not exist or is locked)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            query = "SELECT count(*) FROM entities WHERE entity_type = 'conversation_turn'"
            return int(conn.execute(query).fetchone()[0])
    except sqlite3.Error:
        return 0


#: what the import says when a Ctrl-C comes while the writes in flight finish
FINISHING = "finishing the writes in flight"


def _interrupt_import(folder: Path, presses: int) -> tuple[int, str, str, Path]:
    """Run a big import in ``folder``, press Ctrl-C ``presses`` times once turns are being
    written; its exit status, stdout, stderr and store file."""
    folder.mkdir()
    source = write_jsonl(
        folder / "big.jsonl",
        *(
            # a new conversation every 100 turns: the conversations read run ahead of
            # the ones stored when the Ctrl-C comes
            {"conversation_id": f"c{i // 100}", "user": f"question {i}", "assistant": f"answer {i}"}
            for i in range(20_000)
        ),
    )
    db = folder / "memory.db"
    errors = folder / "stderr.txt"
    with errors.open("w") as err_file:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "neotoma_agent.cli",
                "import",
                str(source),
                "--db",
                str(db),
                "--no-retrieve",
            ],
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            env=clean_env(folder),
            cwd=folder,
            preexec_fn=default_sigint,
        )
    # Interrupt once turns are being written (not during start-up, which a loaded machine
    # can stretch past any fixed delay).
    deadline = time.monotonic() + 60
    while _turns_written(db) == 0 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # Hold the store's write lock while pressing: the batches in flight wait for it (well
    # within the store's 10 s busy timeout), so the import cannot finish them, print its
    # summary and give Ctrl-C back to Python before the last press has arrived (a press
    # after that ends the process by the signal, as it should).
    with contextlib.closing(sqlite3.connect(db, timeout=60, isolation_level=None)) as lock:
        lock.execute("BEGIN IMMEDIATE")
        child.send_signal(signal.SIGINT)
        if presses == 2:
            # Two signals sent while the child waits for a core arrive as one (the kernel
            # keeps one pending SIGINT): press again until the import says it saw the second.
            while FINISHING not in errors.read_text() and child.poll() is None:
                child.send_signal(signal.SIGINT)
                time.sleep(0.05)
        lock.execute("ROLLBACK")
    out, _ = child.communicate(timeout=120)
    return child.returncode, out, errors.read_text(), db


@pytest.mark.parametrize("presses", [1, 2])
# Two batches of 256 turns finish after the Ctrl-C: about 11 s on a lightly loaded machine,
# close to the default 15 s, and the load average lags a burst of load (not what this checks).
@pytest.mark.budget(60)
def test_an_interrupted_import_reports_exactly_what_is_stored(tmp_path: Path, presses: int) -> None:
    """Ctrl-C (SIGINT) mid-import: writes in flight finish, and the summary counts them;
    a second Ctrl-C while they finish does not lose the summary."""
    for attempt in range(3):
        returncode, out, err, db = _interrupt_import(tmp_path / f"run{attempt}", presses)
        # A first press that came between two batches finds no write in flight: the import
        # ends at once, and the next press meets Python's own handler (the process ends by
        # the signal, its summary printed). That run cannot show a press while writes
        # finish: run it again.
        if not (presses == 2 and returncode == -signal.SIGINT and FINISHING not in err):
            break
    assert returncode == 130, (out, err)
    assert "interrupted" in out, (out, err)
    assert (FINISHING in err) == (presses == 2), err
    reported = int(re.search(r"stored ([\d,]+) new turn", out).group(1).replace(",", ""))  # type: ignore[union-attr]
    head = re.search(r"([\d,]+) turns? in ([\d,]+) conversation", out)
    assert head is not None, out
    turns, conversations = (int(g.replace(",", "")) for g in head.groups())

    async def stored() -> tuple[int, int]:
        async with EmbeddedStore.open(db) as store:
            counts = [
                (await store.query_entities(entity_type=kind, limit=1)).total
                for kind in ("conversation_turn", "conversation")
            ]
        return counts[0], counts[1]

    assert 0 < reported < 20_000
    # the head line says what is stored, as `stats` does, not how many lines were read
    assert anyio.run(stored) == (reported, conversations)
    assert turns == reported


def test_a_url_that_is_not_a_neotoma_server_is_refused(tmp_path: Path) -> None:
    """An unrelated HTTP server at --url: a clear error and a non-zero status, not a no-op."""
    import http.server
    import threading

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>hello</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{other.server_address[1]}"
        result = cli("chat", "--url", url, home=tmp_path, stdin="hello\n")
        stats = cli("stats", "--url", url, home=tmp_path)
    finally:
        other.shutdown()
        other.server_close()
    assert result.returncode != 0
    assert f"{url} is not a Neotoma server" in result.stderr
    assert "Traceback" not in result.stderr
    assert stats.returncode != 0
    assert "is not a Neotoma server" in stats.stderr


# --- the real entry points ---------------------------------------------------------------


def test_the_console_script_and_python_dash_m_cli_run_the_same_command(tmp_path: Path) -> None:
    """What pip installs (`neotoma-agent`) and `python -m neotoma_agent.cli`, as processes."""
    from neotoma_agent import __version__

    script = Path(sys.executable).with_name("neotoma-agent")
    if not script.is_file():
        pytest.skip("the neotoma-agent console script is not installed beside this Python")
    for argv in ([str(script)], [sys.executable, "-m", "neotoma_agent.cli"]):
        version = subprocess.run(
            [*argv, "--version"], capture_output=True, text=True, env=clean_env(tmp_path),
            cwd=tmp_path, timeout=60, check=False,
        )  # fmt: skip
        assert (version.returncode, version.stdout) == (0, f"neotoma-agent {__version__}\n")
    missing = subprocess.run(
        [str(script), "show", "nope", "--db", str(tmp_path / "none.db")], capture_output=True,
        text=True, env=clean_env(tmp_path), cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert_one_line_error(missing, "none.db")
