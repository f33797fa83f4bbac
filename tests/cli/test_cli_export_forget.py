"""``neotoma-agent export`` and ``forget``, run as a user runs them (through ``cli_support``).

What matters: ``export --turns`` writes exactly the lines a transcript ``import`` reads, so
export, import into a fresh store and export again give identical bytes; what that form
cannot carry (abandoned and open turns, tool calls) is counted on stderr, never silently
lost, and ``--json`` has it (the complete backup, ``export``'s default, is tested in
``test_export_backup.py``); ``forget`` hides a conversation from ``show`` and ``export``,
``--restore`` undoes it, and ``--purge`` erases its text from the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from cli_support import cli, ok

from neotoma_agent import EmbeddedStore, NeotomaMemory


async def _seed(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        a = NeotomaMemory(store, conversation_id="zeta")
        acme = await a.remember("company", name="Acme Corp")
        async with a.turn("Where is my Acme Corp order?", turn_number=1) as t:
            async with t.tool("track", {"order": 7}) as call:
                call.result = {"state": "shipped"}
            t.cite(acme)
            t.reply = "It shipped on Monday.\nTracking: ÿ 🚚"

        async def failing() -> None:
            async with a.turn("and the invoice?", turn_number=2) as t:
                t.reply = "Looking"
                raise RuntimeError("cut")

        with pytest.raises(RuntimeError):
            await failing()
        b = NeotomaMemory(store, conversation_id="alpha")
        async with b.turn("hi") as t:
            t.reply = ""


def test_the_chat_log_export_round_trips_its_finished_turns(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    anyio.run(_seed, db)

    first = cli("--db", str(db), "export", "--turns", home=tmp_path)
    lines = [json.loads(x) for x in ok(first).splitlines()]
    # conversations in id order, every key import reads, the abandoned turn left out
    assert [(x["conversation_id"], x["turn_number"]) for x in lines] == [("alpha", 1), ("zeta", 1)]
    assert list(lines[1]) == [
        "conversation_id",
        "turn_id",
        "turn_number",
        "user",
        "assistant",
        "refers_to",
    ]
    assert lines[1]["assistant"] == "It shipped on Monday.\nTracking: ÿ 🚚"
    assert len(lines[1]["refers_to"]) == 1
    assert "1 abandoned turn" in first.stderr
    assert "1 tool call" in first.stderr

    exported = tmp_path / "out.jsonl"
    exported.write_text(first.stdout, encoding="utf-8")
    fresh = tmp_path / "b.db"
    # the fresh store holds the entity the reply refers to, as a full copy would
    anyio.run(_remember_acme, fresh)
    ok(cli("--db", str(fresh), "import", str(exported), home=tmp_path))
    second = cli("--db", str(fresh), "export", "--turns", home=tmp_path)
    assert ok(second) == first.stdout
    assert "left out" not in second.stderr


async def _remember_acme(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        await NeotomaMemory(store, conversation_id="seed").remember("company", name="Acme Corp")


def test_export_json_has_statuses_entity_ids_and_tool_calls_and_unknown_ids_fail(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    out = ok(cli("--db", str(db), "export", "zeta", "--json", home=tmp_path))
    [record] = [json.loads(x) for x in out.splitlines()]
    assert [t["status"] for t in record["turns"]] == ["completed", "abandoned"]
    assert record["turns"][0]["tools"][0]["name"] == "track"
    assert all(m["entity_id"].startswith("ent_") for m in record["turns"][0]["messages"])
    result = cli("--db", str(db), "export", "nope", home=tmp_path)
    assert result.returncode == 1
    assert "no conversation 'nope'" in result.stderr


def test_forget_restore_and_purge(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    record = tmp_path / "forgot.json"
    ok(cli("--db", str(db), "forget", "zeta", "--save", str(record), home=tmp_path))
    assert "zeta" not in ok(cli("--db", str(db), "export", home=tmp_path))
    gone = cli("--db", str(db), "show", "zeta", home=tmp_path)
    assert gone.returncode == 1

    ok(cli("--db", str(db), "forget", "--restore", str(record), home=tmp_path))
    assert "Monday" in ok(cli("--db", str(db), "show", "zeta", home=tmp_path))

    assert b"Monday" in db.read_bytes()
    ok(cli("--db", str(db), "forget", "zeta", "--purge", home=tmp_path))
    assert all(b"Monday" not in p.read_bytes() for p in tmp_path.glob("a.db*"))
    assert "hi" in ok(cli("--db", str(db), "show", "alpha", home=tmp_path))
    again = cli("--db", str(db), "forget", "zeta", home=tmp_path)
    assert again.returncode == 1
    assert "no conversation" in again.stderr


def test_forget_to_an_unwritable_save_path_forgets_nothing(tmp_path: Path) -> None:
    """The undo record is written before anything is deleted: no record, no forget."""
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    before = ok(cli("--db", str(db), "show", "zeta", home=tmp_path))
    missing = tmp_path / "no-such-dir" / "forgot.json"
    result = cli("--db", str(db), "forget", "zeta", "--save", str(missing), home=tmp_path)
    assert result.returncode == 1
    assert ok(cli("--db", str(db), "show", "zeta", home=tmp_path)) == before
    assert result.stderr.count("\n") <= 2, result.stderr
    assert "nothing was forgotten" in result.stderr
    # the kept record is written first too: an unwritable data directory stops the forget
    (tmp_path / "data" / "neotoma-agent").mkdir(parents=True)
    (tmp_path / "data" / "neotoma-agent" / "forgotten").write_text("not a directory")
    result = cli("--db", str(db), "forget", "zeta", home=tmp_path)
    assert result.returncode == 1
    assert "nothing was forgotten" in result.stderr
    assert ok(cli("--db", str(db), "show", "zeta", home=tmp_path)) == before


def test_a_plain_forget_is_undone_by_naming_the_conversation(tmp_path: Path) -> None:
    """`forget CONV` keeps its record (0600) itself; `forget --restore CONV` brings the
    conversation back, whole, with no file to pass, on the store it was forgotten in."""
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    before = ok(cli("--db", str(db), "show", "zeta", "--json", home=tmp_path))
    said = ok(cli("--db", str(db), "forget", "zeta", home=tmp_path))
    assert "forget --restore zeta" in said
    [kept] = (tmp_path / "data" / "neotoma-agent" / "forgotten").iterdir()
    assert kept.stat().st_mode & 0o777 == 0o600
    assert b"Monday" not in kept.read_bytes()  # ids only, never the text
    assert cli("--db", str(db), "show", "zeta", home=tmp_path).returncode == 1

    # the same conversation id in another store has no record there
    other = tmp_path / "b.db"
    anyio.run(_seed, other)
    elsewhere = cli("--db", str(other), "forget", "--restore", "zeta", home=tmp_path)
    assert elsewhere.returncode == 1
    assert "no record of a forgotten conversation 'zeta'" in elsewhere.stderr

    ok(cli("--db", str(db), "forget", "--restore", "zeta", home=tmp_path))
    assert ok(cli("--db", str(db), "show", "zeta", "--json", home=tmp_path)) == before
    assert not kept.exists()  # used up: the next forget keeps a new one

    ok(cli("--db", str(db), "forget", "zeta", "--save", str(tmp_path / "r.json"), home=tmp_path))
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o600
    ok(cli("--db", str(db), "forget", "zeta", "--restore", home=tmp_path))
    assert ok(cli("--db", str(db), "show", "zeta", "--json", home=tmp_path)) == before
