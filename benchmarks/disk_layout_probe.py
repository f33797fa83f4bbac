"""Probe: bytes per turn of a store file in layouts not built yet (a measured ceiling).

    python benchmarks/disk_layout_probe.py STORE.db [--turns N] [--json PATH]

Reads a store file of the current schema version (never writes it) and copies its row
tables into fresh files, in their key order, once in the file's own layout (``copy``) and
once per layout probed:

- ``numbers``: the entity number (the ``entities`` rowid) instead of the entity id in every
  secondary table: observations and their entity index, relationships and their target
  index, the conversation index;
- ``+type``: and the entity type as a small code, indexed as (type, number) instead of
  (type, id) (a type's entities by number: a query sorted by id would sort them);
- ``+name``: and no canonical name where the identity rules derive it from the entity's
  type and fields (NULL; a read would derive it again);
- ``+meta``: and each winning observation in the snapshot doc as its seq alone (its id,
  time, priority and source rank read from its row), instead of about 53 bytes of metas.

A copy packs pages fuller than writes in random key order do, so each layout's figure for
the live file is estimated table by table as live x layout / copy (``est``). The FTS5 name
indexes and the small tables are left as they are (counted as in the live file).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from neotoma_agent._identity import IdentityError, resolve_identity
from neotoma_agent.transport.embedded._rows import decode_state, encode_entity, encode_word
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

LAYOUTS = ("copy", "numbers", "+type", "+name", "+meta")

# (name, columns) of the tables and indexes each layout writes; rows come from ``_FILL``.
_ENTITIES = """CREATE TABLE entities (num INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
    entity_type NOT NULL, canonical_name, aliases TEXT NOT NULL, created_at NOT NULL,
    updated_at NOT NULL, snapshot TEXT NOT NULL, observation_count INTEGER NOT NULL,
    last_observation_at, message_count INTEGER NOT NULL)"""
_OBSERVATIONS = """CREATE TABLE observations (seq INTEGER PRIMARY KEY, id NOT NULL,
    entity_id NOT NULL, entity_type NOT NULL, source_id, observed_at NOT NULL,
    source_priority INTEGER NOT NULL, observation_source, specificity_score REAL NOT NULL,
    fields TEXT, idempotency_key TEXT, identity_basis, identity_rule)"""
_RELATIONSHIPS = """CREATE TABLE relationships (source_entity_id NOT NULL,
    relationship_type TEXT NOT NULL, target_entity_id NOT NULL, metadata TEXT NOT NULL,
    provenance TEXT NOT NULL, seen NOT NULL, observation_count INTEGER NOT NULL,
    last_observation_at NOT NULL, computed_at,
    PRIMARY KEY (source_entity_id, relationship_type, target_entity_id)) WITHOUT ROWID"""
_MESSAGES = """CREATE TABLE conversation_messages (conversation_id NOT NULL,
    seq INTEGER NOT NULL, message_id NOT NULL, PRIMARY KEY (conversation_id, seq))
    WITHOUT ROWID"""
_INDEXES = """
CREATE UNIQUE INDEX observations_by_entity ON observations (entity_id, id);
CREATE INDEX relationships_by_target ON relationships (target_entity_id, relationship_type);
"""
# No layout changes the keys: they are copied in the file's own layout.
_KEYS = "SELECT sql FROM src.sqlite_master WHERE tbl_name = 'idempotency_keys' AND sql NOT NULL"
_COPIED = ("entities", "observations", "relationships", "conversation_messages", "idempotency_keys")
# A reference that found no entity number.
_REFS = {
    "entities": "id IS NULL",
    "observations": "entity_id IS NULL",
    "relationships": "source_entity_id IS NULL OR target_entity_id IS NULL",
    "conversation_messages": "conversation_id IS NULL OR message_id IS NULL",
    "idempotency_keys": "key IS NULL",
}
_BY_ID = "CREATE INDEX entities_by_type ON entities (entity_type, id);"
_BY_NUM = "CREATE INDEX entities_by_type ON entities (entity_type);"

_ENTITY_COLUMNS = (
    "rowid, id, {type}, {name}, aliases, created_at, updated_at, {snapshot}, "
    "observation_count, last_observation_at, message_count"
)


def _fill(conn: sqlite3.Connection, layout: str) -> None:
    """Copy the rows of ``src`` into ``main`` in ``layout``."""
    numbered = layout != "copy"
    # Each layout adds its change to the ones before it.
    etype = "word(entity_type)" if layout in LAYOUTS[2:] else "entity_type"
    name = "canonical_name"
    if layout in LAYOUTS[3:]:
        name = "derived_name(entity_type, canonical_name, snapshot)"
    snapshot = "snapshot"
    if layout in LAYOUTS[4:]:
        snapshot = (
            "json_set(snapshot, '$.o', (SELECT json_group_array(json_extract(value, '$[1]')) "
            "FROM json_each(snapshot, '$.o')))"
        )
    cols = _ENTITY_COLUMNS.format(type=etype, name=name, snapshot=snapshot)
    conn.execute(f"INSERT INTO entities SELECT {cols} FROM src.entities ORDER BY rowid")
    # The number of each entity, by its id as observations hold it (12 bytes) and as text.
    conn.execute("CREATE TEMP TABLE by_key (k PRIMARY KEY, num) WITHOUT ROWID")
    conn.execute("INSERT INTO by_key SELECT entity_key(id), rowid FROM src.entities")
    conn.execute("INSERT OR IGNORE INTO by_key SELECT id, rowid FROM src.entities")
    ref = "(SELECT num FROM by_key WHERE k = {})" if numbered else "{}"
    conn.execute(
        f"INSERT INTO observations SELECT seq, id, {ref.format('entity_id')}, entity_type, "
        "source_id, observed_at, source_priority, observation_source, specificity_score, "
        "fields, idempotency_key, identity_basis, identity_rule FROM src.observations "
        "ORDER BY seq"
    )
    conn.execute(
        f"INSERT INTO relationships SELECT {ref.format('source_entity_id')}, "
        f"relationship_type, {ref.format('target_entity_id')}, metadata, provenance, seen, "
        "observation_count, last_observation_at, computed_at FROM src.relationships "
        "ORDER BY source_entity_id, relationship_type, target_entity_id"
    )
    conn.execute(
        f"INSERT INTO conversation_messages SELECT {ref.format('conversation_id')}, seq, "
        f"{ref.format('message_id')} FROM src.conversation_messages "
        "ORDER BY conversation_id, seq"
    )
    conn.execute("INSERT INTO idempotency_keys SELECT * FROM src.idempotency_keys")


def _derived_name(entity_type: str, canonical_name: str, snapshot: str) -> str | None:
    """NULL where the identity rules give the entity's type and fields this name."""
    fields = decode_state(snapshot, 0, None).fields
    try:
        found = resolve_identity(entity_type, fields).canonical_name
    except IdentityError:
        return canonical_name
    return None if found == canonical_name else canonical_name


