"""Probe: bytes per turn of a store file in layouts not built yet (a measured ceiling).

    python benchmarks/disk_layout_probe.py STORE.db [--turns N] [--json PATH]
    python benchmarks/disk_layout_probe.py --write-turns 1000 [--minted-ids] [--json PATH]

``--write-turns N`` first writes N short turns of ``peers.py`` (16 conversations, 1 caller,
``memory.turn`` on an ``EmbeddedStore``) into a fresh file and probes that; with
``--minted-ids``, each turn's id is a UUID the library mints (``peers.py`` names its turns
``t{i}``), for rows of other sizes. The output ends with how full the live file's entity
leaves are (SQLite's ``dbstat``: a page split leaves room that appends never fill).

Reads a store file of the current schema version (never writes it: the ``live`` column is
this release's own format, as the store writes it) and copies its row
tables into fresh files, in their key order, once in the file's own layout (``copy``: its
columns, the per-user ones included) and once per layout probed:

- ``numbers``: the entity number (the ``entities`` rowid) instead of the entity id in every
  secondary table: relationships and their target index (the conversation index and its
  index by message hold the numbers of their entity rows in the live file since schema
  version 18, the observations and their unique index by entity, ``(entity_row, id)``,
  since version 21, ``_observation_index``: every layout copies them);
- ``+type``: and the entity type index as (user, type code, number) instead of (user, type
  code, the id's first 4 bytes) as the live file indexes it (schema version 14 holds the
  type as its code in the entity row and its index, version 27 keys it by 4 bytes of the
  id, ``_type_prefix``, which the other layouts copy; by number, a query of a type sorted
  by id would sort: measured with schema version 21, a page of 20 of a type's 2,000
  entities took 40 times the steps, so the live file keeps the id's prefix, whose order is
  the id's but for ties, docs/performance.md);
- ``+name``: and no canonical name where the identity rules derive it from the entity's
  type and fields (NULL; a read would derive it again), except a coded message's, whose
  ``turn_key`` the live file derives from its name (schema version 16), as a coded turn
  record's; every other name as the live file stores it: since schema version 18 the rest after its
  type's ``{type}:`` as bytes (``_row_codes``), which every layout copies;
- ``+meta``: and each winning observation in the snapshot doc as its seq alone (its id,
  time, priority and source rank read from its row), instead of about 53 bytes of metas
  (the live file lists its entity row's first observation so since schema version 13, and
  a turn record's observation rows, its close, since version 25, ``_row_metas``: the step
  models the rest, a conversation's and any other entity's observation rows, which win
  fields in a few rows a file; built for every winner once and measured, the live file
  shrank by 12 B a turn where this layout's copies said about 140, since a turn record
  grew at its close and its page kept the room: docs/performance.md, step 4; since schema
  version 23 it does not, and version 25 took the 57 B this layout estimated on it);
- ``+keys``: and the idempotency keys in a rowid table (key text once, found by an index
  on the 4-byte digest of it the live file keys them by), every other reference to a key
  (observations, the entity row's first observation) by its row number, the index by
  source holding the number instead of the key's digest and slot (schema version 8
  already finds a key by a 16-byte digest and keeps its text once, in its row; version 19
  packs that text, ``_key_rows``, and indexes the source's first 8 bytes, 4 since version
  21, as this layout copies them; version 24 keys the rows by the digest's first 4 bytes
  and a slot, ``_key_digest``, which the ``copy`` layouts copy: this step numbers the
  rows, and costs bytes since) — ``compact``, the last step of the format designed;
- ``+codec``: and what the field codec leaves (schema version 16 holds a message's and a
  turn record's fields in a per-type positional codec: no names, times as milliseconds,
  the role and status as codes, a message's ``sender_kind`` and ``turn_key`` and a turn
  record's ``turn_key`` derived, ``_codec``): a turn record's ``session_id`` and
  ``turn_id`` derived from its name (``conversation_turn:<session>|<turn>``) as 0 too, in
  its snapshot and its ``first_fields``. A model, not a design: a write of a turn record's
  close would read its name first.

A copy packs pages fuller than writes in random key order do, so each layout's figure for
the live file is estimated table by table as live x layout / copy (``est``). The FTS5 name
and search indexes and the small tables are left as they are (counted as in the live file:
schema version 8's search index and version 9's index of bookkeeping names keep no copy of
the texts; since version 29 the search index keeps no positions either, FTS5's
``detail = none``, ``_search_detail``; its other FTS5 options are
``search_index_options.py``'s). The
bookkeeping names' index stays in every layout: a real server finds conversations,
messages and turn records by any substring of their names, as any entity;
the live file holds one document a turn there (its turn record's name and its two
messages' names: the turn's close writes none), which every layout counts as it is; since
schema version 22 a new document waits in ``bookkeeping_names_queue`` (a page or two) and
goes into the index with 31 others, as one segment (the same documents, merged at other
moments), and every layout counts the queue as it is too.
No layout holds a message's PART_OF edge to its conversation: since schema version 10 the
live file derives it from the conversation index, and every layout copies its rows. Nor
does any layout hold an entity's first observation as a row of ``observations``: since
schema version 11 the live file keeps it in the entity row (its id, source, key, priority,
source word, specificity, identity basis and rule, and its fields when they are not the
snapshot's), and every layout copies those columns; nor does any layout hold again, in a
row of ``observations``, the fields its entity row's first observation holds (a
conversation restated at each turn's enter): since schema version 26 such a row's fields
are a mark, an empty blob (``_restatement``), and every layout copies the rows' fields as
they are; nor does any layout hold that restatement as a row at all where the user message
its store created gives it back (its source, time, priority and observation source): since
schema version 28 the live file derives it from the message row, its conversation index row
flagged (``restated``, ``_derived_restatement``), and every layout copies the index rows
with their flag; nor does any layout hold the 16 bytes of an entity row's first
observation's id where it is the digest of what the row gives back (its source, its
entity and its fields' text): since schema version 30 the live file stores an empty blob
there (``_first_id``), and every layout copies the column as it is; nor does any layout
hold a turn record's close as a row of ``observations`` where its entity row gives it back
(the first observation's type, priority, source word, specificity, identity basis and
rule, no key, another source): since schema version 32 the live file keeps it in the row
(``close_id``, ``close_source``, ``close_at`` after the row's ``created_at``,
``close_fields`` where they are not the snapshot's: ``_close_row``), and every layout
copies those columns (with ``+codec``'s model applied to the close's fields as to the
first's). And every layout holds an entity's id as its 12 bytes in its row
(``encode_entity``), as the live file does since schema version 12, and indexes its first 4
bytes alone, not unique (the live file since schema version 31, ``_id_prefix``: the table
has no key on the id, whose index held its 12 bytes), and its name, aliases and update and
last observation times coded as the live file stores them since schema version 18
(``_row_codes``: the rest of a name after its type, no aliases and a time equal to the
creation time as NULL; the copies read the stored columns, not the virtual ones that decode
them). Nor does any layout, nor the live file, hold ``search_docs`` (each indexed entity's
number and id, and a unique index on the id: about 94 bytes a turn): since schema version
15 the search index's rows have their entity rows' rowids.
Every layout copies what a turn record's close left of the room its enter wrote it with
(``room``: since schema version 22 a turn record is written at its enter at the size its
close takes, ``_close_room``; its close spends the room, a few bytes are left), and the
live file's entity pages are as full as the copies' (a close no longer splits them: at
schema version 20, a sixth of the live file's entity leaves was room such splits left).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from _meta import environment

from neotoma_agent._neotoma.identity import IdentityError, resolve_identity
from neotoma_agent.transport.embedded._codec import NAMED_TYPES
from neotoma_agent.transport.embedded._key_digest import digest
from neotoma_agent.transport.embedded._key_rows import key_text, pack_key
from neotoma_agent.transport.embedded._rows import (
    decode_doc_fields,
    encode_word,
    entity_text,
)
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

LAYOUTS = (
    "copy",
    "numbers",
    "+type",
    "+name",
    "+meta",
    "+keys",
    "+codec",
)
#: the compact format's design (docs/performance.md): every step up to this one
COMPACT = "+keys"


def _has(layout: str, step: str) -> bool:
    """Whether ``layout`` includes ``step`` (each layout adds its change to those before)."""
    return LAYOUTS.index(layout) >= LAYOUTS.index(step)


# (name, columns) of the tables and indexes each layout writes; rows come from ``_fill``.
# The id not unique (schema version 31: the writer keeps it so), found by its first 4 bytes
# (``entities_by_id``, ``_id_prefix``), as the live file holds it.
_ENTITIES = """CREATE TABLE entities (num INTEGER PRIMARY KEY, id NOT NULL,
    entity_type NOT NULL, name_code, alias_list TEXT, created_at NOT NULL,
    updated_code, snapshot TEXT NOT NULL, observation_count INTEGER NOT NULL,
    last_code, message_count INTEGER NOT NULL, uid INTEGER NOT NULL{merged}, room BLOB)"""
# The entity's first observation, in its row (the live file holds it so since schema 11),
# and a turn record's close (since schema 32, ``_close_row``).
_MERGED = """, first_id, first_source, first_key, first_priority INTEGER,
    first_osource, first_specificity REAL, first_basis, first_rule, first_fields TEXT,
    close_id, close_source, close_at, close_fields TEXT"""
# As the live file holds it since schema version 21: by the entity row's number.
_OBSERVATIONS = """CREATE TABLE observations (seq INTEGER PRIMARY KEY, id NOT NULL,
    entity_row NOT NULL, entity_type NOT NULL, source_id, observed_at NOT NULL,
    source_priority INTEGER NOT NULL, observation_source, specificity_score REAL NOT NULL,
    fields TEXT, idempotency_key, identity_basis, identity_rule)"""
_RELATIONSHIPS = """CREATE TABLE relationships (source_entity_id NOT NULL,
    relationship_type TEXT NOT NULL, target_entity_id NOT NULL, metadata TEXT NOT NULL,
    provenance TEXT NOT NULL, seen NOT NULL, observation_count INTEGER NOT NULL,
    last_observation_at NOT NULL, computed_at, uid INTEGER NOT NULL,
    PRIMARY KEY (source_entity_id, relationship_type, target_entity_id)) WITHOUT ROWID"""
# As the live file holds it since schema version 18: by the entity rows' numbers.
_MESSAGES = """CREATE TABLE conversation_messages (conversation_row INTEGER NOT NULL,
    seq INTEGER NOT NULL, message_row INTEGER NOT NULL, restated INTEGER,
    PRIMARY KEY (conversation_row, seq)) WITHOUT ROWID"""
_INDEXES = """
CREATE INDEX entities_by_id ON entities (substr(id, 1, 4));
CREATE UNIQUE INDEX observations_by_entity ON observations (entity_row, id);
CREATE INDEX relationships_by_target ON relationships (target_entity_id, relationship_type);
"""
# Until ``+keys`` the keys are copied in the file's own layout.
_KEYS = "SELECT sql FROM src.sqlite_master WHERE tbl_name = 'idempotency_keys' AND sql NOT NULL"
# ``+keys``: numbered, the text once (packed, as the live file holds it since schema
# version 19), found by its digest (4 bytes, as live since schema version 24); the source
# indexed by its first 4 bytes, as live (since schema version 21).
_NUMBERED_KEYS = """
CREATE TABLE idempotency_keys (num INTEGER PRIMARY KEY, uid INTEGER NOT NULL,
    digest BLOB NOT NULL,
    key NOT NULL, source_id NOT NULL, observations TEXT NOT NULL, created_at NOT NULL);
