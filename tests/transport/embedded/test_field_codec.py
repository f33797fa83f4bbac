"""The protocol records' fields in a positional codec (schema version 16): a message's and a
turn record's snapshot "f" (and a turn record's ``first_fields``) are stored as their
type's template code and values, where decoding gives the same fields back exactly, and as
the JSON object otherwise; every read answers as on the same file as version 15 held it
(the fields as objects), upgraded."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from codec_support import BEFORE, coded_rows, uncoded_copy
from file_workload_support import (
    USERS,
    Step,
    compared,
    same_on_both,
    steps,
    turn_on_recorded,
    view_of,
    write_steps,
)
from hypothesis import given
from hypothesis import strategies as st
from packed_ids_support import entity_rows
from paths_support import TESTS

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.transport.embedded._codec import (
    decode_fields,
    encode_fields,
    field_sql,
    fields_sql,
    first_fields_sql,
    install,
)
from neotoma_agent.transport.embedded._rows import decode_time, dumps_acyclic

pytestmark = [pytest.mark.anyio]

_MESSAGE = "conversation_message"
_TURN = "conversation_turn"
_KEY = "chat-42:01a2501c-12fd-7129-8a63-b24a6e6ddb03"


def _doc(fields_text: str) -> str:
    return '{"f":' + fields_text + ',"o":[0],"s":0}'


def _sql_reads(conn: sqlite3.Connection, doc: str, first: str, name: str | None) -> list[Any]:
    """What SQL reads of a doc and a ``first_fields`` text: the fields and each field."""
    keys = ("role", "content", "turn_key", "status", "started_at", "session_id", "nothing")
    columns = ", ".join(
        [
            fields_sql("?1", "?2"),
            first_fields_sql("?3", "?2"),
            *(field_sql(k, "?1", "?2") for k in keys),
            *(field_sql(k, "?1", "?2", "json_type") for k in keys),
        ]
    )
    return list(conn.execute(f"SELECT {columns}", (doc, name, first)).fetchone())


#: canonical times: as the store writes them
_TIMES = st.integers(0, 4_000_000_000_000).map(decode_time)

_VALUES = st.one_of(
    st.text(),
    st.sampled_from(["user", "assistant", "open", "completed", "", "0", _KEY]),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.text(max_size=5), max_size=3),
    _TIMES,
    # times that are not canonical: other offsets, no milliseconds, microseconds
    _TIMES.map(lambda t: t.replace("Z", "+00:00")),
    _TIMES.map(lambda t: t[:-5] + "Z"),
    _TIMES.map(lambda t: t[:-1] + "123Z"),
)
_KEYS = st.sampled_from(
    [
        "role",
        "sender_kind",
        "content",
        "turn_key",
        "turn_number",
        "session_id",
        "turn_id",
        "status",
        "harness",
        "model",
        "started_at",
        "ended_at",
        "tool_invocation_count",
        "retrieved_entity_ids",
        "schema_version",
        "an_extra_field",
    ]
)


@given(
    entity_type=st.sampled_from([_MESSAGE, _TURN, "company"]),
    fields=st.dictionaries(_KEYS, _VALUES, max_size=10),
    name=st.one_of(st.none(), st.text(max_size=8), st.just(f"{_MESSAGE}:{_KEY}")),
    same_key=st.booleans(),
)
def test_what_is_coded_decodes_to_the_same_fields(
    entity_type: str, fields: dict[str, Any], name: str | None, same_key: bool
) -> None:
    """Any fields, in any key order, of any text (unicode), times canonical or not: what
    the codec stores decodes (in Python and through SQL, the fields and each field) to
    exactly the same JSON, or it is the fields' own text."""
    if same_key and "turn_key" in fields and name is not None:
        fields["turn_key"] = name.removeprefix(f"{_MESSAGE}:")
    text = dumps_acyclic(fields)
    stored = encode_fields(entity_type, fields, text, name)
    if stored != text:
        coded = json.loads(stored)
        assert isinstance(coded, list)
        assert entity_type != "company"
        assert dumps_acyclic(decode_fields(coded, name)) == text
        assert list(decode_fields(coded, name)) == list(fields)
    with closing(sqlite3.connect(":memory:")) as conn:
        install(conn)
        assert _sql_reads(conn, _doc(stored), stored, name) == _sql_reads(
            conn, _doc(text), text, name
        )


def _message(role: str, content: str, key: str) -> dict[str, Any]:
    return {"role": role, "sender_kind": role, "content": content, "turn_key": key}


_OPEN = {
    "session_id": "chat-42",
    "turn_id": "01a2501c-12fd-7129-8a63-b24a6e6ddb03",
    "turn_key": _KEY,
    "status": "open",
    "harness": "peers",
    "started_at": "2026-12-07T10:51:51.347Z",
}
_CLOSED = {
    **_OPEN,
    "status": "completed",
    "ended_at": "2026-12-07T10:51:51.353Z",
    "tool_invocation_count": 0,
    "retrieved_entity_ids": ["ent_af939bedafbd1838b259772a"],
    "stored_entity_ids": [],
}


