"""Batched import: many stores per job, each still atomic and exactly once under its own key.

Against real SQLite files and the real CLI in subprocesses (SIGKILL included).
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import clean_env, cli, ok

from neotoma_agent._batch import BatchTurn, record_batch
from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.exceptions import IdempotencyMismatchError, ServerError
from neotoma_agent.testing import FaultyTransport, RecordingTransport
from neotoma_agent.transport._rest import store_body
from neotoma_agent.transport.embedded import EmbeddedStore
from neotoma_agent.transport.embedded._key_rows import key_text

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


def _body(conversation: str, key: str, content: str) -> dict[str, Any]:
    return store_body(
        [
            {"entity_type": "conversation", "conversation_id": conversation},
            {
                "entity_type": "conversation_message",
                "role": "user",
                "sender_kind": "user",
                "content": content,
                "turn_key": f"{conversation}:{key}",
            },
        ],
        idempotency_key=key,
        relationships=[{"relationship_type": "PART_OF", "source_index": 1, "target_index": 0}],
    )


def _transcript(path: Path, turns: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(turns):
            line = {"conversation_id": f"c{i % 37}", "user": f"q {i}", "assistant": f"a {i}"}
            f.write(json.dumps(line) + "\n")
    return path


def _counts(db: Path) -> tuple[int, int, int]:
    """(idempotency keys, turn records, observations: rows, entity rows' first ones and
    derived restatements) in a store file."""
    with sqlite3.connect(db) as conn:
        keys = conn.execute("SELECT count(*) FROM idempotency_keys").fetchone()[0]
        turns = conn.execute(
            "SELECT count(*) FROM entities WHERE entity_type = 'conversation_turn'"
        ).fetchone()[0]
        observations = conn.execute(
            "SELECT (SELECT count(*) FROM observations) + (SELECT count(first_id) "
            "+ count(close_id) FROM entities) "
            "+ (SELECT count(*) FROM conversation_messages WHERE restated = 1)"
        ).fetchone()[0]
    return keys, turns, observations


async def test_store_many_rolls_back_a_failing_store_alone(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        # The second body fails after its conversation row was written (SQLite cannot
        # encode a lone surrogate): its savepoint must take that row back, and only that.
        results = await store.store_many(
            [
                _body("first", "k1", "hello"),
                _body("doomed", "k2", "bad \ud800 text"),
                _body("third", "k3", "bye"),
            ]
        )
        assert [type(r).__name__ for r in results] == [
            "StoreResult",
            "ValidationError",
            "StoreResult",
        ]
        names = [
            e.canonical_name
            for e in (await store.query_entities(entity_type="conversation")).entities
        ]
        assert sorted(names) == ["conversation:first", "conversation:third"]
        again = await store.store_many([_body("doomed", "k2", "fixed text")])
        assert not isinstance(again[0], Exception)
        assert not again[0].replayed


async def test_replay_status_tells_stored_from_new_and_from_mismatched(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        await store.store_many([_body("c", "k1", "one"), _body("c", "k2", "two")])
        statuses = await store.replay_status(
            [
                _body("c", "k1", "one"),  # stored with these entities
                _body("c", "k2", "two, edited"),  # stored with others
                _body("c", "k3", "three"),  # new
                {**_body("c", "k1", "one"), "source_priority": 5},  # not plain: a store decides
            ]
        )
        assert statuses == [True, False, None, None]


async def test_a_batch_reports_each_turn_as_record_turn_would(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        memory = NeotomaMemory(store, conversation_id="c")
        await memory.record_turn("u1", "a1", turn_id="t1")
        turns = [
            BatchTurn(memory, "u1", "a1", "t1"),  # already stored: a replay
            BatchTurn(memory, "u1", "a1, edited", "t1"),  # same key, other text
            BatchTurn(memory, "u2", "a2", "t2"),  # new
            BatchTurn(memory, "u2", "a2", "t2"),  # the same turn twice in one batch
        ]
        outcomes = await record_batch(store, turns, retrieve=True)
    assert [o.replayed for o in outcomes] == [True, False, False, True]
    assert isinstance(outcomes[1].error, IdempotencyMismatchError)
    assert "turn 't1' of conversation 'c' was already stored" in str(outcomes[1].error)
    assert [o.error for o in (outcomes[0], outcomes[2], outcomes[3])] == [None, None, None]


async def test_a_batch_stores_exactly_what_record_turn_stores(tmp_path: Path) -> None:
    """Same keys, same entities (by hash) and same edges as one record_turn per turn."""

    async def seeded(path: Path) -> tuple[EmbeddedStore, str]:
        store = EmbeddedStore.open(path)
        acme = await NeotomaMemory(store, conversation_id="seed").remember(
            "company", name="Acme Corp"
        )
        return store, acme

    turns = [("c1", "t1", "Is Acme Corp paid up?", "Yes."), ("c2", "t2", "hi", "hello")]
    batched, acme = await seeded(tmp_path / "batch.db")
    alone, _ = await seeded(tmp_path / "alone.db")
    async with batched, alone:
        await record_batch(
            batched,
            [
                BatchTurn(NeotomaMemory(batched, conversation_id=c), u, a, t, 7, (acme,))
                for c, t, u, a in turns
            ],
            retrieve=True,
        )
        for c, t, u, a in turns:
            await NeotomaMemory(alone, conversation_id=c).record_turn(
                u, a, turn_id=t, turn_number=7, refers_to=[acme]
            )

    def written(path: Path) -> tuple[list[tuple[str, bytes]], list[tuple[str, str, str]]]:
        with sqlite3.connect(path) as conn:
            keys = sorted(
                (key_text(k), s)
                for k, s in conn.execute("SELECT key, source_id FROM idempotency_keys")
            )
            edges = conn.execute(
                "SELECT source_entity_id, relationship_type, target_entity_id "
                "FROM relationships ORDER BY 1, 2, 3"
            ).fetchall()
        return keys, edges

    assert written(tmp_path / "batch.db") == written(tmp_path / "alone.db")
    keys, edges = written(tmp_path / "batch.db")
    assert len(keys) == 3  # the seed and two turns
    assert sum(1 for _, rtype, target in edges if rtype == "REFERS_TO" and target == acme) == 3


async def test_a_batch_looks_each_named_identifier_up_once(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        acme = await NeotomaMemory(store, conversation_id="seed").remember("company", name="Globex")
        recording = RecordingTransport(store)
        memories = [NeotomaMemory(recording, conversation_id=f"c{i % 3}") for i in range(3)]
        turns = [
            BatchTurn(memories[i % 3], f"Is Globex paid up ({i})?", "Yes.", f"t{i}")
            for i in range(12)
        ]
        outcomes = await record_batch(store, turns, retrieve=True, concurrency=4)
        assert [o.error for o in outcomes] == [None] * 12
        looked_up = [c.args[0] for c in recording.calls_to("retrieve_entity_by_identifier")]
        assert sorted(looked_up) == ["Globex"]
        for i in range(12):
            # Every turn still gets the answer: both its messages refer to the entity.
            stored = await memories[i % 3].history(None)
            assert any(h.turn_id == f"t{i}" and acme in h.user_refers_to for h in stored)


async def test_a_failed_shared_lookup_is_tried_again_by_the_next_turn(tmp_path: Path) -> None:
    # A name without a legal suffix: one lookup per turn (no company-id lookup beside it).
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        acme = await NeotomaMemory(store, conversation_id="seed").remember("company", name="Globex")
        faulty = FaultyTransport(store).fail(
            "retrieve_entity_by_identifier", ServerError("down", status=503), times=1
        )
        memory = NeotomaMemory(faulty, conversation_id="c")
        turns = [BatchTurn(memory, f"Is Globex paid up ({i})?", "Yes.", f"t{i}") for i in (1, 2)]
        outcomes = await record_batch(store, turns, retrieve=True, concurrency=1)
        assert [o.error for o in outcomes] == [None, None]
        refers = {h.turn_id: h.user_refers_to for h in await memory.history(None)}
    # The first turn to look up failed (it is stored without the edge; which turn that is
    # is the scheduler's choice); the other looked again and found the entity.
    assert sorted(refers.values()) == [(), (acme,)]


def test_a_reimport_leaves_the_store_file_byte_for_byte_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    transcript = _transcript(tmp_path / "t.jsonl", 600)  # three batches
    ok(cli("import", str(transcript), "--db", str(db), "--no-retrieve", home=tmp_path))
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for extra in (["--no-retrieve"], []):
        out = ok(cli("import", str(transcript), "--db", str(db), *extra, home=tmp_path))
        assert "nothing new to write: all 600 turns were already stored" in out
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
@pytest.mark.timeout(300)  # two imports of 1,500 turns: seconds idle, minutes on a loaded machine
@pytest.mark.budget(40)  # a fresh process and two imports: the load average lags a burst of load
def test_an_import_killed_mid_batch_resumes_and_stores_every_turn_once(tmp_path: Path) -> None:
    turns = 1500  # six batches: several still to write when the first is seen committed
    transcript = _transcript(tmp_path / "t.jsonl", turns)
    db = tmp_path / "memory.db"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neotoma_agent.cli",
            "import",
            str(transcript),
            "--db",
            str(db),
            "--no-retrieve",  # the writes are what is killed and resumed
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        stored = 0
        # Kill once some batches are committed, while the next ones are being written.
        while stored == 0 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
            if db.exists():
                try:
                    stored = _counts(db)[0]
                except sqlite3.OperationalError:  # the schema is still being created
                    stored = 0
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL, "the import ended before it could be killed"
    keys, records, observations = _counts(db)
    assert 0 < keys < turns
    # Whole turns only: every committed key has its turn record and its four observations.
    assert records == keys
    assert observations == 4 * keys

    out = ok(cli("import", str(transcript), "--db", str(db), "--no-retrieve", home=tmp_path))
    match = re.search(r"stored ([\d,]+) new turns?; ([\d,]+) (?:was|were) already", out)
    assert match is not None, out
    written, replayed = (int(g.replace(",", "")) for g in match.groups())
    assert replayed == keys
    assert written == turns - keys
    assert _counts(db) == (turns, turns, 4 * turns)