CREATE INDEX idempotency_keys_by_digest ON idempotency_keys (uid, digest);
CREATE INDEX idempotency_keys_by_source ON idempotency_keys (substr(source_id, 1, 4))
"""
_COPIED = ("entities", "observations", "relationships", "conversation_messages", "idempotency_keys")
# A reference that found no entity number.
_REFS = {
    "entities": "id IS NULL",
    "observations": "entity_row IS NULL",
    "relationships": "source_entity_id IS NULL OR target_entity_id IS NULL",
    "conversation_messages": "conversation_row IS NULL OR message_row IS NULL",
    "idempotency_keys": "key IS NULL",
}
# The live file's type index (schema version 14): the type's word code, then the id's first
# 4 bytes since version 27 (the copies hold the code in ``entity_type``, where the live
# file's column is ``type_code``).
_BY_ID = "CREATE INDEX entities_by_type ON entities (uid, entity_type, substr(id, 1, 4));"
_BY_NUM = "CREATE INDEX entities_by_type ON entities (uid, entity_type);"

_ENTITY_COLUMNS = (
    "e.rowid, {id}, {type}, {name}, e.alias_list, e.created_at, e.updated_code, {snapshot}, "
    "e.observation_count, e.last_code, e.message_count, e.uid"
)
_FIRST_COLUMNS = (
    ", e.first_id, e.first_source, {key}, e.first_priority, e.first_osource, "
    "e.first_specificity, e.first_basis, e.first_rule, {first}, e.close_id, e.close_source, "
    "e.close_at, {close}"
)


def _digest(key: str | bytes | None) -> bytes | None:
    """An idempotency key's digest (of its text), as the live file keys it (4 bytes since
    schema version 24, ``_key_digest``)."""
    return None if key is None else digest(key_text(key))


_TURN_PREFIX = "conversation_turn:"


def _ids_derived(coded: Any, name: str | None) -> Any:
    """A coded turn record's fields (``_codec``) with its session and turn ids as 0 where
    its name gives them (``+codec``); anything else as it is."""
    if not isinstance(coded, list) or abs(coded[0]) != 2 or not name:
        return coded
    at = 1 if coded[0] > 0 else 2
    if coded[0] < 0 and coded[1] & 3 != 3:
        return coded  # not both ids
    if name != f"{_TURN_PREFIX}{coded[at]}|{coded[at + 1]}":
        return coded
    return [*coded[:at], 0, 0, *coded[at + 2 :]]


def _codec(entity_type: str, name: str | None, doc: str) -> str:
    """``doc`` with what ``+codec`` models of a turn record's fields."""
    if entity_type != "conversation_turn" or not doc.startswith('{"f":['):
        return doc
    coded, end = json.JSONDecoder().raw_decode(doc, 5)
    return '{"f":' + json.dumps(_ids_derived(coded, name), separators=(",", ":")) + doc[end:]