@pytest.mark.parametrize(
    ("entity_type", "fields", "name", "most"),
    [
        (_MESSAGE, _message("user", "é, hi", _KEY), f"{_MESSAGE}:{_KEY}", 22),
        (_MESSAGE, _message("assistant", "ok", _KEY + ":assistant"), None, 70),
        (_TURN, _OPEN, None, 90),
        (_TURN, _CLOSED, None, 160),
    ],
)
def test_the_records_a_turn_writes_are_coded(
    entity_type: str, fields: dict[str, Any], name: str | None, most: int
) -> None:
    """A turn's messages and its record, open and closed: no field names, the role and
    status as codes, the times as milliseconds, the derived keys as 0."""
    text = dumps_acyclic(fields)
    stored = encode_fields(entity_type, fields, text, name)
    assert stored.startswith("[")
    assert len(stored) <= most < len(text)
    assert not any(f'"{k}"' in stored for k in fields)
    assert decode_fields(json.loads(stored), name) == fields


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({**_CLOSED, "ended_at": "2026-12-07T10:51:51.353+00:00"}, "a time not canonical"),
        ({**_CLOSED, "started_at": "2026-12-07T10:51:51Z"}, "a time without milliseconds"),
        ({**_CLOSED, "started_at": 1796640711347}, "a time that is a number"),
        ({**_CLOSED, "cause": "x"}, "a field the template does not hold"),
        ({"status": "open", **_OPEN}, "the fields in another order"),
        ({**_OPEN, "turn_key": 0}, "a value that reads as the marker of a derived one"),
        ({**_OPEN, "status": 1}, "a value that reads as a word's code"),
    ],
)
def test_each_fallback_keeps_the_fields_object(fields: dict[str, Any], why: str) -> None:
    text = dumps_acyclic(fields)
    assert encode_fields(_TURN, fields, text, None) == text, why


def _rows(path: Path) -> dict[str, tuple[str, str | None]]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT canonical_name, snapshot, first_fields FROM entities "
            "WHERE entity_type IN ('conversation_message', 'conversation_turn')"
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


async def test_a_turn_is_stored_coded_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-42", platform="peers")
        async with memory.turn("Grüße, 💡?", turn_id="t1") as t:
            t.reply = "Hallo."
        page = await memory.history(limit=None)
        record = await store.request(
            "entities/query",
            {
                "entity_type": _TURN,
                "snapshot_filters": {"status": {"op": "eq", "value": "completed"}},
            },
        )
    assert [(p.user, p.reply) for p in page] == [("Grüße, 💡?", "Hallo.")]
    assert [e["snapshot"]["turn_key"] for e in record["entities"]] == ["chat-42:t1"]
    rows = _rows(path)
    assert rows[f"{_MESSAGE}:chat-42:t1"][0].startswith('{"f":[1,0,0,"Grüße, 💡?",0]')
    doc, first = rows[f"{_TURN}:chat-42|t1"]
    assert doc.startswith('{"f":[-2,')
    assert first is not None
    assert first.startswith("[-2,")
    assert coded_rows(path) == (3, 1)


async def test_a_store_that_falls_back_keeps_the_object_and_answers_it(tmp_path: Path) -> None:
    """A turn record stored with a time not canonical, or its fields in another order, and
    a message with a field its template does not hold (its observation's fields keep it):
    their rows hold the objects, and the reads answer them."""
    path = tmp_path / "store.db"
    odd = {**_OPEN, "turn_id": "t-odd", "turn_key": "chat-42:t-odd"}
    odd["started_at"] = "2026-12-07T10:51:51.347+00:00"
    reordered = {"status": "open", **_OPEN, "turn_id": "t-re", "turn_key": "chat-42:t-re"}
    extra = {**_message("user", "hi", "chat-42:t-x"), "mood": "calm"}
    async with EmbeddedStore.open(path) as store:
        for n, fields in enumerate(
            ({"entity_type": _TURN, **odd}, {"entity_type": _TURN, **reordered})
        ):
            await store.store([fields], idempotency_key=f"k{n}")
        await store.store([{"entity_type": _MESSAGE, **extra}], idempotency_key="k-x")
        rows = _rows(path)
        for name, fields in (("chat-42|t-odd", odd), ("chat-42|t-re", reordered)):
            doc = rows[f"{_TURN}:{name}"][0]
            assert doc.startswith('{"f":' + dumps_acyclic(fields) + ","), name
            got = await store.request("entities/query", {"entity_type": _TURN, "limit": 10})
            assert fields in [e["snapshot"] for e in got["entities"]]
        message = f"{_MESSAGE}:chat-42:t-x"
        doc, first = rows[message]
        assert first == dumps_acyclic(extra)  # its observation's fields: an object
        assert doc.startswith('{"f":[1,0,0,"hi",0]')  # the snapshot's declared ones: coded
        page = await store.request(
            "retrieve_entity_by_identifier", {"identifier": "chat-42:t-x", "by": "turn_key"}
        )
        (entity,) = [e for e in page["entities"] if e["canonical_name"] == message]
        observations = await store.request("list_observations", {"entity_id": entity["id"]})
    assert [o["fields"] for o in observations["observations"]] == [extra]


