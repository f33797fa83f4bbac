"""Stores whose protocol records' fields are in the field codec (schema version 16), and the
same stores as version 15 held them.

``uncode`` writes every coded snapshot "f" and ``first_fields`` back as the JSON object it
codes (the rest of each doc as it was): the helpers that write a file back to an older
version call it first, and ``uncoded_copy`` writes a copy of a (closed) schema-15 file at
version 15. Opening it upgrades it again; every read must answer the same on both, and so
must every write after.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from conversation_index_support import unnumber
from version_copy_support import copy_at_version

from neotoma_agent.transport.embedded._codec import decode_fields
from neotoma_agent.transport.embedded._codec_migration import FIELD_CODEC
from neotoma_agent.transport.embedded._rows import dumps_acyclic
from neotoma_agent.transport.embedded._schema import MIGRATIONS

#: the version before the protocol records' fields were coded
BEFORE = MIGRATIONS.index(FIELD_CODEC)

_decode = json.JSONDecoder().raw_decode


def _uncoded_doc(doc: str, name: str) -> str:
    if not doc.startswith('{"f":['):
        return doc
    coded, end = _decode(doc, 5)
    return '{"f":' + dumps_acyclic(decode_fields(coded, name)) + doc[end:]


def _uncoded_first(text: str | None, name: str) -> str | None:
    if text is None or not text.startswith("["):
        return text
    return dumps_acyclic(decode_fields(json.loads(text), name))


def uncode(conn: sqlite3.Connection) -> int:
    """Every coded "f" and ``first_fields`` of the file as the object it codes (inside the
    caller's transaction; the caller sets the version); how many rows changed."""
    columns = [r[1] for r in conn.execute("PRAGMA table_xinfo(entities)")]
    first = "first_fields" if "first_fields" in columns else "NULL"
    rows = conn.execute(
        f"SELECT rowid, canonical_name, snapshot, {first} FROM entities "
        "WHERE snapshot LIKE '{\"f\":[%' OR " + first + " LIKE '[%'"
    ).fetchall()
    for rowid, name, doc, fields in rows:
        conn.execute(
            f"UPDATE entities SET snapshot = ?{', first_fields = ?' if first != 'NULL' else ''} "
            "WHERE rowid = ?",
            (
                _uncoded_doc(doc, name),
                *((_uncoded_first(fields, name),) if first != "NULL" else ()),
                rowid,
            ),
        )
    return len(rows)


def uncoded_copy(path: Path, to: Path) -> Path:
    return copy_at_version(path, to, BEFORE, unnumber, uncode)


def coded_rows(path: Path) -> tuple[int, int]:
    """(snapshots whose "f" is coded, ``first_fields`` coded) of the file at ``path``."""
    with closing(sqlite3.connect(path)) as conn:
        (docs,) = conn.execute(
            "SELECT count(*) FROM entities WHERE snapshot LIKE '{\"f\":[%'"
        ).fetchone()
        (firsts,) = conn.execute(
            "SELECT count(*) FROM entities WHERE first_fields LIKE '[%'"
        ).fetchone()
    return int(docs), int(firsts)