def _codec_first(entity_type: str, name: str | None, text: str | None) -> str | None:
    """A turn record's ``first_fields`` with what ``+codec`` models."""
    if entity_type != "conversation_turn" or text is None or not text.startswith("["):
        return text
    coded = _ids_derived(json.loads(text), name)
    return json.dumps(coded, separators=(",", ":"), ensure_ascii=False)


def _fill(conn: sqlite3.Connection, layout: str) -> None:
    """Copy the rows of ``src`` into ``main`` in ``layout``."""
    numbered = layout != "copy"
    # The live file's rows hold the type's code (schema version 14), as every layout does.
    etype = "word(e.entity_type)"
    name = "e.name_code"
    if _has(layout, "+name"):
        name = "derived_name(e.entity_type, e.canonical_name, e.snapshot, e.name_code)"
    snapshot = "e.snapshot"
    if _has(layout, "+meta"):
        snapshot = (
            "json_set(e.snapshot, '$.o', (SELECT json_group_array(CASE type WHEN 'integer' "
            "THEN value ELSE json_extract(value, '$[1]') END) FROM json_each(e.snapshot, '$.o')))"
        )
    first, close = "e.first_fields", "e.close_fields"
    if _has(layout, "+codec"):
        snapshot = f"codec(e.entity_type, e.canonical_name, {snapshot})"
        first = "codec_first(e.entity_type, e.canonical_name, e.first_fields)"
        close = "codec_first(e.entity_type, e.canonical_name, e.close_fields)"
    # The number of each key (``+keys``), by its text (packed, as the live file holds it).
    key = "{0}"
    if _has(layout, "+keys"):
        conn.execute(
            "INSERT INTO idempotency_keys SELECT NULL, uid, digest(key), key, source_id, "
            "observations, created_at FROM src.idempotency_keys ORDER BY created_at, key"
        )
        key = (
            "(SELECT num FROM idempotency_keys k "
            "WHERE k.digest = digest({0}) AND k.key = pack_key({0}))"
        )
    else:
        conn.execute("INSERT INTO idempotency_keys SELECT * FROM src.idempotency_keys")
    cols = _ENTITY_COLUMNS.format(
        id="e.id",  # packed, as the live file holds it (schema version 12)
        type=etype,
        name=name,
        snapshot=snapshot,
    )
    cols += _FIRST_COLUMNS.format(key=key.format("e.first_key"), first=first, close=close)
    cols += ", e.room"  # what a turn record's close left of its room (``_close_room``)
    conn.execute(f"INSERT INTO entities SELECT {cols} FROM src.entities e ORDER BY e.rowid")
    # The number of each entity, by its id as the entity rows hold it (12 bytes) and as
    # text (edges).
    conn.execute("CREATE TEMP TABLE by_key (k PRIMARY KEY, num) WITHOUT ROWID")
    conn.execute("INSERT INTO by_key SELECT id, rowid FROM src.entities")
    conn.execute(
        f"INSERT OR IGNORE INTO by_key SELECT {entity_text('id')}, rowid FROM src.entities"
    )
    ref = "(SELECT num FROM by_key WHERE k = {})" if numbered else "{}"
    conn.execute(
        # numbered as the live file holds it (the copies keep the entity rows' rowids)
        "INSERT INTO observations SELECT o.seq, o.id, o.entity_row, "
        "o.entity_type, o.source_id, o.observed_at, o.source_priority, o.observation_source, "
        f"o.specificity_score, o.fields, {key.format('o.idempotency_key')}, o.identity_basis, "
        "o.identity_rule FROM src.observations o ORDER BY o.seq"
    )
    conn.execute(
        f"INSERT INTO relationships SELECT {ref.format('r.source_entity_id')}, "
        f"r.relationship_type, {ref.format('r.target_entity_id')}, r.metadata, r.provenance, "
        "r.seen, r.observation_count, r.last_observation_at, r.computed_at, r.uid "
        "FROM src.relationships r "
        "ORDER BY r.source_entity_id, r.relationship_type, r.target_entity_id"
    )
    # numbered as the live file holds it (the copies keep the entity rows' rowids)
    conn.execute(
        "INSERT INTO conversation_messages SELECT conversation_row, seq, message_row, "
        "restated FROM src.conversation_messages ORDER BY conversation_row, seq"
    )


