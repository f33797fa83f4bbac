"""The turn records as the versions before ``CLOSE_ROW`` held them: each close a row holds
(``_close_row``) written back as a row of ``observations``, ordered before its record's
later rows (their seqs renumbered after it, in the snapshot and the key lists too), and the
four columns dropped; for the copies of a file "as the version before held it" (opened
again, the migration moves the closes back into their rows)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from neotoma_agent.transport.embedded import _schema
from neotoma_agent.transport.embedded._close_row import CLOSE_ROW, CLOSE_SEQ
from neotoma_agent.transport.embedded._codec import first_fields_sql, install
from neotoma_agent.transport.embedded._key_rows import key_seqs, pack_seqs
from neotoma_agent.transport.embedded._restatement import MARK
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["HELD", "closes_kept", "held_closes", "unclose"]

#: the version whose rows may hold their close
HELD = MIGRATIONS.index(CLOSE_ROW) + 1


def held_closes(conn: sqlite3.Connection) -> int:
    """How many closes the entity rows of the file of ``conn`` hold."""
    return int(
        conn.execute("SELECT count(*) FROM entities WHERE close_id IS NOT NULL").fetchone()[0]
    )


def _renumbered(doc: str, seqs: dict[float, int]) -> str:
    data = json.loads(doc)
    data["o"] = [
        seqs.get(m, m)
        if type(m) in (int, float)
        else [m[0], seqs.get(m[1], m[1]), *m[2:]]
        if type(m) is list
        else m
        for m in data["o"]
    ]
    if data.get("s") in seqs:
        data["s"] = seqs[data["s"]]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def unclose(conn: sqlite3.Connection, drop: bool = True) -> int:
    """Each close an entity row of the file of ``conn`` (in a transaction) holds written
    back as a row (its record's later rows renumbered after it: a row holds its close only
    where there are none, ``_close_row.materialize``), the columns dropped (with
    ``drop``; without, the file is one this release reads, every close a row); how
    many."""
    install(conn)  # (the field codec's SQL functions: a coded close's fields as JSON)
    found = conn.execute(
        "SELECT rowid, close_id, entity_type, close_source, "
        "CASE WHEN typeof(close_at) = 'integer' AND typeof(created_at) = 'integer' "
        "THEN created_at + close_at ELSE close_at END, first_priority, first_osource, "
        f"first_specificity, {first_fields_sql('close_fields')}, first_basis, first_rule, "
        "first_fields, snapshot, type_code "
        "FROM entities WHERE close_id IS NOT NULL ORDER BY rowid"
    ).fetchall()
    keys: dict[int, int] = {}  # a key's -rowid of a close, by the close's rowid
    remap: dict[int, int] = {}  # a later row's seq, renumbered
    for row in found:
        (rowid, ident, _, source, at, priority, osource, spec, fields, basis, rule) = row[:11]
        first_fields, doc, type_code = row[11:]
        later = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM observations WHERE entity_row = ? ORDER BY seq", (rowid,)
            )
        ]
        top = int(conn.execute("SELECT coalesce(max(seq), 0) FROM observations").fetchone()[0])
        seqs: dict[float, int] = {CLOSE_SEQ: top + 1}
        for n, seq in enumerate(later):
            seqs[seq] = remap[seq] = top + 2 + n
        for seq in later:  # (moved past every seq, in order: none collides)
            conn.execute("UPDATE observations SET seq = ? WHERE seq = ?", (seqs[seq], seq))
        stored = MARK if fields is not None and fields == first_fields else None
        conn.execute(
            "INSERT INTO observations (seq, id, entity_row, entity_type, source_id, "
            "observed_at, source_priority, observation_source, specificity_score, fields, "
            "idempotency_key, identity_basis, identity_rule) "
            f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {stored or '?'}, NULL, ?, ?)",
            (
                top + 1,
                ident,
                rowid,
                type_code,
                source,
                at,
                priority,
                osource,
                spec,
                *(() if stored else (fields,)),
                basis,
                rule,
            ),
        )
        conn.execute(
            "UPDATE entities SET snapshot = ? WHERE rowid = ?", (_renumbered(doc, seqs), rowid)
        )
        keys[rowid] = top + 1
    for key_row in conn.execute(
        "SELECT uid, digest, slot, source_id, observations FROM idempotency_keys"
    ).fetchall():
        uid, digest, slot, source, listed = key_row
        old = key_seqs(listed)
        new = [remap.get(n, n) for n in old]
        for i, n in enumerate(new):
            if n < 0 and -n in keys:
                held = conn.execute(
                    "SELECT close_source FROM entities WHERE rowid = ?", (-n,)
                ).fetchone()
                if held is not None and held[0] == source:
                    new[i] = keys[-n]
        if new != old:
            conn.execute(
                "UPDATE idempotency_keys SET observations = ? "
                "WHERE uid = ? AND digest = ? AND slot = ?",
                (pack_seqs(new), uid, digest, slot),
            )
    if drop:
        for column in ("close_fields", "close_at", "close_source", "close_id"):
            conn.execute(f"ALTER TABLE entities DROP COLUMN {column}")
    else:
        conn.execute(
            "UPDATE entities SET close_id = NULL, close_source = NULL, close_at = NULL, "
            "close_fields = NULL WHERE close_id IS NOT NULL"
        )
    return len(found)


@contextmanager
def closes_kept() -> Iterator[None]:
    """Upgrades that move no close into its row (the step's columns added, every close a
    row: the reads of this release read both), for the tests of an earlier step that
    compare an upgraded file's rows with the older file's."""
    saved = _schema._AFTER[CLOSE_ROW]
    _schema._AFTER[CLOSE_ROW] = lambda conn: None
    try:
        yield
    finally:
        _schema._AFTER[CLOSE_ROW] = saved
