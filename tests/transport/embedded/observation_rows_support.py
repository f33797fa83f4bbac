"""What a store file holds in its observation rows, read with plain ``sqlite3``."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from neotoma_agent.transport.embedded._rows import encode_entity


def stored_fields(path: Path, entity_id: str) -> list[str | None]:
    """The stored ``fields`` of an entity's observations, newest first (its entity row's
    first one last: ``first_fields``; a turn record's close its row holds before it:
    ``close_fields``, ``_close_row``)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT fields FROM (SELECT fields, seq FROM observations "
            "WHERE entity_row = (SELECT rowid FROM entities WHERE id = ?1) "
            "UNION ALL SELECT first_fields, 0 FROM entities WHERE id = ?1 "
            "AND first_id IS NOT NULL UNION ALL SELECT close_fields, 0.5 FROM entities "
            "WHERE id = ?1 AND close_id IS NOT NULL) ORDER BY seq DESC",
            (encode_entity(entity_id),),
        ).fetchall()
    return [r[0] for r in rows]


def every_table(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of the store file at ``path``, its rows sorted (two files compared)."""
    with sqlite3.connect(path) as conn:
        names = [
            n
            for (n,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        rows = {n: sorted(conn.execute(f'SELECT * FROM "{n}"'), key=repr) for n in names}
    conn.close()
    return rows