def _expected(conn: sqlite3.Connection, layout: str, table: str) -> int:
    """The rows ``table`` holds in ``layout``: the source's (no layout moves rows)."""

    def count(sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])

    return count(f"SELECT count(*) FROM src.{table}")


#: what a layout must still hold: every key an observation had, every merged observation
_LOST = {
    "observations": "SELECT count(*) FROM observations WHERE idempotency_key IS NULL",
    "entities": "SELECT count(*) FROM entities WHERE first_id IS NOT NULL AND first_key IS NULL",
}
_HAD = {
    "observations": "SELECT count(*) FROM src.observations o WHERE idempotency_key IS NULL",
    "entities": "SELECT count(*) FROM src.entities WHERE first_id IS NOT NULL "
    "AND first_key IS NULL",
}


def _derived_name(
    entity_type: str, canonical_name: str, snapshot: str, stored: str | bytes
) -> str | bytes | None:
    """NULL where the identity rules give the entity's type and fields this name, and no
    field is stored as derived from the name (a coded message's ``turn_key``, schema
    version 16: the name is then its only copy); else the name as the row stores it
    (``stored``: its rest after the type, schema version 18)."""
    if entity_type in NAMED_TYPES and isinstance(json.loads(snapshot).get("f"), list):
        return stored
    fields = decode_doc_fields(snapshot, canonical_name)[0]
    try:
        found = resolve_identity(entity_type, fields).canonical_name
    except IdentityError:
        return stored
    return None if found == canonical_name else stored


