"""A backup keeps what ``forget --entity`` deleted: deleted, and as restorable as it was.

A store file holds three entities deleted one by one: Maria (a turn remembered her, so a
message REFERS_TO her), Acme (remembered outside any turn: no edge reaches it) and Zed
(deleted, then purged). ``export`` then ``import`` into an empty store: Maria and Acme
are still deleted there (no search, lookup or snapshot finds them) and ``forget --entity
ID --restore`` brings each back with its fields; Zed is in neither the backup nor the
restored store. Through ``serve`` (a real process), whose reads reach a deleted entity by
its edges only, Maria comes back the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import attrs
import pytest
from cli_support import cli, ok, serving

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.exceptions import NotFoundError

pytestmark = pytest.mark.one_backend

MARKERS = {"maria": "zqmariaqz", "acme": "zqacmeqz", "zed": "zqzedqz"}


@attrs.frozen
class Deleted:
    maria: str
    acme: str
    zed: str


def _seed(db: Path, home: Path) -> Deleted:
    async def write() -> tuple[str, str, str]:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id="talk")
            async with memory.turn("Do you know Maria Gomez?") as t:
                maria = t.remember("person", name="Maria Gomez", notes=MARKERS["maria"])
                t.reply = "Yes."
            acme = await memory.remember("company", name="Acme Corp", notes=MARKERS["acme"])
            zed = await memory.remember("person", name="Zed Quill", notes=MARKERS["zed"])
            return maria, acme, zed

    maria, acme, zed = anyio.run(write)
    for entity_id in (maria, acme, zed):
        ok(cli("forget", "--entity", entity_id, "--db", str(db), home=home))
    ok(cli("forget", "--entity", zed, "--purge", "--db", str(db), home=home))
    return Deleted(maria, acme, zed)


def _state(db: Path, entity_id: str) -> tuple[bool, int]:
    """Whether the entity reads as live, and how many observations it keeps."""

    async def read() -> tuple[bool, int]:
        async with EmbeddedStore.open(db) as store:
            try:
                await store.get_entity_snapshot(entity_id)
                live = True
            except NotFoundError:
                live = False
            page = await store.list_observations(entity_id)
            return live, len(page.observations)

    return anyio.run(read)


def _searched(db: Path, home: Path, text: str) -> list[object]:
    found = json.loads(ok(cli("search", text, "--json", "--db", str(db), home=home)))
    return list(found["hits"])


def test_a_deleted_entity_stays_deleted_and_restorable_through_a_backup(tmp_path: Path) -> None:
    db, restored = tmp_path / "m.db", tmp_path / "restored.db"
    deleted = _seed(db, tmp_path)
    backup = ok(cli("export", "--db", str(db), home=tmp_path))
    assert MARKERS["maria"] in backup
    assert MARKERS["acme"] in backup
    assert MARKERS["zed"] not in backup
    assert deleted.zed not in backup
    ok(cli("import", "-", "--db", str(restored), home=tmp_path, stdin=backup))
    for entity_id, marker in ((deleted.maria, "maria"), (deleted.acme, "acme")):
        live, observations = _state(restored, entity_id)
        assert not live  # not resurrected
        assert observations >= 2  # its fields and its deletion: restorable
        assert _searched(restored, tmp_path, MARKERS[marker]) == []
        ok(cli("forget", "--entity", entity_id, "--restore", "--db", str(restored), home=tmp_path))
        assert _state(restored, entity_id)[0]
        assert _searched(restored, tmp_path, MARKERS[marker])
    # The purged one is unknown there, as it is in the original.
    assert _state(restored, deleted.zed) == (False, 0)
    again = cli(
        "forget", "--entity", deleted.zed, "--restore", "--db", str(restored), home=tmp_path
    )
    assert again.returncode != 0


def test_a_backup_through_serve_keeps_a_deleted_entity_its_edges_reach(tmp_path: Path) -> None:
    db, restored = tmp_path / "m.db", tmp_path / "restored.db"
    deleted = _seed(db, tmp_path)
    with serving(db, tmp_path) as url:
        backup = ok(cli("export", "--url", url, home=tmp_path))
    assert MARKERS["maria"] in backup
    assert MARKERS["zed"] not in backup
    ok(cli("import", "-", "--db", str(restored), home=tmp_path, stdin=backup))
    assert _state(restored, deleted.maria)[0] is False
    ok(cli("forget", "--entity", deleted.maria, "--restore", "--db", str(restored), home=tmp_path))
    assert _searched(restored, tmp_path, MARKERS["maria"])
