"""Stores whose turn records list their observation rows by seq (schema version 25), and the
same stores as version 24 held them.

``unseq`` writes every snapshot's positive number in ``"o"`` (an observation row listed by
its seq: ``_row_metas``) back as that row's meta in full (``[id, seq, time, priority,
source rank]``, the specificity after them when it is not 1.0), the rest of each doc as it
was: the helpers that write a file back to an older version call it first
(``version_copy_support.copy_at_version`` at version 24 is the file the release before the
step wrote). Opening it upgrades it again; every read must answer the same on both, and so
must every write after.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from neotoma_agent.transport.embedded._row_metas import SEQ_METAS, full_meta
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["BEFORE", "by_seq", "unseq"]

#: the version before turn records listed their observation rows by seq
BEFORE = MIGRATIONS.index(SEQ_METAS)


def _listed(doc: Any) -> list[int]:
    metas = doc.get("o") if isinstance(doc, dict) else None
    return [m for m in metas or () if type(m) is int and m > 0]


def by_seq(conn: sqlite3.Connection) -> int:
    """How many snapshots list an observation row by its seq."""
    return sum(
        1 for (text,) in conn.execute("SELECT snapshot FROM entities") if _listed(json.loads(text))
    )


def unseq(conn: sqlite3.Connection) -> int:
    """Every snapshot's observation rows listed by seq written back in full; how many
    snapshots changed."""
    count = 0
    for rowid, text in conn.execute("SELECT rowid, snapshot FROM entities").fetchall():
        doc = json.loads(text)
        if not _listed(doc):
            continue
        metas = []
        for m in doc["o"]:
            if type(m) is int and m > 0:
                row = conn.execute(
                    "SELECT id, observed_at, source_priority, observation_source, "
                    "specificity_score FROM observations WHERE seq = ?",
                    (m,),
                ).fetchone()
                metas.append(full_meta(tuple(row), m))
            else:
                metas.append(m)
        doc["o"] = metas
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
        conn.execute("UPDATE entities SET snapshot = ? WHERE rowid = ?", (text, rowid))
        count += 1
    return count