def _sizes(conn: sqlite3.Connection, schema: str = "main") -> dict[str, int]:
    rows = conn.execute(f"SELECT name, sum(pgsize) FROM dbstat('{schema}') GROUP BY name")
    return {name: int(size) for name, size in rows}


def build(store: Path, out: Path, layout: str) -> tuple[dict[str, int], dict[str, int]]:
    """The bytes of each table and index of ``store`` copied in ``layout``, and the rows of
    each table it copies."""
    conn = sqlite3.connect(out, isolation_level=None, uri=True)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute(f"ATTACH 'file:{store}?mode=ro' AS src")
        conn.create_function("word", 1, encode_word, deterministic=True)
        conn.create_function("derived_name", 4, _derived_name, deterministic=True)
        conn.create_function("digest", 1, _digest, deterministic=True)
        conn.create_function("pack_key", 1, pack_key, deterministic=True)
        conn.create_function("codec", 3, _codec, deterministic=True)
        conn.create_function("codec_first", 3, _codec_first, deterministic=True)
        conn.execute("BEGIN")
        entities = _ENTITIES.format(merged=_MERGED)
        if _has(layout, "+keys"):
            keys = _NUMBERED_KEYS.strip().split(";\n")
        else:
            keys = [sql for (sql,) in conn.execute(_KEYS)]
        for ddl in (entities, _OBSERVATIONS, _RELATIONSHIPS, _MESSAGES, *keys):
            conn.execute(ddl)
        for ddl in _INDEXES.strip().split(";\n"):
            conn.execute(ddl)
        conn.execute(_BY_NUM if _has(layout, "+type") else _BY_ID)
        _fill(conn, layout)
        conn.execute("COMMIT")
        for table in _COPIED:
            (a,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            b = _expected(conn, layout, table)
            if a != b or conn.execute(f"SELECT 1 FROM {table} WHERE {_REFS[table]}").fetchone():
                raise SystemExit(f"{layout}: {table} not copied whole ({a} of {b} rows)")
        for table, lost in _LOST.items():
            if conn.execute(lost).fetchone()[0] != conn.execute(_HAD[table]).fetchone()[0]:
                raise SystemExit(f"{layout}: {table} lost an idempotency key")
        rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in _COPIED}
        return _sizes(conn), rows
    finally:
        conn.close()


