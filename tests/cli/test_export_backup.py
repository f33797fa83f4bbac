"""``export`` is a backup: ``import`` into an empty store gives the same store back.

Everything a reader sees survives the round trip: abandoned and open turns, tool calls
with their arguments, results and errors, an abandoned turn's error class, remembered and
produced entities, conversation titles and platforms, a forgotten and restored
conversation, turns ordered by nothing but their write order. Export, import into an empty
store and export again give identical bytes; ``show --json`` and ``stats --json`` read the
same from both stores; a forgotten conversation stays forgotten. A property test does the
same over random stores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_support import cli, ok, serving
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_support import json_values
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, NeotomaMemory, ToolCall
from neotoma_agent.cli._backup import BackupStats, read_backup, restore_backup
from neotoma_agent.cli._show import load_transcript
from neotoma_agent.reads import collect_stats, list_conversations

pytestmark = pytest.mark.one_backend


class ToolFailed(Exception):
    pass


async def _abandoned(memory: NeotomaMemory, user: str, reply: str, **turn: Any) -> None:
    """A turn whose body raises (``RuntimeError``) after its reply began."""
    async with memory.turn(user, **turn) as t:
        t.reply = reply
        raise RuntimeError("cut")


async def _seed(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        zeta = NeotomaMemory(
            store, conversation_id="zeta", conversation_title="Orders", platform="web"
        )
        acme = await zeta.remember("company", name="Acme Corp")
        async with zeta.turn("Where is my Acme Corp order?", turn_number=1) as t:
            async with t.tool("track", {"order": 7}) as call:
                call.result = {"state": "shipped", "eta": ["mon", 1.5, None]}
            with pytest.raises(ToolFailed):
                async with t.tool("refund", {"order": 7}):
                    raise ToolFailed
            t.cite(acme)
            t.remember("task", title="Call Acme Corp", status="open")
            t.reply = "It shipped on Monday.\nTracking: ÿ 🚚"
        with pytest.raises(RuntimeError):
            await _abandoned(zeta, "and the invoice?", "Looking", turn_number=2)
        await zeta.open_turn("still open?")

        # No turn numbers and ids that are not time-ordered: only write order orders them.
        beta = NeotomaMemory(store, conversation_id="beta")
        for turn_id in ("z-first", "a-second", "m-third"):
            async with beta.turn(f"question {turn_id}", turn_id=turn_id) as t:
                t.reply = f"answer {turn_id}"

        back = NeotomaMemory(store, conversation_id="back")
        async with back.turn("remember me", turn_id="t1") as t:
            t.reply = "I will"
        await back.restore(await back.forget())
        # The same messages again after both (a revision that changed nothing): each entity's
        # last observation repeats its first, with the deletion's two between them.
        async with back.turn("remember me", turn_id="t1", revision=2) as t:
            t.reply = "I will"
        gone = NeotomaMemory(store, conversation_id="gone")
        async with gone.turn("forget me") as t:
            t.reply = "Forgotten"
        await gone.forget()


def _stats(db: Path, home: Path) -> dict[str, Any]:
    stats = json.loads(ok(cli("--db", str(db), "stats", "--json", home=home)))
    del stats["store"]
    return dict(stats)


def test_export_import_export_gives_the_same_store_back(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    first = cli("--db", str(db), "export", home=tmp_path)
    backup = tmp_path / "backup.jsonl"
    backup.write_text(ok(first), encoding="utf-8")
    assert "Forgotten" not in first.stdout  # a forgotten conversation stays forgotten
    assert "left out" not in first.stderr

    fresh = tmp_path / "b.db"
    restored = ok(cli("--db", str(fresh), "import", str(backup), home=tmp_path))
    assert "restored" in restored
    second = cli("--db", str(fresh), "export", home=tmp_path)
    assert ok(second) == first.stdout
    assert _stats(fresh, tmp_path) == _stats(db, tmp_path)
    for conversation in ("zeta", "beta", "back"):
        shown = [
            ok(cli("--db", str(path), "show", conversation, "--json", home=tmp_path))
            for path in (db, fresh)
        ]
        assert shown[0] == shown[1], conversation
    zeta = json.loads(shown_of(fresh, "zeta", tmp_path))
    assert [t["status"] for t in zeta["turns"]] == ["completed", "abandoned", "open"]
    assert (zeta["title"], zeta["platform"]) == ("Orders", "web")
    assert zeta["turns"][1]["error_class"] == "RuntimeError"
    tools = {c["name"]: c for c in zeta["turns"][0]["tools"]}
    assert tools["track"]["result"] == {"state": "shipped", "eta": ["mon", 1.5, None]}
    assert tools["refund"]["status"] == "error"
    beta = json.loads(shown_of(fresh, "beta", tmp_path))
    assert [t["turn_id"] for t in beta["turns"]] == ["z-first", "a-second", "m-third"]
    assert cli("--db", str(fresh), "show", "gone", home=tmp_path).returncode == 1

    # Restoring the same backup again writes nothing new.
    again = ok(cli("--db", str(fresh), "import", str(backup), home=tmp_path))
    assert "already stored" in again
    assert ok(cli("--db", str(fresh), "export", home=tmp_path)) == first.stdout


def shown_of(db: Path, conversation: str, home: Path) -> str:
    return ok(cli("--db", str(db), "show", conversation, "--json", home=home))


def test_a_backup_goes_through_a_server_both_ways(tmp_path: Path) -> None:
    """Over the dev server (``--url``): the backup reads and restores through the REST API
    alone, so a Neotoma server can be backed up and restored the same way."""
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    local = ok(cli("--db", str(db), "export", home=tmp_path))
    with serving(db, tmp_path) as url:
        remote = ok(cli("--url", url, "export", home=tmp_path))
    assert remote == local
    backup = tmp_path / "backup.jsonl"
    backup.write_text(remote, encoding="utf-8")
    fresh = tmp_path / "b.db"
    with serving(fresh, tmp_path) as url:
        ok(cli("--url", url, "import", str(backup), home=tmp_path))
    assert ok(cli("--db", str(fresh), "export", home=tmp_path)) == local
    assert shown_of(fresh, "zeta", tmp_path) == shown_of(db, "zeta", tmp_path)


def test_a_backup_of_named_conversations_holds_them_and_what_they_refer_to(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    backup = tmp_path / "zeta.jsonl"
    backup.write_text(ok(cli("--db", str(db), "export", "zeta", home=tmp_path)))
    fresh = tmp_path / "b.db"
    ok(cli("--db", str(fresh), "import", str(backup), home=tmp_path))
    assert shown_of(fresh, "zeta", tmp_path) == shown_of(db, "zeta", tmp_path)
    assert cli("--db", str(fresh), "show", "beta", home=tmp_path).returncode == 1
    counted = _stats(fresh, tmp_path)["entities_by_type"]
    assert counted["company"] == 1
    assert counted["task"] == 1


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_a_store_written_by_an_earlier_release_round_trips(tmp_path: Path, version: int) -> None:
    db = tmp_path / "old.db"
    shutil.copy(TESTS / "data" / f"v{version}_store" / "store.db", db)
    anyio.run(_upgrade, db)
    backup = tmp_path / "backup.jsonl"
    backup.write_text(ok(cli("--db", str(db), "export", home=tmp_path)), encoding="utf-8")
    fresh = tmp_path / "new.db"
    ok(cli("--db", str(fresh), "import", str(backup), home=tmp_path))
    assert ok(cli("--db", str(fresh), "export", home=tmp_path)) == backup.read_text("utf-8")
    assert _stats(fresh, tmp_path) == _stats(db, tmp_path)


async def _upgrade(db: Path) -> None:
    async with EmbeddedStore.open(db):  # export reads only: the file is upgraded first
        pass


def test_a_line_that_is_not_a_backups_stops_the_restore_with_its_number(tmp_path: Path) -> None:
    backup = tmp_path / "bad.jsonl"
    backup.write_text('{"format":"neotoma-agent-backup","version":1}\n\n{"entity_id": 3}\n')
    result = cli("--db", str(tmp_path / "b.db"), "import", str(backup), home=tmp_path)
    assert result.returncode == 1
    assert "line 3: not an entity line of a backup" in result.stderr
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"format":"neotoma-agent-backup","version":1}\n' + "[" * 100_000 + "\n")
    result = cli("--db", str(tmp_path / "b.db"), "import", str(deep), home=tmp_path)
    assert result.returncode == 1
    assert "line 2 is not JSON a backup holds" in result.stderr
    assert "Traceback" not in result.stderr


# --- random stores ---------------------------------------------------------------------------

_IDS = st.text("abcxyz-_.", min_size=1, max_size=3)
_TURN = st.fixed_dictionaries(
    {
        "user": st.text(max_size=30),
        "reply": st.text(max_size=30),
        "ending": st.sampled_from(["completed", "abandoned", "open"]),
        "turn_id": st.none() | _IDS,
        "tools": st.lists(
            st.tuples(st.sampled_from(["search", "track"]), json_values(max_leaves=4)),
            max_size=2,
        ),
    }
)
_STORES = st.fixed_dictionaries(
    {
        "conversations": st.dictionaries(_IDS, st.lists(_TURN, min_size=1, max_size=3), max_size=3),
        # a name an identity can be derived from (a bare "TRUE" or "" cannot)
        "entities": st.lists(st.text(max_size=12).map(lambda t: f"Org {t}"), max_size=3),
        "title": st.none() | st.text(min_size=1, max_size=12),
        # then forget and restore a conversation, and store its first turn again unchanged
        "again": st.booleans(),
    }
)


async def _build(db: Path, spec: dict[str, Any]) -> None:
    async with EmbeddedStore.open(db) as store:
        for name in spec["entities"]:
            await NeotomaMemory(store, conversation_id="seed").remember("company", name=name)
        for cid, turns in spec["conversations"].items():
            memory = NeotomaMemory(store, conversation_id=cid, conversation_title=spec["title"])
            used: set[str] = set()
            for turn in turns:
                turn_id = turn["turn_id"] if turn["turn_id"] not in used else None
                used.add(turn_id or "")
                if turn["ending"] == "open":
                    await memory.open_turn(turn["user"], turn_id=turn_id)
                    continue
                tools = [ToolCall.create(name, args=args) for name, args in turn["tools"]]
                if turn["ending"] == "completed":
                    await memory.record_turn(
                        turn["user"], turn["reply"], turn_id=turn_id, tools=tools
                    )
                    continue
                with pytest.raises(RuntimeError):
                    await _abandoned(memory, turn["user"], turn["reply"], turn_id=turn_id)
        if spec["again"] and spec["conversations"]:
            memory = NeotomaMemory(store, conversation_id=next(iter(spec["conversations"])))
            await memory.restore(await memory.forget())
            done = [t for t in await memory.history(None) if t.status == "completed"]
            if done:
                first = done[0]
                assert first.reply is not None
                await memory.record_turn(first.user, first.reply, turn_id=first.turn_id, revision=2)


async def _round_trip(source: Path, target: Path) -> tuple[list[str], list[str]]:
    """The backup of ``source`` and of ``target`` once restored from it."""
    lines: list[list[str]] = []
    for db in (source, target):
        async with EmbeddedStore.open(db) as store:
            if lines:
                decoded = ((n, json.loads(x)) for n, x in enumerate(lines[0], 1))
                await restore_backup(store, decoded, BackupStats())
            listing = await list_conversations(store)
            cids = sorted(c.conversation_id for c in listing.conversations)
            read = read_backup(store, cids, everything=True, stats=BackupStats())
            lines.append([line async for line in read])
    return lines[0], lines[1]


async def _reads(db: Path) -> tuple[Any, dict[str, Any]]:
    async with EmbeddedStore.open(db) as store:
        listing = await list_conversations(store)
        shown = {
            c.conversation_id: (await load_transcript(store, c.conversation_id)).to_json()
            for c in listing.conversations
        }
        return (await collect_stats(store)).to_json(), shown


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=_STORES)
def test_any_store_survives_export_and_import(
    tmp_path_factory: pytest.TempPathFactory, spec: dict[str, Any]
) -> None:
    folder = tmp_path_factory.mktemp("backup")
    source, target = folder / "a.db", folder / "b.db"
    anyio.run(_build, source, spec)
    first, second = anyio.run(_round_trip, source, target)
    assert second == first
    assert anyio.run(_reads, target) == anyio.run(_reads, source)