def _sizes(conn: sqlite3.Connection, schema: str = "main") -> dict[str, int]:
    rows = conn.execute(f"SELECT name, sum(pgsize) FROM dbstat('{schema}') GROUP BY name")
    return {name: int(size) for name, size in rows}


def build(store: Path, out: Path, layout: str) -> dict[str, int]:
    conn = sqlite3.connect(out, isolation_level=None, uri=True)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute(f"ATTACH 'file:{store}?mode=ro' AS src")
        conn.create_function("entity_key", 1, encode_entity, deterministic=True)
        conn.create_function("word", 1, encode_word, deterministic=True)
        conn.create_function("derived_name", 3, _derived_name, deterministic=True)
        conn.execute("BEGIN")
        keys = [sql for (sql,) in conn.execute(_KEYS)]
        for ddl in (_ENTITIES, _OBSERVATIONS, _RELATIONSHIPS, _MESSAGES, *keys):
            conn.execute(ddl)
        for ddl in _INDEXES.strip().split(";\n"):
            conn.execute(ddl)
        conn.execute(_BY_NUM if layout in LAYOUTS[2:] else _BY_ID)
        _fill(conn, layout)
        conn.execute("COMMIT")
        for table in _COPIED:
            (a,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            (b,) = conn.execute(f"SELECT count(*) FROM src.{table}").fetchone()
            if a != b or conn.execute(f"SELECT 1 FROM {table} WHERE {_REFS[table]}").fetchone():
                raise SystemExit(f"{layout}: {table} not copied whole ({a} of {b} rows)")
        return _sizes(conn)
    finally:
        conn.close()


def _turns(store: Path) -> int:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM entities WHERE entity_type = 'conversation_turn'"
        ).fetchone()
    return int(n)


def probe(store: Path, turns: int) -> dict[str, Any]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            raise SystemExit(
                f"{store}: schema version {version}, not {SCHEMA_VERSION} (open it once first)"
            )
        live = _sizes(conn)
    sizes: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layout in LAYOUTS:
            sizes[layout] = build(store, Path(tmp) / f"{layout}.db", layout)
    copied = sizes["copy"]
    names = sorted(live, key=lambda n: -live[n])
    table: dict[str, dict[str, float]] = {}
    for name in names:
        row: dict[str, float] = {"live": live[name] / turns}
        for layout in LAYOUTS:
            got = sizes[layout].get(name)
            # Tables no layout copies (FTS5, small ones) count as they are.
            scale = 1.0 if got is None or not copied.get(name) else got / copied[name]
            row[layout] = (got if got is not None else live[name]) / turns
            row[f"est {layout}"] = live[name] * scale / turns
        table[name] = row
    totals = {
        k: sum(r[k] for r in table.values())
        for k in ("live", *LAYOUTS, *(f"est {x}" for x in LAYOUTS))
    }
    return {"store": str(store), "turns": turns, "tables": table, "totals": totals}


def render(result: dict[str, Any]) -> str:
    heads = ("live", *(f"est {x}" for x in LAYOUTS[1:]))
    lines = [
        f"bytes per turn ({result['turns']:,} turns); est = live x layout / copy, per table",
        f"{'table or index':<32}" + "".join(f"{h:>13}" for h in heads),
    ]
    lines.append("-" * len(lines[1]))
    for name, row in result["tables"].items():
        if row["live"] >= 1:
            lines.append(f"{name:<32}" + "".join(f"{row[h]:>13,.0f}" for h in heads))
    totals = result["totals"]
    lines.append(f"{'total':<32}" + "".join(f"{totals[h]:>13,.0f}" for h in heads))
    lines.append(
        "copies as written: " + ", ".join(f"{x} {totals[x]:,.0f}" for x in LAYOUTS) + " B/turn"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--turns", type=int, help="default: the file's turn records")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = probe(args.store.resolve(), args.turns or _turns(args.store))
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