def _turns(store: Path) -> int:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM entities WHERE entity_type = 'conversation_turn'"
        ).fetchone()
    return int(n)


#: the live file's entity leaves and the bytes they leave unused (a page split leaves room)
_LEAF_ROOM = (
    "SELECT count(*), sum(unused) FROM dbstat WHERE name = 'entities' AND pagetype = 'leaf'"
)


def probe(store: Path, turns: int) -> dict[str, Any]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            raise SystemExit(
                f"{store}: schema version {version}, not {SCHEMA_VERSION} (open it once first)"
            )
        live = _sizes(conn)
        leaves, unused = conn.execute(_LEAF_ROOM).fetchone()
    sizes: dict[str, dict[str, int]] = {}
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layout in LAYOUTS:
            sizes[layout], counted = build(store, Path(tmp) / f"{layout}.db", layout)
            rows[layout] = {t: n / turns for t, n in counted.items()}
    copied = sizes["copy"]
    # The live file's tables, then any a layout adds (an index of its own).
    names = sorted(live, key=lambda n: -live[n])
    names += sorted({n for got in sizes.values() for n in got} - set(live))
    table: dict[str, dict[str, float]] = {}
    for name in names:
        row: dict[str, float] = {"live": live.get(name, 0) / turns}
        for layout in LAYOUTS:
            got = sizes[layout].get(name)
            if name not in live:  # new in this layout: as written
                row[layout] = row[f"est {layout}"] = (got or 0) / turns
            else:
                # Tables no layout copies (FTS5, small ones) count as they are.
                scale = 1.0 if got is None or not copied.get(name) else got / copied[name]
                row[layout] = (got if got is not None else live[name]) / turns
                row[f"est {layout}"] = live[name] * scale / turns
        table[name] = row
    totals = {
        k: sum(r[k] for r in table.values())
        for k in ("live", *LAYOUTS, *(f"est {x}" for x in LAYOUTS))
    }
    return {
        "store": str(store),
        "turns": turns,
        "schema_version": version,
        "layouts": list(LAYOUTS),
        "compact": COMPACT,
        "tables": table,
        "totals": totals,
        "rows_per_turn": rows,
        "entity_leaves": {"leaves": leaves, "unused_bytes": unused or 0},
    }