async def _field_reads(path: Path) -> dict[str, str]:
    """The reads that take a record's fields apart in SQL: queries filtered and sorted by
    a field, lookups by a field, the summaries, a conversation's routes."""
    out: dict[str, str] = {}
    async with EmbeddedStore.open(path) as store:
        for user in USERS:
            view = view_of(store, user)
            got = []
            for etype, field, value in (
                (_TURN, "status", "completed"),
                (_TURN, "session_id", "c1"),
                (_MESSAGE, "role", "assistant"),
                (_MESSAGE, "turn_key", "c0:t0"),
            ):
                for op in ("eq", "contains"):
                    body = {"entity_type": etype, "limit": 100}
                    body["snapshot_filters"] = {field: {"op": op, "value": value}}
                    got.append(await view.request("entities/query", body))
                got.append(
                    await view.request(
                        "entities/query",
                        {"entity_type": etype, "sort_by": f"snapshot.{field}", "limit": 100},
                    )
                )
                got.append(
                    await view.request(
                        "retrieve_entity_by_identifier",
                        {"identifier": value, "by": field, "entity_type": etype},
                    )
                )
            got.append(
                await view.request(
                    "entities/query", {"entity_type": _TURN, "sort_by": "snapshot.started_at"}
                )
            )
            out[user] = repr(got)
    return out


async def test_the_release_befores_file_is_coded_and_answers_as_recorded(tmp_path: Path) -> None:
    """The file the release before wrote (``tests/data/v15_store``): after the upgrade its
    messages and turn records are coded, and it is written on as a file this release
    wrote (its answers as recorded: ``test_embedded_migration``)."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / f"v{BEFORE}_store" / "store.db", path)
    assert coded_rows(path) == (0, 0)
    async with EmbeddedStore.open(path):
        pass
    docs, firsts = coded_rows(path)
    assert docs >= 16
    assert firsts >= 5
    await turn_on_recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.one_backend
@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_before_the_codec(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (the
    Transport's, history, search, audit, backup, every GET route and point read of every
    entity, another user's included, and the reads that take a record's fields apart in
    SQL) answers the same on the file and on its copy as the version before held it (every
    field an object), upgraded; then the same writes on both write the same rows and answer the
    same."""
    tmp = tmp_path_factory.mktemp("codec")
    path = tmp / "coded.db"
    await write_steps(path, [("turn", 0, 0), ("turn", 1, 1), *before], 0)
    assert coded_rows(path)[0] > 0
    old = uncoded_copy(path, tmp / "before.db")
    assert coded_rows(old) == (0, 0)
    await same_on_both(path, old, after, reads=_field_reads)


async def test_a_renamed_message_is_coded_under_its_new_name(tmp_path: Path) -> None:
    """A correction of a message's ``turn_key`` renames it: its row is coded again under the
    new name, as the migration codes the same fields (the row is the upgraded copy's), and
    every read answers the new key (its first observation's fields keep the old one)."""
    path = tmp_path / "store.db"
    message = {"entity_type": _MESSAGE, **_message("user", "hi", "c:t1")}
    async with EmbeddedStore.open(path) as store:
        (written,) = (await store.store([message], idempotency_key="k1")).entities
        body = {"entity_id": written.entity_id, "entity_type": _MESSAGE, "field": "turn_key"}
        await store.request("correct", {**body, "value": "c:t2", "idempotency_key": "fix"})
        snapshot = await store.request("get_entity_snapshot", {"entity_id": written.entity_id})
        observations = await store.request("list_observations", {"entity_id": written.entity_id})
    assert snapshot["snapshot"]["turn_key"] == "c:t2"
    assert [o["fields"].get("turn_key") for o in observations["observations"]] == ["c:t2", "c:t1"]
    doc, first = _rows(path)[f"{_MESSAGE}:c:t2"]
    assert doc.startswith('{"f":[1,0,0,"hi",0]')
    assert first == '[1,0,0,"hi","c:t1"]'
    old = uncoded_copy(path, tmp_path / "before.db")
    async with EmbeddedStore.open(old):
        pass
    assert entity_rows(old) == entity_rows(path)
