"""``neotoma-agent forget --entity ID`` (``--restore``, ``--purge``), run as a user runs it.

What matters: one clear line said; the entity leaves ``show`` and comes back on
``--restore``; ``--purge`` leaves none of its fields' text in the store file or its WAL
while everything else reads byte for byte as before; a bad id is refused before the store
is touched.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from cli_support import cli, ok

from neotoma_agent import EmbeddedStore, NeotomaMemory

MARKER = b"Qv9-PLANTED-4471"


async def _seed(db: Path) -> str:
    async with EmbeddedStore.open(db) as store:
        clinic = NeotomaMemory(store, conversation_id="clinic")
        # the marker in an observation the snapshot no longer shows, and in one it does
        await clinic.remember("person", name="Maria Gomez", notes=f"{MARKER.decode()} earlier")
        maria = await clinic.remember(
            "person", name="Maria Gomez", notes=f"{MARKER.decode()} treats her diabetes"
        )
        await clinic.remember("company", name="Acme Corp")
        async with clinic.turn(
            "Do you know Maria Gomez? She works at Acme Corp.", turn_number=1
        ) as t:
            t.reply = "Yes, the doctor."
        assert maria in [e.id for e in t.linked]
        other = NeotomaMemory(store, conversation_id="other")
        async with other.turn("Where is my Acme Corp order?", turn_number=1) as t:
            t.reply = "It shipped."
    return maria


def _files_hold(db: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in db.parent.glob(db.name + "*"))


def _refers(db: Path, home: Path) -> list[str]:
    doc = json.loads(ok(cli("--db", str(db), "show", "clinic", "--json", home=home)))
    return sorted(
        {r["entity_id"] for turn in doc["turns"] for m in turn["messages"] for r in m["refers_to"]}
    )


def _rest(db: Path, home: Path) -> list[str]:
    """What must not change: the other conversation, and the other entity as stored."""
    return [
        ok(cli("--db", str(db), "show", "other", "--json", home=home)),
        anyio.run(_acme, db),
    ]


async def _acme(db: Path) -> str:
    async with EmbeddedStore.open(db, read_only=True) as store:
        [acme] = (await store.query_entities(entity_type="company")).entities
        snapshot = await store.get_entity_snapshot(acme.entity_id)
        observations = await store.list_observations(acme.entity_id)
        return json.dumps([snapshot.raw, observations.raw], sort_keys=True)


def test_forget_an_entity_then_restore_then_purge(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    maria = anyio.run(_seed, db)
    assert maria in _refers(db, tmp_path)
    rest = _rest(db, tmp_path)

    out = ok(cli("--db", str(db), "forget", "--entity", maria, home=tmp_path))
    assert out.count("\n") == 1
    assert f"deleted entity {maria}" in out
    assert "--restore" in out
    assert maria not in _refers(db, tmp_path)
    assert "Maria" not in ok(cli("--db", str(db), "search", MARKER.decode(), home=tmp_path))
    assert _rest(db, tmp_path) == rest

    out = ok(cli("--db", str(db), "forget", "--entity", maria, "--restore", home=tmp_path))
    assert out == f"restored entity {maria}\n"
    assert maria in _refers(db, tmp_path)
    assert MARKER.decode() in ok(cli("--db", str(db), "search", MARKER.decode(), home=tmp_path))

    assert _files_hold(db, MARKER)  # soft deletion and restore keep every byte
    out = ok(cli("--db", str(db), "forget", "--entity", maria, "--purge", home=tmp_path))
    assert out.count("\n") == 1
    assert f"erased entity {maria}" in out

    assert not _files_hold(db, MARKER)
    assert not _files_hold(db, b"treats her diabetes")
    # What the entity's own observations held is gone; a message that named it keeps its
    # text (that is the conversation's: `forget CONVERSATION --purge` erases it).
    assert _files_hold(db, b"Do you know Maria Gomez")
    assert maria not in _refers(db, tmp_path)
    assert _rest(db, tmp_path) == rest
    # purged is unknown, not deleted: nothing to restore, nothing to delete
    for extra in (["--restore"], []):
        gone = cli("--db", str(db), "forget", "--entity", maria, *extra, home=tmp_path)
        assert gone.returncode == 1
        assert f"no entity {maria}" in gone.stderr


def test_purge_erases_an_entity_deleted_earlier(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    maria = anyio.run(_seed, db)
    ok(cli("--db", str(db), "forget", "--entity", maria, home=tmp_path))
    assert _files_hold(db, MARKER)
    ok(cli("--db", str(db), "forget", "--entity", maria, "--purge", home=tmp_path))
    assert not _files_hold(db, MARKER)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--entity", ""], "not an entity id"),
        (["--entity", "Maria Gomez"], "not an entity id"),
        (["--entity", "ent_" + "0" * 10_000], "not an entity id"),
        (["--entity", "ent_" + "0" * 23 + "\x07"], "not an entity id"),
        (["--entity", "ent_" + "0" * 24], "no entity ent_"),
        (["clinic", "--entity", "ent_" + "0" * 24], "not both"),
        (["--entity", "ent_" + "0" * 24, "--restore", "--purge"], "cannot go with --restore"),
        (["--entity", "ent_" + "0" * 24, "--save", "x.json"], "--save"),
    ],
)
def test_bad_arguments_are_refused_before_any_write(
    tmp_path: Path, argv: list[str], said: str
) -> None:
    db = tmp_path / "a.db"
    anyio.run(_seed, db)
    before = ok(cli("--db", str(db), "show", "clinic", "--json", home=tmp_path))
    observations = anyio.run(_count_observations, db)
    result = cli("--db", str(db), "forget", *argv, home=tmp_path)
    assert result.returncode == 1
    assert said in result.stderr
    assert "0" * 100 not in result.stderr  # the 10 KB id is not echoed
    assert ok(cli("--db", str(db), "show", "clinic", "--json", home=tmp_path)) == before
    assert anyio.run(_count_observations, db) == observations


async def _count_observations(db: Path) -> int:
    async with EmbeddedStore.open(db, read_only=True) as store:
        found = await store.query_entities(limit=100)
        return sum(e.observation_count for e in found.entities)