def render(result: dict[str, Any]) -> str:
    heads = ("live", "est copy", f"est {COMPACT}", f"est {LAYOUTS[-1]}")
    lines = [
        f"bytes per turn ({result['turns']:,} turns, schema version {result['schema_version']}); "
        "est = live x layout / copy, per table",
        f"{'table or index':<36}" + "".join(f"{h:>14}" for h in heads),
    ]
    lines.append("-" * len(lines[1]))
    for name, row in result["tables"].items():
        if max(row[h] for h in heads) >= 1:
            lines.append(f"{name:<36}" + "".join(f"{row[h]:>14,.0f}" for h in heads))
    totals = result["totals"]
    lines.append(f"{'total':<36}" + "".join(f"{totals[h]:>14,.0f}" for h in heads))
    lines.append("\neach layout adds its step to those before (est B/turn, and what it saves):")
    before = totals["live"]
    for layout in LAYOUTS[1:]:
        est = totals[f"est {layout}"]
        mark = "   <- the compact format" if layout == COMPACT else ""
        lines.append(f"  {layout:<10} {est:>8,.0f}  {est - before:>+7,.0f}{mark}")
        before = est
    lines.append(
        "copies as written: " + ", ".join(f"{x} {totals[x]:,.0f}" for x in LAYOUTS) + " B/turn"
    )
    leaf = result.get("entity_leaves")
    if leaf:
        unused, count = leaf["unused_bytes"], leaf["leaves"]
        lines.append(
            f"the live file's entity leaves: {count:,}, {unused / 1024:,.0f} KB unused "
            f"({unused / max(1, count * 4096):.1%} of them)"
        )
    return "\n".join(lines)


def _write_turns(path: Path, turns: int, minted: bool = False) -> None:
    """``turns`` short turns of ``peers.py``, 16 conversations, one caller (``minted``:
    each turn's id a UUID the library mints, not ``t{i}``)."""
    from peers import CONVERSATIONS, _Ours, conversation, prompt, reply

    from neotoma_agent import EmbeddedStore, NeotomaMemory

    async def write() -> None:
        async with _Ours(path) as turn:
            for i in range(turns):
                await turn(i % CONVERSATIONS, i)

    async def write_minted() -> None:
        async with EmbeddedStore.open(path) as store:
            memories = [
                NeotomaMemory(store, conversation_id=conversation(c)) for c in range(CONVERSATIONS)
            ]
            for i in range(turns):
                async with memories[i % CONVERSATIONS].turn(prompt(i)) as t:
                    t.reply = reply(i)

    anyio.run(write_minted if minted else write)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("store", type=Path, nargs="?")
    parser.add_argument("--turns", type=int, help="default: the file's turn records")
    parser.add_argument(
        "--write-turns", type=int, help="probe a fresh file of this many short turns"
    )
    parser.add_argument(
        "--minted-ids", action="store_true", help="--write-turns with turn ids the library mints"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    meta = environment()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store
        if args.write_turns:
            store = Path(tmp) / "turns.db"
            _write_turns(store, args.write_turns, args.minted_ids)
        elif store is None:
            parser.error("give a STORE file or --write-turns N")
        result = probe(store.resolve(), args.turns or _turns(store))
    if args.write_turns:
        result["store"] = f"{args.write_turns:,} short turns (peers.py), 16 conversations"
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps({**result, "meta": meta}, indent=2) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
